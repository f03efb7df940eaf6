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


@signals.setup_logging.connect
def _worker_logging(loglevel: Any = None, **_: Any) -> None:
    """Worker processes log structured lines (a receiver here also stops Celery's own setup)."""
    configure_logging(loglevel if loglevel else None)


# --- limiter metrics in Redis --------------------------------------------------------------------------


def record_limiter_wait(
    store: redis_lib.Redis, endpoint: str, waited_s: float, *, timed_out: bool = False
) -> None:
    """Count one limiter acquisition (seconds waited for a slot) for the histogram in /metrics."""
    waited = max(0.0, float(waited_s))
    try:
        pipe = store.pipeline(transaction=False)
        pipe.hincrby(METRICS_KEY, f"{endpoint}|count", 1)
        pipe.hincrbyfloat(METRICS_KEY, f"{endpoint}|sum", waited)
        for bound in WAIT_BUCKETS:
            if waited <= bound:
                pipe.hincrby(METRICS_KEY, bucket_field(endpoint, bound), 1)
                break  # cumulative counts are summed when read: one write per call
        if timed_out:
            pipe.hincrby(METRICS_KEY, f"{endpoint}|timeouts", 1)
        pipe.execute()
    except Exception:
        log.warning("could not record a limiter wait metric", exc_info=True)


def record_throttled(store: redis_lib.Redis, endpoint: str) -> None:
    """Count one upstream 429 that blocked the endpoint's scope for every worker."""
    try:
        store.hincrby(METRICS_KEY, f"{endpoint}|throttled", 1)
    except Exception:
        log.warning("could not record a 429 metric", exc_info=True)
