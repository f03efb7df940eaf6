"""The global upstream rate limiter: one atomic Lua script in Redis shared by every worker.

Why reservations: a caller that is told "no slot, come back in x s" wakes late (the sleep overshoots,
other threads hold the GIL) and every late wake-up is upstream capacity nobody used. Instead the script
hands each caller the first free slot — possibly in the future — and books it at once; the caller sleeps
exactly until then and sends. Slots follow GCRA (generic cell rate algorithm): one number per scope, the
"theoretical arrival time" TAT; a caller's slot is ``max(now, TAT - tau, blocked_until)`` and TAT moves to
``max(TAT, slot) + 1/r``. With burst 1 (``tau = 0``) slots are at least ``1/r`` apart, however many
callers reserve at once, so any half-open one-second window of Redis time holds at most ``ceil(r)`` slots.
Slots already booked stand when the rate changes; the new rate spaces the ones after them.

Why headroom: the upstream counts requests when they arrive, not when we granted them, and the path from
slot to arrival (waking a thread, the GIL, building and sending the request, the network) takes a
variable time. So the caller asks for ``rate × (1 - h)`` (`with_headroom`, ``FACTGATE_LIMITER_HEADROOM``):
slots are ``1/(r(1-h))`` apart, and any ``r + 1`` consecutive slots span ``h/(1-h)`` s more than the
upstream's window (10.1 ms at 10/s with the default h = 0.01; 20.4 ms at the former 0.02). With slots
alone that slack was the only defence: one request held up 25 ms more than the request ten slots later
put 11 into one upstream second. The headroom now only keeps the wire gate idle while our jitter is
small; the gate is what guarantees.

Why a wire gate (`enter_wire`, `left_wire`): a decision taken before the POST cannot see what happens
after it — a thread not scheduled, a pooled connection to open, TLS. So the client calls the gate from
httpcore's trace hook, once the connection is up and just before the first byte, with the upstream's real
rate; and again once the last byte is written and the peer has acknowledged it (clients/wire_ack.py: behind
a slow link's queue "written" is not "arrived"), to record when the request left. The gate mirrors the
upstream's own window on our side, with measured send times in place of grant times: a sorted set per
scope of the requests that passed, each scored by (an upper bound on) when it left, or, until it reports,
counted as in flight. A request passes when fewer than the window's size ``N`` left within the last
``W + m`` (the upstream window plus ``FACTGATE_LIMITER_ARRIVAL_MARGIN_S``) or are in flight. Whatever
stalls happen anywhere on our side, the upstream then never counts ``N + 1`` in a window, as long as the
time from "written" to "counted upstream" of one request exceeds that of a request written later by less
than ``m`` (the time from the peer's kernel having it, where the client can read that) —
docs/architecture.md ("The wire gate") has the proof. A stall only costs time: the request
after it in the window waits at the gate for the stalled one's real send time to age out.

Why a check before sending: a 429 after slots were handed out must still hold back every caller that has
not sent yet. `block` moves the scope's ``blocked_until`` forward (never back) for everybody; a caller
that slept re-reads it (one cheap script call, which also returns Redis' clock, so a caller that woke
before its slot sleeps the rest) and, if blocked, reserves again — new slots are never before
``blocked_until``; the gate holds on a block too. A reservation further away than the caller's
``max_wait_s`` is not taken: the caller gets `LimiterTimeout` and nothing is booked, so the next caller
gets that slot.

Why a late caller no longer books again: before the gate, a caller that woke more than 10 ms after its
slot left the slot unused and booked a new one, since sending late could crowd the next requests'
upstream second. With the gate a late request is safe as it is, and re-booking only left a slot unused;
`max_late_s` keeps the old behaviour for whoever asks for it.

Time comes from Redis ``TIME`` inside the script, so clock skew between worker machines cannot loosen the
limit. Every scope (``"{key_fingerprint}:{endpoint}"``) is one Redis hash ``{prefix}:{scope}`` with fields
``tat`` and ``blk`` (``blocked_until``), both integer microseconds of Redis time, and one sorted set
``{prefix}:{scope}:wire``, the wire log (at most ``N`` plus the requests in flight). The key's TTL covers the
later of the two, plus a little, so an idle scope disappears. Redis is a hint (docs/architecture.md,
Invariants): losing the key (expiry, FLUSHALL, a restart empty, a failover to a replica that never got
it) forgets the bookings and the block, and new callers start again from "now" (an empty scope is not a
burst). Each scope's hash carries a generation, the Redis time of its first booking, and a caller already
asleep that finds another generation on waking — the Redis it checks holds a newer scope, not the one its
slot was booked in — books again there rather than sending into slots now handed out a second time; a
429 still blocks everybody. A Redis clock that steps
back makes booked slots look further away; callers whose budget does not reach them time out and book
nothing, and the key expires on its real-time TTL, so the scope heals within the booking horizon.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import redis

from workers.lua import lua

# The script and its protocol (ops, arguments, replies): workers/limiter.lua.
_LUA: Final = lua("limiter")

_US: Final = 1_000_000
# Extra TTL past the last instant a key matters, so a key never expires while it still binds.
_TTL_SLACK_MS: Final = 1_000
# A cap on the wait passed to the script (an infinite budget): ten years, still exact in a double.
_MAX_WAIT_US: Final = 10 * 365 * 24 * 3600 * _US


# How long a request that passed the wire gate may take to be written (the gate counts it as leaving then
# at the latest until it reports). Writing a small body on an open connection takes well under 1 ms, and
# the client's wait for the peer's acknowledgement is bounded below this (clients/wire_ack.py ACK_WAIT_S,
# 4 s); the bound only matters for a process that dies between the gate and its report: its entry holds
# one of the window's places for this long plus the window.
DEFAULT_IN_FLIGHT_S: Final = 5.0
# A pass older than the in-flight bound less this is not written on (`RateLimiter.pass_fresh`): the time
# left covers the write and its way to the upstream, with room.
PASS_SLACK_S: Final = 1.0
# How much more one request's time from "written" to "counted upstream" (network, the upstream's own
# accepting and parsing) may exceed that of a request sent a window later (docs/architecture.md, the wire
# gate). 5 ms drew one 429 in about fifteen runs against the simulator, whose request passes two Python
# threads (the reader, then a handler) before it is counted, each of which may wait one GIL switch
# interval (5 ms) behind a thread computing an answer: 10 ms covers both.
DEFAULT_ARRIVAL_MARGIN_S: Final = 0.010
# While the entry that fills the window is still in flight (it normally reports within a millisecond), the
# caller polls instead of sleeping until the entry's conservative bound: first every 1 ms, then at a quarter
# of what it has waited so far (an entry of a process that died does not cost a call a millisecond), at
# most every 50 ms.
_IN_FLIGHT_POLL_US: Final = 1_000
_IN_FLIGHT_POLL_MAX_US: Final = 50_000


class LimiterTimeout(Exception):  # noqa: N818 - the name is the workers' contract
    """No slot within the caller's bound; the task should fail this attempt and retry later."""

    def __init__(self, scope: str, waited: float) -> None:
        super().__init__(f"rate limiter: no slot for {scope!r} after waiting {waited:.2f}s")
        self.scope = scope
        self.waited = waited


@dataclass(frozen=True)
class Reservation:
    """One `reserve`: whether the slot was booked, the slot, and Redis' clock when the script ran.

    Times are exact integer microseconds of Redis time, so spacing between slots can be compared
    without float rounding. A slot that was not taken is the one the caller would have got.
    """

    taken: bool
    slot_us: int
    redis_time_us: int
    gen_us: int | None = None  # the scope's generation the slot was booked in (None: unlimited, not booked)

    @property
    def wait_s(self) -> float:
        """Seconds from the script's "now" until the slot (0 when the slot is now)."""
        return max(0, self.slot_us - self.redis_time_us) / _US


@dataclass(frozen=True)
class ScopeState:
    """What a caller about to send re-reads: the scope's blocked-until and Redis' clock (µs), and its TAT.

    `gen_us` (None: not read) tells a sleeper whether this Redis still holds the bookings its slot was
    booked among: a generation other than its reservation's means the scope was lost while the caller
    slept (a restart empty, a flush, a failover to a replica that never got it) and booked anew.
    """

    blocked_until_us: int
    redis_time_us: int
    gen_us: int | None = None

    @property
    def blocked(self) -> bool:
        return self.blocked_until_us > self.redis_time_us


@dataclass(frozen=True)
class Grant:
    """A slot obtained by `acquire_grant`.

    `waited`: seconds slept for it. `slot_us`: the booked slot (Redis time). `redis_time_us`: Redis'
    clock at the last script call before the caller was let go, never before `slot_us` — the
    difference is how late the caller woke. `rebooked`: slots booked on the way and left unused
    (a 429 blocked them, or the caller woke too late to use one).
    """

    waited: float
    slot_us: int
    redis_time_us: int
    rebooked: int = 0


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
    until then). Give it back to `RateLimiter.left_wire` once the request is written, so its entry is
    scored by when it left.
    """

    scope: str
    member: str
    passed_us: int
    waited: float
    span_us: int
    anchor_us: int  # Redis' clock when the gate call that passed ran
    called_at: float  # the caller's monotonic clock just before that call


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


def _interval_us(rate_per_s: float) -> int:
    """Microseconds between slots; 0 means unlimited.

    Rounded up so that rate × interval ≥ 1 s: at 3/s, 333,334 µs, never 333,333 (which
    would let a fourth slot into some one-second window).
    """
    if math.isnan(rate_per_s):
        raise ValueError("rate_per_s must be a number")
    if rate_per_s <= 0 or math.isinf(rate_per_s):
        return 0
    return max(1, math.ceil(_US / rate_per_s))


def _wait_us(max_wait_s: float) -> int:
    if max_wait_s < 0 or math.isnan(max_wait_s):
        raise ValueError(f"max_wait_s must be non-negative, got {max_wait_s}")
    return _MAX_WAIT_US if max_wait_s * _US >= _MAX_WAIT_US else math.floor(max_wait_s * _US)


class RateLimiter:
    """Global limiter over a shared Redis: `acquire` before each upstream request, `block` on a 429.

    Thread-safe: the Redis client's connection pool serves concurrent callers, and every
    decision happens inside one atomic script.
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
        seconds) measures how long after passing the wire gate a request was written.

        `max_late_s`: a caller let go more than this after its slot books a new one instead of sending
        (once per `acquire`); None (the default) never does, because the wire gate already keeps a late
        request safe and re-booking would leave its slot unused. `arrival_margin_s` and `in_flight_s` are
        the wire gate's (`enter_wire`).
        """
        if max_late_s is not None and not max_late_s >= 0:
            raise ValueError(f"max_late_s must be non-negative, got {max_late_s}")
        if not 0 <= arrival_margin_s < 1:
            raise ValueError(f"arrival_margin_s must be at least 0 and below 1 s, got {arrival_margin_s}")
        if not 0 < in_flight_s <= 3600:
            raise ValueError(f"in_flight_s must be above 0 and at most an hour, got {in_flight_s}")
        self._redis = redis
        self._prefix = prefix
        self._sleep = sleep
        self._clock = clock
        self._max_late_us = None if max_late_s is None else math.floor(max_late_s * _US)
        self._margin_us = math.ceil(arrival_margin_s * _US)
        self._in_flight_us = math.ceil(in_flight_s * _US)
        # register_script runs EVALSHA and, on NOSCRIPT (SCRIPT FLUSH, restart, failover),
        # loads the script once and retries — the limiter survives Redis being flushed.
        self._script = redis.register_script(_LUA)

    def key(self, scope: str) -> str:
        """The Redis key holding a scope's state."""
        return f"{self._prefix}:{scope}"

    def reserve(self, scope: str, rate_per_s: float, burst: int = 1, max_wait_s: float = 60.0) -> Reservation:
        """Run the script once: book the first free slot unless it is more than `max_wait_s` away.

        `rate_per_s` ≤ 0 means unlimited (a 429 block still applies: that is upstream's word).
        `burst` = 1 spaces slots strictly 1/rate apart; larger lets that many go back to back.
        """
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        interval = _interval_us(rate_per_s)
        tau = (burst - 1) * interval
        taken, slot_us, now_us, *gen = self._script(
            keys=[self.key(scope)],
            args=["reserve", _TTL_SLACK_MS, interval, tau, _wait_us(max_wait_s)],
        )
        return Reservation(
            taken=bool(taken),
            slot_us=int(slot_us),
            redis_time_us=int(now_us),
            gen_us=int(gen[0]) if gen else None,
        )

    def state(self, scope: str) -> ScopeState:
        """Read the scope's blocked-until and Redis' clock (writes nothing)."""
        blocked_until_us, now_us, gen_us = self._script(keys=[self.key(scope)], args=["check", _TTL_SLACK_MS])
        return ScopeState(
            blocked_until_us=int(blocked_until_us), redis_time_us=int(now_us), gen_us=int(gen_us)
        )

    def try_acquire(self, scope: str, rate_per_s: float, burst: int = 1) -> float:
        """0.0 if a slot is free now (and is taken), else seconds until the next one (nothing booked)."""
        reservation = self.reserve(scope, rate_per_s, burst, max_wait_s=0.0)
        return 0.0 if reservation.taken else max(reservation.wait_s, 1e-6)

    def acquire_grant(self, scope: str, rate_per_s: float, burst: int = 1, max_wait_s: float = 60.0) -> Grant:
        """Like `acquire`, also returning the slot and the Redis time the caller was let go."""
        _wait_us(max_wait_s)  # validate before anything is booked
        waited = 0.0
        rebooked = 0
        late_rebook_left = True
        while True:
            reservation = self.reserve(scope, rate_per_s, burst, max(0.0, max_wait_s - waited))
            if not reservation.taken:
                raise LimiterTimeout(scope, waited)
            now_us = reservation.redis_time_us
            if reservation.slot_us <= now_us:
                # Free now: nothing can have happened between booking and sending.
                return Grant(waited, reservation.slot_us, now_us, rebooked)
            state = ScopeState(blocked_until_us=0, redis_time_us=now_us)
            while state.redis_time_us < reservation.slot_us:
                step = (reservation.slot_us - state.redis_time_us) / _US
                self._sleep(step)
                waited += step
                state = self.state(scope)
            late_us = state.redis_time_us - reservation.slot_us
            # The scope's Redis no longer holds the bookings this slot was among (restarted empty, flushed,
            # or a promoted replica that never received them): callers booking there since started from
            # "now" and may hold this same slot, a burst above the limit. Book again there, behind them.
            forgotten = (
                reservation.gen_us is not None
                and state.gen_us is not None
                and state.gen_us != reservation.gen_us
            )
            if forgotten:
                rebooked += 1
                continue
            on_time = self._max_late_us is None or late_us <= self._max_late_us
            if not state.blocked and (on_time or not late_rebook_left):
                return Grant(waited, reservation.slot_us, state.redis_time_us, rebooked)
            # Either a 429 arrived after this slot was booked and the block covers it, or this
            # process stalled past the slot (a full garbage collection, a descheduled thread) and
            # sending now would land in the next requests' upstream second. Book again — behind the
            # block, or at the end of the queue — within what is left of the budget; the slot goes
            # unused. Lateness re-books once per call, so a uniformly slow host still sends.
            rebooked += 1
            if not state.blocked:
                late_rebook_left = False

    def acquire(self, scope: str, rate_per_s: float, burst: int = 1, max_wait_s: float = 60.0) -> float:
        """Book a slot, sleep until it, and return the seconds slept for it.

        Raises `LimiterTimeout` (booking nothing) when the first free slot, or after a 429 the first
        slot past the block, is further away than what remains of `max_wait_s`. Waiting here, rather
        than re-queueing the task with a countdown, keeps messages in order and the queue quiet.
        """
        return self.acquire_grant(scope, rate_per_s, burst, max_wait_s).waited

    def wire_key(self, scope: str) -> str:
        """The Redis key of a scope's wire log (a sorted set: one member per request sent lately)."""
        return f"{self._prefix}:{scope}:wire"

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
        budget_us = _wait_us(max_wait_s)
        span_us = math.ceil(window.seconds * _US) + self._margin_us
        member = f"{time.time_ns():x}-{uuid.uuid4().hex[:12]}"
        waited_us = 0
        while True:
            called_at = self._clock()
            passed, wake_us, now_us, why = self._script(
                keys=[self.key(scope), self.wire_key(scope)],
                args=[
                    "gate", _TTL_SLACK_MS, span_us, window.size, self._in_flight_us, member,
                    max(0, budget_us - waited_us),
                ],
            )  # fmt: skip
            if passed:
                # Booked for `wake_us` (now, or when the entry that filled the window ages out): sleep
                # until then and go, with no second call between the wake-up and the wire.
                ahead_us = int(wake_us) - int(now_us)
                if ahead_us > 0:
                    self._sleep(ahead_us / _US)
                    waited_us += ahead_us
                return WirePass(scope, member, int(wake_us), waited_us / _US, span_us, int(now_us), called_at)
            wait_us = max(1, int(wake_us) - int(now_us))
            if why == 2 and int(wake_us) - span_us > int(now_us):
                # The entry that fills the window is still in flight: it reports any moment now.
                poll_us = min(_IN_FLIGHT_POLL_MAX_US, max(_IN_FLIGHT_POLL_US, waited_us // 4))
                wait_us = min(wait_us, poll_us)
            if waited_us + wait_us > budget_us:
                raise LimiterTimeout(scope, waited_us / _US)
            self._sleep(wait_us / _US)
            waited_us += wait_us

    def pass_fresh(self, wire_pass: WirePass) -> bool:
        """Whether the request of `wire_pass` may still be written on it: its entry counts it as in flight
        (up to the gate's in-flight bound from the gate) for well beyond now.

        Why: a process stopped between the gate and the write (SIGSTOP, a frozen VM, a long stall) past that
        bound would write a request the log no longer counts — the one way our own delays could still draw
        a 429 (the multi-host drill's smoke scenario pauses the leader 6 s: one 429 in most runs). The client
        holds a request's bytes until the body is complete (clients/wire_ack.py), so a stale pass is
        replaced by a new one (`clients/perplexity.py:_Wire`) before any byte is written."""
        return self._clock() - wire_pass.called_at < self._in_flight_us / _US - PASS_SLACK_S

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
        elapsed_us = math.ceil(max(0.0, self._clock() - wire_pass.called_at) * _US)
        left_us, _now_us = self._script(
            keys=[self.key(wire_pass.scope), self.wire_key(wire_pass.scope)],
            args=[
                "sent",
                _TTL_SLACK_MS,
                wire_pass.span_us,
                0,
                self._in_flight_us,
                wire_pass.member,
                wire_pass.anchor_us + elapsed_us,
            ],
        )
        return int(left_us)

    def block(self, scope: str, seconds: float) -> float:
        """Pause the scope for every worker until now + `seconds` (Redis time), never earlier
        than an existing block. Returns the resulting blocked-until as Unix seconds of Redis time
        (Redis' "now" when the scope is not blocked, e.g. after `seconds` ≤ 0)."""
        if not math.isfinite(seconds):
            raise ValueError(f"seconds must be a finite number, got {seconds}")
        block_us = max(0, math.ceil(seconds * _US))
        blocked_until_us, _now_us = self._script(
            keys=[self.key(scope)], args=["block", _TTL_SLACK_MS, block_us]
        )
        return int(blocked_until_us) / _US
