"""The wire gate: a request is written only when the upstream cannot count it as one too many.

Why a gate besides the slots (workers/slots.py): a decision taken before the POST cannot see what happens
after it — a thread not scheduled, a pooled connection to open, TLS. So the client calls the gate from
httpcore's trace hook, once the connection is up and just before the first byte, with the upstream's real
rate (`enter_wire`); and again once the last byte is written and the peer has acknowledged it
(clients/wire_ack.py: behind a slow link's queue "written" is not "arrived"), to record when the request
left (`left_wire`). The gate mirrors the upstream's own window on our side, with measured send times in
place of grant times: a sorted set per scope of the requests that passed, each scored by (an upper bound
on) when it left, or, until it reports, counted as in flight. A request passes when fewer than the
window's size ``N`` left within the last ``W + m`` (the upstream window plus
``FACTGATE_LIMITER_ARRIVAL_MARGIN_S``) or are in flight. Whatever stalls happen anywhere on our side, the
upstream then never counts ``N + 1`` in a window, as long as the time from "written" to "counted
upstream" of one request exceeds that of a request written later by less than ``m`` (the time from the
peer's kernel having it, where the client can read that) — docs/architecture.md ("The wire gate") has the
proof. A stall only costs time: the request after it in the window waits at the gate for the stalled
one's real send time to age out.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Final

import pydantic

from workers.scopes import US, LimiterTimeout, ScopeStore, wait_us

# How long a request that passed the gate may take to be written (the gate counts it as leaving then at
# the latest until it reports). Writing a small body on an open connection is quick, and the client's wait
# for the peer's acknowledgement is bounded below this (clients/wire_ack.py ACK_WAIT_S); the bound only
# matters for a process that dies between the gate and its report: its entry holds one of the window's
# places for this long plus the window.
DEFAULT_IN_FLIGHT_S: Final = 5.0
# A pass older than the in-flight bound less this is not written on (`WireGate.pass_fresh`): the time left
# covers the write and its way to the upstream, with room.
PASS_SLACK_S: Final = 1.0
# How much more one request's time from "written" to "counted upstream" (network, the upstream's own
# accepting and parsing) may exceed that of a request sent a window later (docs/architecture.md, the wire
# gate). The simulator counts a request only after two of its Python threads handled it, each of which may
# wait one GIL switch interval (5 ms) behind a thread computing an answer: the default covers both.
# What smaller margins drew is in docs/profiles/README.md ("The margin `m`").
DEFAULT_ARRIVAL_MARGIN_S: Final = 0.010
# While the entry that fills the window is still in flight (it normally reports within a moment), the
# caller polls instead of sleeping until the entry's conservative bound: first every 1 ms, then at a quarter
# of what it has waited so far (an entry of a process that died does not cost a call a millisecond), at
# most every 50 ms.
_IN_FLIGHT_POLL_US: Final = 1_000
_IN_FLIGHT_POLL_MAX_US: Final = 50_000
_WHY_WINDOW_FULL: Final = 2  # the gate script's reason for a wait: the window is full (1: a 429's block)


@pydantic.dataclasses.dataclass(frozen=True)
class WireGateConfig:
    """The arrival margin `m` counted past the upstream's window, and how long a request that passed may
    stay unreported (in flight) before its entry stops counting."""

    arrival_margin_s: Annotated[float, pydantic.Field(ge=0, lt=1)] = DEFAULT_ARRIVAL_MARGIN_S
    in_flight_s: Annotated[float, pydantic.Field(gt=0, le=3600)] = DEFAULT_IN_FLIGHT_S


@dataclass(frozen=True)
class UpstreamWindow:
    """The upstream's strict window for a rate: at most `size` requests counted in any `seconds`.

    The same derivation as the upstream model (simulator/limits.py): `size = max(1, round(rate))`,
    `seconds = size / rate`, so 10/s is 10 in any 1 s and 0.5/s is 1 in any 2 s.
    """

    size: int
    seconds: float

    @classmethod
    def for_rate(cls, rate_per_s: float) -> UpstreamWindow | None:
        """None for an unlimited rate (0 or below, or infinite)."""
        if math.isnan(rate_per_s):
            raise ValueError("rate_per_s must be a number")
        if rate_per_s <= 0 or math.isinf(rate_per_s):
            return None
        size = max(1, round(rate_per_s))
        return cls(size=size, seconds=size / rate_per_s)


@dataclass(frozen=True)
class WirePass:
    """A request let through the wire gate: its member in the scope's wire log, and what it waited.

    `passed_us` is the Redis time from which it may go (the request leaves after it; the caller has slept
    until then). Give it back to `WireGate.left_wire` once the request is written, so its entry is
    scored by when it left.
    """

    scope: str
    member: str
    passed_us: int
    waited: float
    span_us: int
    anchor_us: int  # Redis' clock when the gate call that passed ran
    called_at: float  # the caller's monotonic clock just before that call


class WireGate:
    """The gate of every scope under one store: `enter_wire` before the first byte, `left_wire` after."""

    def __init__(
        self,
        store: ScopeStore,
        *,
        sleep: Callable[[float], object],
        clock: Callable[[], float],
        config: WireGateConfig | None = None,
    ) -> None:
        self._store = store
        self._sleep = sleep
        self._clock = clock
        self.config = config or WireGateConfig()
        self._margin_us = math.ceil(self.config.arrival_margin_s * US)
        self._in_flight_us = math.ceil(self.config.in_flight_s * US)

    def enter_wire(self, scope: str, rate_per_s: float, max_wait_s: float = 60.0) -> WirePass | None:
        """Wait until one more request may be written now without the upstream ever counting one too many.

        Called as late as possible — once the connection is up, just before the request's first byte —
        with the upstream's real rate (no headroom). It passes when fewer than the window's `size` requests
        of the scope left within the last window + arrival margin (by their `left_wire` times) or are
        still in flight between this gate and their report, and then counts this one as in flight.
        docs/architecture.md ("The wire gate") derives why that holds whatever happens between the gate
        and the wire. None for an unlimited rate (nothing to count). A 429's block also holds here. Raises
        `LimiterTimeout` when it cannot pass within `max_wait_s`.
        """
        window = UpstreamWindow.for_rate(rate_per_s)
        if window is None:
            return None
        budget_us = wait_us(max_wait_s)
        span_us = math.ceil(window.seconds * US) + self._margin_us
        member = f"{time.time_ns():x}-{uuid.uuid4().hex[:12]}"
        waited_us = 0
        while True:
            called_at = self._clock()
            passed, wake_us, now_us, why = self._store.run(
                "gate", scope, span_us, window.size, self._in_flight_us, member,
                max(0, budget_us - waited_us), wire=True,
            )  # fmt: skip
            if passed:
                # Booked for `wake_us` (now, or when the entry that filled the window ages out): sleep
                # until then and go, with no second call between the wake-up and the wire.
                ahead_us = wake_us - now_us
                if ahead_us > 0:
                    self._sleep(ahead_us / US)
                    waited_us += ahead_us
                return WirePass(scope, member, wake_us, waited_us / US, span_us, now_us, called_at)
            pause_us = max(1, wake_us - now_us)
            if why == _WHY_WINDOW_FULL and wake_us - span_us > now_us:
                # The entry that fills the window is still in flight: it reports any moment now.
                poll_us = min(_IN_FLIGHT_POLL_MAX_US, max(_IN_FLIGHT_POLL_US, waited_us // 4))
                pause_us = min(pause_us, poll_us)
            if waited_us + pause_us > budget_us:
                raise LimiterTimeout(scope, waited_us / US)
            self._sleep(pause_us / US)
            waited_us += pause_us

    def pass_fresh(self, wire_pass: WirePass) -> bool:
        """Whether the request of `wire_pass` may still be written on it: its entry counts it as in flight
        (up to the gate's in-flight bound from the gate) for well beyond now.

        Why: a process stopped between the gate and the write (SIGSTOP, a frozen VM, a long stall) past that
        bound would write a request the log no longer counts — the one way our own delays could still draw
        a 429. The client holds a request's bytes until the body is complete (clients/wire_ack.py), so a
        stale pass is replaced by a new one (`clients/perplexity.py:_Wire`) before any byte is written."""
        return self._clock() - wire_pass.called_at < self._in_flight_us / US - PASS_SLACK_S

    def left_wire(self, wire_pass: WirePass) -> int:
        """Record that the request of `wire_pass` has been written (or may have been: call it whenever the
        attempt ends after the gate, even on an error). Returns the time recorded, Redis µs.

        The time recorded is an upper bound on when the last byte left, in Redis' clock: the smaller of
        Redis' "now" when this runs (after the write) and the gate's "now" plus the time this caller's own
        clock measured from just before the gate call to here — the gate ran after that call started, so
        the write ended at most that long after the gate's "now". The second bound does not include the
        trip to Redis, nor a thread that waits for the CPU before it; both are durations on one clock, so
        clock skew between hosts cannot enter.
        """
        elapsed_us = math.ceil(max(0.0, self._clock() - wire_pass.called_at) * US)
        left_us, _now_us = self._store.run(
            "sent", wire_pass.scope, wire_pass.span_us, 0, self._in_flight_us, wire_pass.member,
            wire_pass.anchor_us + elapsed_us, wire=True,
        )  # fmt: skip
        return left_us
