"""Celery signal handlers (log context, worker logging) and the worker-side metrics kept in Redis.

Log context: each task binds the ids it carries — `item_id` for `run_item`, `job_id` for the job-level
tasks — before it runs and unbinds after, so every record logged while it runs names them
(config/logging.py). Worker processes log through factgate's structured handler instead of Celery's.

Metrics: the web process serves /metrics, but limiter waits and 429s happen in worker processes on
other machines. They are counted in Redis (the same store the limiter uses, so embedded mode's
in-process store works too) and web/metrics.py reads them back through the public read-only module
workers/metrics.py, which also holds the key and buckets written here. A failed write is logged and
ignored: a metric must never fail an upstream call.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Mapping
from typing import Any

import redis as redis_lib
from celery import signals

from config.logging import bind, configure_logging, unbind
from workers.metrics import METRICS_KEY, WAIT_BUCKETS, bucket_field

log = logging.getLogger("factgate.workers")

JOB_TASKS = ("factgate.start_job", "factgate.after_window")
ITEM_TASKS = ("factgate.run_item",)
ITEMS_TASK = "factgate.run_items"

_tokens: dict[str, contextvars.Token[Mapping[str, str]]] = {}
_tokens_lock = threading.Lock()


# --- log context per task ------------------------------------------------------------------------------


def task_log_fields(task_name: str, args: Any) -> dict[str, object]:
    """The ids a task's arguments carry (tasks take ids, never objects)."""
    first = args[0] if isinstance(args, list | tuple) and args else None
    if first is None:
        return {}
    if task_name in ITEM_TASKS:
        return {"item_id": first}
    if task_name == ITEMS_TASK:
        return {"item_ids": first}
    if task_name in JOB_TASKS:
        return {"job_id": first}
    return {}


@signals.task_prerun.connect
def _bind_task_ids(task_id: str | None = None, task: Any = None, args: Any = None, **_: Any) -> None:
    if task_id is None or task is None:
        return
    fields = task_log_fields(getattr(task, "name", ""), args)
    token = bind(**fields)
    with _tokens_lock:
        _tokens[task_id] = token


@signals.task_postrun.connect
def _unbind_task_ids(task_id: str | None = None, **_: Any) -> None:
    if task_id is None:
        return
    with _tokens_lock:
        token = _tokens.pop(task_id, None)
    if token is not None:
        # Postrun in another context than prerun leaves nothing of ours to undo there.
        with contextlib.suppress(ValueError, RuntimeError):
            unbind(token)


# Lines logged for every item at INFO: Celery's "Task ... received" and "Task ... succeeded in ...", and
# httpx's "HTTP Request: POST ..." for every upstream attempt — three records per item, hundreds a second
# at full speed, each formatted and written on the item's path (docs/profiles/README.md, "Per-item
# overhead outside our code"). What an item did is in the
# database (its status, output and `api_calls` with their request ids); failures are still logged, and the
# lines come back at DEBUG (where clients/perplexity.py also logs every attempt with its request id).
PER_TASK_LOGGERS = ("celery.app.trace", "celery.worker.strategy", "httpx")


@signals.setup_logging.connect
def _worker_logging(loglevel: Any = None, **_: Any) -> None:
    """Worker processes log structured lines (a receiver here also stops Celery's own setup).

    Runs before the worker builds its task tracers, which read their loggers' levels once.
    """
    configure_logging(loglevel if loglevel else None)
    quiet = logging.getLogger().getEffectiveLevel() > logging.DEBUG
    for name in PER_TASK_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.NOTSET)


# --- limiter metrics in Redis --------------------------------------------------------------------------


def _wait_fields(endpoint: str, waited_s: float, timed_out: bool) -> tuple[dict[str, int], float]:
    """The hash fields one acquisition increments, and the seconds it adds to the sum."""
    waited = max(0.0, float(waited_s))
    counts = {f"{endpoint}|count": 1}
    for bound in WAIT_BUCKETS:
        if waited <= bound:
            counts[bucket_field(endpoint, bound)] = 1
            break  # cumulative counts are summed when read: one write per call
    if timed_out:
        counts[f"{endpoint}|timeouts"] = 1
    return counts, waited


def _write(store: redis_lib.Redis, counts: Mapping[str, int], sums: Mapping[str, float]) -> None:
    pipe = store.pipeline(transaction=False)
    for name, n in counts.items():
        pipe.hincrby(METRICS_KEY, name, n)
    for name, seconds in sums.items():
        pipe.hincrbyfloat(METRICS_KEY, name, seconds)
    pipe.execute()


def record_limiter_wait(
    store: redis_lib.Redis, endpoint: str, waited_s: float, *, timed_out: bool = False
) -> None:
    """Count one limiter acquisition (seconds waited for a slot) for the histogram in /metrics."""
    counts, waited = _wait_fields(endpoint, waited_s, timed_out)
    try:
        _write(store, counts, {f"{endpoint}|sum": waited})
    except Exception:
        log.warning("could not record a limiter wait metric", exc_info=True)


class LimiterWaits:
    """`record_limiter_wait` for a worker: counted in the process, written at most every `flush_s`.

    Every upstream call is one acquisition, so writing each was a Redis round trip per call; /metrics is
    scraped every few seconds, so the counts are summed here and a timer thread writes them `flush_s` after
    the first one since the last write (none runs while nothing is counted; `flush` writes at once, e.g. at
    shutdown). A worker that dies loses at most `flush_s` of counts. With `flush_s` 0 every acquisition is
    written at once (embedded mode's store is in the process anyway).
    """

    def __init__(self, store: redis_lib.Redis, flush_s: float = 1.0) -> None:
        self.store = store
        self.flush_s = flush_s
        self._counts: dict[str, int] = {}
        self._sums: dict[str, float] = {}
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def record(self, endpoint: str, waited_s: float, *, timed_out: bool = False) -> None:
        counts, waited = _wait_fields(endpoint, waited_s, timed_out)
        with self._lock:
            for name, n in counts.items():
                self._counts[name] = self._counts.get(name, 0) + n
            key = f"{endpoint}|sum"
            self._sums[key] = self._sums.get(key, 0.0) + waited
            self._arm()
        if self.flush_s <= 0:
            self.flush()

    def record_wire_held(self, endpoint: str, waited_s: float) -> None:
        """Count one request the wire gate held back for `waited_s` (> 0) before it could be written."""
        with self._lock:
            key = f"{endpoint}|wire_held"
            self._counts[key] = self._counts.get(key, 0) + 1
            key = f"{endpoint}|wire_held_sum"
            self._sums[key] = self._sums.get(key, 0.0) + max(0.0, float(waited_s))
            self._arm()
        if self.flush_s <= 0:
            self.flush()

    def _arm(self) -> None:
        """Under the lock: start the timer that writes what was counted, unless one is running (with no
        flush interval each record is written at once instead)."""
        if self.flush_s > 0 and self._timer is None:
            self._timer = threading.Timer(self.flush_s, self.flush)
            self._timer.daemon = True
            self._timer.start()

    def flush(self) -> None:
        """Write what was counted since the last write (a failed write is logged; its counts are lost)."""
        with self._lock:
            counts, sums = self._counts, self._sums
            self._counts, self._sums = {}, {}
            timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if not counts and not sums:
            return
        try:
            _write(self.store, counts, sums)
        except Exception:
            log.warning("could not record limiter wait metrics", exc_info=True)


def record_throttled(store: redis_lib.Redis, endpoint: str) -> None:
    """Count one upstream 429 that blocked the endpoint's scope for every worker."""
    try:
        store.hincrby(METRICS_KEY, f"{endpoint}|throttled", 1)
    except Exception:
        log.warning("could not record a 429 metric", exc_info=True)
