"""A rate limiter scope in Redis: its name, its keys, and the one script every operation on it runs.

A scope (``"{key_fingerprint}:{endpoint}"``) is what the upstream limits: one organisation key's requests to
one endpoint. In Redis it is one hash ``{prefix}:{scope}`` (the slots' ``tat``, the 429's ``blk``, the
bookings' generation ``gen``: workers/slots.py) and one sorted set ``{prefix}:{scope}:wire``, the wire log
(workers/wire_gate.py). Every operation is one run of workers/limiter.lua, atomic, with its time taken from
Redis ``TIME`` in integer microseconds, so clock skew between worker machines cannot loosen the limit. Each
key's TTL covers the last instant it binds, plus a little, so an idle scope disappears.

Redis is a hint (docs/architecture.md, Invariants): losing a scope's keys (expiry, FLUSHALL, a restart
empty, a failover to a replica that never got them) forgets its bookings, block and wire log, and new
callers start again from "now"; nothing is lost, and an empty scope is not a burst.
"""

from __future__ import annotations

import hashlib
import math
from typing import Final

import redis

from workers.lua import lua

US: Final = 1_000_000
# Extra TTL past the last instant a key matters, so a key never expires while it still binds.
TTL_SLACK_MS: Final = 1_000
# A cap on the wait passed to the script (an infinite budget): ten years, still exact in a double.
_MAX_WAIT_US: Final = 10 * 365 * 24 * 3600 * US

# The script and its protocol (ops, arguments, replies): workers/limiter.lua.
_LUA: Final = lua("limiter")


class LimiterTimeout(Exception):  # noqa: N818 - the name is the workers' contract
    """No slot within the caller's bound; the task should fail this attempt and retry later."""

    def __init__(self, scope: str, waited: float) -> None:
        super().__init__(f"rate limiter: no slot for {scope!r} after waiting {waited:.2f}s")
        self.scope = scope
        self.waited = waited


def scope_for(api_key: str | None, endpoint: str) -> str:
    """The limiter scope for an upstream key and endpoint; the key itself never reaches Redis.

    Upstream limits are per organisation key, so two keys get two scopes. A short sha256
    prefix (48 bits) is enough to keep real keys apart and reveals nothing usable. No key
    (the simulator) gets its own scope so it is still paced like the real API.
    """
    if not endpoint or any(ch.isspace() for ch in endpoint):
        raise ValueError(f"endpoint must be a non-empty word, got {endpoint!r}")
    fingerprint = "nokey" if api_key is None else hashlib.sha256(api_key.encode()).hexdigest()[:12]
    return f"{fingerprint}:{endpoint}"


def with_headroom(rate_per_s: float, headroom: float) -> float:
    """The rate to ask the limiter for: `rate_per_s × (1 − headroom)`; unlimited (≤ 0) stays unlimited.

    `headroom` must be in [0, 1): 1 would turn a limit into 0 requests/s, which the limiter reads
    as "unlimited".
    """
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"headroom must be at least 0 and below 1, got {headroom}")
    if rate_per_s <= 0 or math.isinf(rate_per_s):
        return rate_per_s
    return rate_per_s * (1.0 - headroom)


def wait_us(max_wait_s: float) -> int:
    """A caller's longest wait in whole microseconds, as the script takes it (capped: an infinite budget)."""
    if max_wait_s < 0 or math.isnan(max_wait_s):
        raise ValueError(f"max_wait_s must be non-negative, got {max_wait_s}")
    return _MAX_WAIT_US if max_wait_s * US >= _MAX_WAIT_US else math.floor(max_wait_s * US)


class ScopeStore:
    """The scopes under one key prefix, and the script that runs every operation on them.

    Thread-safe: the Redis client's connection pool serves concurrent callers, and every decision happens
    inside one atomic script.
    """

    def __init__(self, redis: redis.Redis, prefix: str) -> None:
        self.prefix = prefix
        # register_script runs EVALSHA and, on NOSCRIPT (SCRIPT FLUSH, restart, failover), loads the script
        # once and retries: the limiter survives Redis being flushed.
        self.script = redis.register_script(_LUA)

    def key(self, scope: str) -> str:
        """The Redis key holding a scope's state."""
        return f"{self.prefix}:{scope}"

    def wire_key(self, scope: str) -> str:
        """The Redis key of a scope's wire log (a sorted set: one member per request sent lately)."""
        return f"{self.prefix}:{scope}:wire"

    def run(self, op: str, scope: str, *args: int | str, wire: bool = False) -> list[int]:
        """One run of the script on `scope` (and its wire log when `wire`): its reply, as integers."""
        keys = [self.key(scope), self.wire_key(scope)] if wire else [self.key(scope)]
        return [int(v) for v in self.script(keys=keys, args=[op, TTL_SLACK_MS, *args])]
