"""The public, read-only view of the worker-side metrics, for the web process (`web/metrics.py`).

Workers count limiter waits and upstream 429s in a Redis hash (`workers/signals.py` writes it); the
web process reads it back at scrape time. This module holds what both sides must agree on — the key,
the histogram buckets, how the hash is read — and the embedded store handle, and imports nothing else of
ours, so importing it never pulls the HTTP client, the limiter or task code into a web process (the
import contracts in pyproject.toml keep it that way).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis as redis_lib

METRICS_KEY = "factgate:metrics:limiter"
# Upper bounds (seconds) of the limiter-wait histogram; +Inf is implied.
WAIT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_redis_lock = threading.Lock()
_embedded_redis: Any = None


def embedded_redis() -> redis_lib.Redis:
    """The in-process Redis-compatible store of embedded mode (one per process, shared).

    The embedded worker's limiter and metrics live here, so the web app of the same process reads them.
    """
    global _embedded_redis  # noqa: PLW0603 - one store per process is the point
    with _redis_lock:
        if _embedded_redis is None:
            import fakeredis  # noqa: PLC0415 - only embedded mode needs it

            _embedded_redis = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        store: redis_lib.Redis = _embedded_redis
        return store


def bucket_field(endpoint: str, bound: float) -> str:
    """The hash field counting one endpoint's waits that fell in the bucket ending at `bound`."""
    return f"{endpoint}|le|{bound:g}"


@dataclass
class EndpointWaits:
    """What the Redis hash holds for one endpoint, with cumulative buckets as Prometheus wants."""

    count: int = 0
    sum_s: float = 0.0
    timeouts: int = 0
    throttled: int = 0
    # Requests the wire gate held back (the upstream's window was full of recent sends), and for how long.
    wire_held: int = 0
    wire_held_s: float = 0.0
    buckets: dict[float, int] = field(default_factory=dict)

    def cumulative(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        running = 0
        for bound in WAIT_BUCKETS:
            running += self.buckets.get(bound, 0)
            out.append((f"{bound:g}", running))
        out.append(("+Inf", self.count))
        return out


def read_limiter_metrics(store: redis_lib.Redis) -> dict[str, EndpointWaits]:
    """Per endpoint: acquisitions, seconds waited, bucket counts, timeouts, 429 blocks, wire-gate holds."""
    raw: dict[bytes | str, bytes | str] = store.hgetall(METRICS_KEY)
    fields: dict[str, dict[str, str]] = {}  # endpoint -> its fields ("{endpoint}|{what}" in the hash)
    for key_raw, value_raw in raw.items():
        key = key_raw.decode() if isinstance(key_raw, bytes) else key_raw
        value = value_raw.decode() if isinstance(value_raw, bytes) else value_raw
        endpoint, _, what = key.partition("|")
        fields.setdefault(endpoint, {})[what] = value
    return {endpoint: _waits(of) for endpoint, of in fields.items()}


def _waits(of: Mapping[str, str]) -> EndpointWaits:
    """One endpoint's figures from its fields; a field not written yet counts 0."""
    return EndpointWaits(
        count=int(of.get("count", 0)),
        sum_s=float(of.get("sum", 0.0)),
        timeouts=int(of.get("timeouts", 0)),
        throttled=int(of.get("throttled", 0)),
        wire_held=int(of.get("wire_held", 0)),
        wire_held_s=float(of.get("wire_held_sum", 0.0)),
        buckets={bound: int(of[f"le|{bound:g}"]) for bound in WAIT_BUCKETS if f"le|{bound:g}" in of},
    )
