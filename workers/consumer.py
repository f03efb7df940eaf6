"""The worker's broker consumer, reconnecting in steps of at most a second (Celery's `worker_consumer`).

Why: when Redis goes away, Celery's consumer reconnects through kombu's `Connection.ensure_connection`
with kombu's default intervals — the first retry at once, then 2 s, 4 s, 6 s, … up to 30 s between
tries — and Celery passes no setting for them (`broker_transport_options` intervals only reach
`Connection.ensure`, not the consumer's reconnect). After a two-second Redis restart the workers
therefore sat idle 4–6 s after Redis was back. Here the same call gets the `RECONNECT_*` steps of
config/redis_url.py (0.25 s, 0.5 s, 0.75 s, then 1 s), so a worker is consuming again within about a
second of Redis (or, through Sentinel, the promoted master) answering. Everything else is Celery's.
"""

from __future__ import annotations

import functools
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

from config.redis_url import (
    RECONNECT_INTERVAL_MAX_S,
    RECONNECT_INTERVAL_START_S,
    RECONNECT_INTERVAL_STEP_S,
)

RECONNECT_INTERVALS: dict[str, float] = {
    "interval_start": RECONNECT_INTERVAL_START_S,
    "interval_step": RECONNECT_INTERVAL_STEP_S,
    "interval_max": RECONNECT_INTERVAL_MAX_S,
}


class Consumer(CeleryConsumer):
    """Celery's consumer whose broker (re)connection retries every `RECONNECT_INTERVAL_MAX_S` at most."""

    def ensure_connected(self, conn: Any) -> Any:
        """Celery's own, with kombu's reconnect intervals replaced (the keywords Celery leaves out)."""
        conn.ensure_connection = functools.partial(conn.ensure_connection, **RECONNECT_INTERVALS)
        return super().ensure_connected(conn)
