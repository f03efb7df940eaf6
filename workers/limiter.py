"""The global upstream rate limiter, shared by every worker through Redis: `RateLimiter`.

Two parts keep a scope (one upstream key's endpoint: workers/scopes.py) under the upstream's limit. Before
a request is built its caller books a slot (workers/slots.py: GCRA reservations, slowed by the headroom,
and the 429's block every caller honours); just before its first byte it passes the wire gate
(workers/wire_gate.py), which counts what actually left and is what guarantees the limit. Both run one
atomic Lua script (workers/limiter.lua) with Redis' own clock, so every worker on every host shares them.

This module puts the two together over one store, as the workers and the HTTP client use them
(workers/context.py), and names what the rest of the product imports.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from workers.scopes import LimiterTimeout, ScopeStore, scope_for, with_headroom
from workers.slots import Grant, Reservation, ScopeState, Slots, SlotsConfig
from workers.wire_gate import (
    DEFAULT_ARRIVAL_MARGIN_S,
    DEFAULT_IN_FLIGHT_S,
    PASS_SLACK_S,
    UpstreamWindow,
    WireGate,
    WireGateConfig,
    WirePass,
)

__all__ = [
    "DEFAULT_ARRIVAL_MARGIN_S",
    "DEFAULT_IN_FLIGHT_S",
    "PASS_SLACK_S",
    "Grant",
    "LimiterTimeout",
    "RateLimiter",
    "Reservation",
    "ScopeState",
    "UpstreamWindow",
    "WirePass",
    "scope_for",
    "with_headroom",
]


class RateLimiter(Slots):
    """Global limiter over a shared Redis: `acquire` before each upstream request, `enter_wire` just before
    its first byte and `left_wire` once it is written, `block` on a 429.

    Thread-safe: the Redis client's connection pool serves concurrent callers, and every decision happens
    inside one atomic script.
    """

    def __init__(
        self,
        redis: redis.Redis,
        *,
        prefix: str = "factgate:rl",
        sleep: Callable[[float], object] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        max_late_s: float | None = None,
        arrival_margin_s: float = DEFAULT_ARRIVAL_MARGIN_S,
        in_flight_s: float = DEFAULT_IN_FLIGHT_S,
    ) -> None:
        """`sleep` is injectable so tests can act while a caller waits for its slot; `clock` (monotonic
        seconds) measures how long after passing the wire gate a request was written. `max_late_s` is the
        slots' (`SlotsConfig`); `arrival_margin_s` and `in_flight_s` are the wire gate's (`WireGateConfig`).
        """
        store = ScopeStore(redis, prefix)
        super().__init__(store, sleep=sleep, config=SlotsConfig(max_late_s=max_late_s))
        self.gate = WireGate(
            store,
            sleep=sleep,
            clock=clock,
            config=WireGateConfig(arrival_margin_s=arrival_margin_s, in_flight_s=in_flight_s),
        )
        self._script = store.script

    def wire_key(self, scope: str) -> str:
        """The Redis key of a scope's wire log."""
        return self._store.wire_key(scope)

    def enter_wire(self, scope: str, rate_per_s: float, max_wait_s: float = 60.0) -> WirePass | None:
        """`WireGate.enter_wire`: wait until one more request of the scope may be written now."""
        return self.gate.enter_wire(scope, rate_per_s, max_wait_s)

    def pass_fresh(self, wire_pass: WirePass) -> bool:
        """`WireGate.pass_fresh`: whether the request may still be written on this pass."""
        return self.gate.pass_fresh(wire_pass)

    def left_wire(self, wire_pass: WirePass) -> int:
        """`WireGate.left_wire`: record when the request left; the time recorded, Redis µs."""
        return self.gate.left_wire(wire_pass)
