"""What a worker process runs beside its task pool: the dispatcher loop (workers/dispatcher.py), the
webhook sender threads (workers/webhooks.py), and the hand-back of items it received but never started.

A Celery bootstep ties the loop's life to the worker's, in server mode (`celery worker`) and in embedded
mode (the in-process `WorkController`) alike. Every worker runs it; a Redis lock lets one of them lead.

A worker takes messages ahead of its free threads, and in server mode they leave Redis as it takes them
(workers/broker.py). A warm shutdown finishes the running tasks and drops the waiting ones; their items
would wait until their dispatch goes stale (`FACTGATE_DISPATCH_STALE_S`) to be sent again. So the worker
notes which items it received and has not started, and at shutdown makes them dispatchable at once.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any

from celery import bootsteps, signals

from jobs.scheduling import forget_dispatches
from models import session_scope
from workers.context import get_context
from workers.dispatcher import Dispatcher
from workers.fitness import CONSUME_HOLD_S, keeps_consuming
from workers.webhooks import start_senders, stop_senders

log = logging.getLogger("factgate.workers")

ITEM_TASK = "factgate.run_item"
ITEMS_TASK = "factgate.run_items"  # several items, of a stage that calls nothing upstream
_waiting: dict[str, list[int]] = {}  # task id -> its items: received by this process, not started yet
_waiting_lock = threading.Lock()


@signals.task_received.connect
def _note_received(request: Any = None, **_: Any) -> None:
    name = getattr(request, "name", None) if request is not None else None
    if request is None or name not in (ITEM_TASK, ITEMS_TASK) or not request.args:
        return
    first = request.args[0]
    with _waiting_lock:
        _waiting[request.id] = [int(i) for i in first] if name == ITEMS_TASK else [int(first)]


@signals.task_prerun.connect
def _note_started(task_id: str | None = None, **_: Any) -> None:
    if task_id is not None:
        with _waiting_lock:
            _waiting.pop(task_id, None)


def waiting_items() -> list[int]:
    """Items whose message this process received and whose task has not started."""
    with _waiting_lock:
        return sorted({i for ids in _waiting.values() for i in ids})


@signals.worker_ready.connect
def _freeze_startup_objects(**_: Any) -> None:
    """Move what start-up allocated (modules, the Celery app, SQLAlchemy metadata) out of the garbage
    collector's reach. A full collection traverses every tracked object and stops every thread meanwhile;
    over that many objects the pause is long enough to push a request past its limiter slot (the
    headroom's slack), and a frozen object is never traversed again. They are never freed anyway: they
    live as long as the worker. The pause before and after: docs/profiles/README.md, "Garbage
    collection"."""
    gc.freeze()
    log.debug("froze %d start-up objects out of the garbage collector", gc.get_freeze_count())


@signals.worker_ready.connect
def _open_database_connections(sender: Any = None, **_: Any) -> None:
    """Open the worker's database connections before the first job instead of during it.

    Why: otherwise a freshly started worker's first job begins with every thread opening its own Postgres
    connection at once, in the first second of a run at the upstream's limit, and that run starts and ends
    later than the next ones (docs/profiles/README.md, "Connections opened ahead"). As many as the pool
    keeps (its `size`, or the thread count if that is smaller) are opened and handed back; a failure only
    means they open later."""
    app = getattr(sender, "app", None)
    if app is None:
        return
    try:
        engine = get_context(app).engine
        keep = getattr(engine.pool, "size", lambda: 0)()
        threads = int(app.conf.worker_concurrency or keep)
        conns = [engine.connect() for _ in range(max(0, min(keep, threads)))]
        for conn in conns:
            conn.close()
    except Exception:
        log.warning("could not open the database connections ahead of the first job", exc_info=True)


@signals.worker_shutdown.connect
def _flush_metrics(sender: Any = None, **_: Any) -> None:
    """Write the limiter waits counted since the last write (they are written once a second)."""
    if sender is not None:
        get_context(sender.app).waits.flush()


@signals.worker_shutdown.connect
def _give_back_waiting(sender: Any = None, **_: Any) -> None:
    """After a warm shutdown (the pool is stopped: nothing more starts), make the items whose tasks were
    dropped dispatchable again. Only items still pending and dispatched change; if the database is away,
    their dispatch goes stale as before."""
    with _waiting_lock:
        ids = sorted({i for items in _waiting.values() for i in items})
        _waiting.clear()
    if not ids or sender is None:
        return
    try:
        with session_scope(get_context(sender.app).sessions) as session:
            given = forget_dispatches(session, ids)
    except Exception:
        log.warning("could not give back %d received items; they go stale instead", len(ids), exc_info=True)
        return
    if given:
        log.info("gave back %d items received but not started", given)


class _StopsOnShutdown(bootsteps.StartStopStep):
    """A step that stops the same way whether its blueprint stops it or shuts it down."""

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)


class DispatcherStep(_StopsOnShutdown):
    """Start the dispatcher loop with the worker and stop it on shutdown."""

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.dispatcher: Dispatcher | None = None

    def start(self, parent: Any) -> None:
        if self.dispatcher is None:
            ctx = get_context(parent.app)
            # Beat as a host from the start, naming the items received and not started too, so that a
            # host that goes silent has its slots freed by the leader (workers/leases.py).
            ctx.leases.watch_waiting(waiting_items)
            ctx.leases.start()
            self.dispatcher = Dispatcher(ctx, parent.app).start()
            parent.factgate_dispatcher = self.dispatcher  # ConsumeWhileFitStep reads its fitness figures

    def stop(self, parent: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()
            self.dispatcher = None


class WebhookSendersStep(_StopsOnShutdown):
    """Start this process's webhook senders with the worker and stop them on shutdown: threads of their
    own, so a slow receiver never holds a thread of the task pool."""

    def start(self, parent: Any) -> None:
        start_senders(parent.app)

    def stop(self, parent: Any) -> None:
        stop_senders(parent.app)


CONSUME_CHECK_S = 1.0


class ConsumeWhileFitStep(_StopsOnShutdown):
    """Stop taking task messages while this host is slow beside another live one, and take them again
    when the rule says so (`workers.fitness.keeps_consuming`; the figures are the dispatcher's fitness
    beats). The check runs every CONSUME_CHECK_S on the consumer's own timer, in the consumer's thread, so
    cancelling and adding the queue never races the consumer's loop; what this host already holds runs to
    its end."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None
        self.paused_at: float | None = None  # monotonic: when this host stopped consuming
        self.queues: list[str] = []

    def start(self, parent: Any) -> None:
        self.tref = parent.timer.call_repeatedly(CONSUME_CHECK_S, self.check, (parent,), priority=10)

    def stop(self, parent: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    def check(self, parent: Any, now: float | None = None) -> None:
        dispatcher = getattr(getattr(parent, "controller", None), "factgate_dispatcher", None)
        if dispatcher is None:
            return
        moment = time.monotonic() if now is None else now
        paused_for = None if self.paused_at is None else moment - self.paused_at
        others = list(dispatcher.others_rtt_s.values())
        want = keeps_consuming(dispatcher.rtt_s, others, paused_for)
        try:
            if self.paused_at is None and not want:
                self.queues = sorted(q.name for q in parent.task_consumer.queues)
                for name in self.queues:
                    parent.cancel_task_queue(name)
                self.paused_at = moment
                log.warning(
                    "worker: this host is slow (round trip %.0f ms, another host's %.0f ms); it stops "
                    "taking task messages for at least %.0f s",
                    (dispatcher.rtt_s or 0.0) * 1000,
                    min(others, default=0.0) * 1000,
                    CONSUME_HOLD_S,
                )
            elif self.paused_at is not None and want:
                for name in self.queues:
                    parent.add_task_queue(name)
                self.paused_at = None
                log.warning("worker: this host takes task messages again")
        except Exception:
            log.warning("worker: could not change what this host consumes", exc_info=True)
