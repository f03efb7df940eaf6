"""Embedded mode: a real Celery worker and the sweeper running in threads of this process.

`factgate check` and `factgate serve` use it when no REDIS_URL is set: kombu's in-memory broker and
result store live in this process, so the worker must too. It is the same worker as in server mode —
the same tasks, chords, leases and sweeper, not `task_always_eager` — started as a `WorkController`
(threads pool) in a daemon thread. The sweeper is a timer thread that enqueues `factgate.sweep` like
Celery beat would.

Waiting on results: `AsyncResult.get()` raises in a process that hosts a worker, so callers watch the
database (job status and item counts), which is the source of truth anyway.

Starting over after an interrupted run: the in-memory broker starts empty, so any item marked as
dispatched has no message behind it. `start()` clears those marks for live jobs and sweeps at once,
so a resumed job continues immediately instead of after a lease period.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any

from celery import Celery
from celery.worker import WorkController
from celery.worker import state as worker_state

from config import Settings
from jobs.scheduling import forget_stale_dispatches
from jobs.sweeper import live_job_ids
from models import session_scope
from workers.api import PURGE
from workers.app import make_celery
from workers.context import get_context, reset_contexts

log = logging.getLogger("factgate.workers")

SWEEP_TASK = "factgate.sweep"

QUEUE = "celery"
# Celery's built-in no-op: sent at shutdown only to wake a consumer blocked polling an empty queue.
WAKE_TASK = "celery.accumulate"
READY_TIMEOUT_S = 30.0
# Embedded defaults: one machine, SQLite; more threads only queue on SQLite's single writer.
DEFAULT_CONCURRENCY = 8


class _Controller(WorkController):
    """A WorkController that says when its consumer is up (what `ready` waits for)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.consumer_ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        super().on_consumer_ready(consumer)
        self.consumer_ready.set()


class EmbeddedWorker:
    """A Celery worker plus sweeper in daemon threads; use as a context manager or start()/stop().

    One per process: Celery's shutdown flag is process-wide.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        concurrency: int | None = None,
        sweep_interval_s: float | None = None,
        loglevel: str = "WARNING",
    ) -> None:
        if settings.redis_url:
            raise ValueError("an embedded worker needs the in-memory broker: REDIS_URL must be unset")
        self.settings = settings
        self.concurrency = concurrency or min(settings.worker_concurrency, DEFAULT_CONCURRENCY)
        self.sweep_interval_s = (
            sweep_interval_s if sweep_interval_s is not None else settings.sweep_interval_s
        )
        self.loglevel = loglevel
        self.app: Celery = make_celery(settings)
        # kombu warns about `memory://` without a host on every connection; the host means nothing here.
        # No remote control, events or heartbeats: nothing outside this process can talk to it.
        self.app.conf.update(
            broker_url="memory://localhost/",
            worker_enable_remote_control=False,
            worker_send_task_events=False,
        )
        self._controller: _Controller | None = None
        self._thread: threading.Thread | None = None
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self, timeout: float = READY_TIMEOUT_S) -> EmbeddedWorker:
        """Start the worker thread, wait until it consumes, re-drive live jobs, start the sweeper."""
        if self._thread is not None:
            raise RuntimeError("embedded worker already started")
        # Pool threads resolve `current_app` to the default app: it must be this one.
        self.app.set_default()
        self.app.set_current()
        worker_state.should_stop = None
        worker_state.should_terminate = None
        self._purge()
        controller = _Controller(
            app=self.app,
            hostname=f"embedded-{id(self):x}@localhost",
            pool="threads",
            concurrency=self.concurrency,
            loglevel=self.loglevel,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        self._controller = controller
        self._thread = threading.Thread(target=controller.start, name="factgate-embedded-worker", daemon=True)
        self._thread.start()
        if not controller.consumer_ready.wait(timeout):
            self.stop(timeout=5)
            raise RuntimeError(f"the embedded worker did not start within {timeout:.0f} s")
        self.redrive()
        self._sweeper = threading.Thread(
            target=self._sweep_loop, name="factgate-embedded-sweeper", daemon=True
        )
        self._sweeper.start()
        return self

    def _purge(self) -> None:
        """Empty the in-memory queue: the broker is process-wide, and messages left by an earlier
        embedded worker of this process (shutdown no-ops, unstarted items) belong to nobody now."""
        with self.app.connection_for_write() as conn:
            channel: Any = conn.default_channel
            channel.queue_purge(QUEUE)

    def redrive(self) -> int:
        """Clear dispatch marks of live jobs (the fresh in-memory broker holds no message for them)
        and, if there are any, enqueue a sweep, which starts them and dispatches their pending items.
        Returns the number of live jobs."""
        ctx = get_context(self.app)
        with session_scope(ctx.sessions) as session:
            live = live_job_ids(session)
            forget_stale_dispatches(session, 0.0)
        if live:
            # Only then: on SQLite, create_job's savepoint commits the job row before its items,
            # and a sweep landing in between would finalize the job empty.
            self.sweep_now()
        return len(live)

    def sweep_now(self) -> None:
        """Enqueue one sweep (what beat does on its schedule)."""
        self.app.send_task(SWEEP_TASK)

    def _sweep_loop(self) -> None:
        """Sweeps every `sweep_interval_s`, and a purge (deleted and expired jobs) at the first tick and then
        every FACTGATE_PURGE_INTERVAL_S, as beat schedules both in server mode."""
        purge_every = get_context(self.app).settings.purge_interval_s
        purged_at: float | None = None
        while not self._stop.wait(self.sweep_interval_s):
            try:
                self.sweep_now()
                now = time.monotonic()
                if purged_at is None or now - purged_at >= purge_every:
                    self.app.send_task(PURGE)
                    purged_at = now
            except Exception:  # a failed enqueue is retried on the next tick
                log.warning("embedded sweeper could not enqueue a sweep", exc_info=True)

    def stop(self, timeout: float = 30.0) -> bool:
        """Warm shutdown: no new tasks, running ones finish (up to `timeout`). True if it stopped."""
        self._stop.set()
        stopped = True
        thread = self._thread
        if thread is not None and thread.is_alive():
            worker_state.should_stop = 0  # type: ignore[assignment]  # the consumer loop checks this flag between polls…
            try:
                # …which an empty queue delays by 2 s per poll, and the loop polls once more after
                # seeing the flag: one no-op message ends each of those two polls.
                for _ in range(2):
                    self.app.send_task(WAKE_TASK, args=[None])
            except Exception:
                log.debug("could not wake the embedded worker", exc_info=True)
            thread.join(timeout)
            stopped = not thread.is_alive()
            if not stopped:
                log.warning(
                    "embedded worker still busy after %.0f s; leaving it to exit with the process", timeout
                )
        if self._sweeper is not None:
            self._sweeper.join(1.0)
        if stopped:
            worker_state.should_stop = None
            reset_contexts()
        self._thread = None
        self._sweeper = None
        return stopped

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> EmbeddedWorker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
