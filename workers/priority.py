"""A server-mode worker process lowers its own CPU priority (`FACTGATE_WORKER_NICE`, default 3).

Why: the workers are batch work that takes every core it is given, and on a host they share with the web
process and Postgres they took them from requests a person is waiting on: a status poll of a running job
spends most of its time waiting for a core, not computing. Nice only orders who runs first when the cores
are contended, so a worker on a host of its own, or on an idle one, loses nothing. The cost shows where
something else at normal priority keeps every core busy: the worker's sends wake a little later behind it
and the share of the upstream's limit it holds drops a little, so the default is the smaller step. The
weight is what orders the cores; a scheduling policy alone (SCHED_BATCH: the same weight, no wake-up
preemption) does not. The figures at nice 0, 3 and 5: docs/profiles/README.md, "Worker priority".

Raising one's own nice needs no privilege (lowering it would). On Linux niceness belongs to each
thread and new threads inherit it, so it is set in the worker's main thread at `worker_init`, before Celery
starts its pool, consumer, dispatcher and heartbeat threads. Embedded mode runs the worker inside the
user's own command (the CLI), whose priority is the user's business: it is left alone.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import signals

log = logging.getLogger("factgate.workers")


def lower_priority(increment: int) -> int:
    """Add `increment` to this thread's nice value (threads started later inherit it); returns the new
    value. 0 changes nothing."""
    return os.nice(increment) if increment > 0 else os.nice(0)


@signals.worker_init.connect
def _lower_worker_priority(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    settings = getattr(getattr(app, "conf", None), "factgate_settings", None)
    if settings is None or not settings.redis_url or settings.worker_nice <= 0:
        return  # embedded mode (no Redis), or turned off
    try:
        now = lower_priority(settings.worker_nice)
    except OSError:
        log.warning("could not lower this worker's CPU priority", exc_info=True)
        return
    log.info("worker: CPU priority lowered to nice %d (FACTGATE_WORKER_NICE)", now)
