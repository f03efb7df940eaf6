"""Slots: each caller books the first free moment of its scope before its upstream request (GCRA).

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
variable time. So the caller asks for ``rate × (1 - h)`` (workers/scopes.py:with_headroom,
``FACTGATE_LIMITER_HEADROOM``): slots are ``1/(r(1-h))`` apart, and any ``r + 1`` consecutive slots span
``h/(1-h)`` s more than the upstream's window. That slack only keeps the wire gate (workers/wire_gate.py)
idle while our jitter is small; the gate is what guarantees the limit.

Why a check before sending: a 429 after slots were handed out must still hold back every caller that has
not sent yet. `block` moves the scope's ``blocked_until`` forward (never back) for everybody; a caller
that slept re-reads it (one cheap script call, which also returns Redis' clock, so a caller that woke
before its slot sleeps the rest) and, if blocked, reserves again — new slots are never before
``blocked_until``; the gate holds on a block too. A reservation further away than the caller's
``max_wait_s`` is not taken: the caller gets `LimiterTimeout` and nothing is booked, so the next caller
gets that slot.

A caller let go late sends anyway: the gate keeps a late request safe, and booking again would only leave
its slot unused (`SlotsConfig.max_late_s` books again, for whoever asks for it).

Each scope's hash carries a generation, the Redis time of its first booking, and a caller already asleep
that finds another generation on waking — the Redis it checks holds a newer scope, not the one its slot
was booked in — books again there rather than sending into slots now handed out a second time; a 429
still blocks everybody. A Redis clock that steps back makes booked slots look further away; callers whose
budget does not reach them time out and book nothing, and the key expires on its real-time TTL, so the
scope heals within the booking horizon.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pydantic
from pydantic import NonNegativeFloat

from workers.scopes import US, LimiterTimeout, ScopeStore, wait_us


@pydantic.dataclasses.dataclass(frozen=True)
class SlotsConfig:
    """`max_late_s`: a caller let go more than this after its slot books a new one instead of sending (once
    per `acquire`); None never does, since the wire gate already keeps a late request safe."""

    max_late_s: NonNegativeFloat | None = None


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
        return max(0, self.slot_us - self.redis_time_us) / US


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


def _interval_us(rate_per_s: float) -> int:
    """Microseconds between slots; 0 means unlimited.

    Rounded up so that rate × interval ≥ 1 s: at 3/s, 333,334 µs, never 333,333 (which
    would let a fourth slot into some one-second window).
    """
    if math.isnan(rate_per_s):
        raise ValueError("rate_per_s must be a number")
    if rate_per_s <= 0 or math.isinf(rate_per_s):
        return 0
    return max(1, math.ceil(US / rate_per_s))


class Slots:
    """Booking slots in a scope (`reserve`, `acquire`), and the 429's block every caller honours (`block`).

    `acquire_grant` reads the scope through `reserve` and `state` only, so a subclass that counts or
    records those sees every script call a grant costs.
    """

    def __init__(
        self, store: ScopeStore, *, sleep: Callable[[float], object], config: SlotsConfig | None = None
    ) -> None:
        self._store = store
        self._sleep = sleep
        self.slots_config = config or SlotsConfig()
        max_late_s = self.slots_config.max_late_s
        self._max_late_us = None if max_late_s is None else math.floor(max_late_s * US)

    def key(self, scope: str) -> str:
        """The Redis key holding a scope's state."""
        return self._store.key(scope)

    def reserve(self, scope: str, rate_per_s: float, burst: int = 1, max_wait_s: float = 60.0) -> Reservation:
        """Run the script once: book the first free slot unless it is more than `max_wait_s` away.

        `rate_per_s` ≤ 0 means unlimited (a 429 block still applies: that is upstream's word).
        `burst` = 1 spaces slots strictly 1/rate apart; larger lets that many go back to back.
        """
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        interval = _interval_us(rate_per_s)
        taken, slot_us, now_us, *gen = self._store.run(
            "reserve", scope, interval, (burst - 1) * interval, wait_us(max_wait_s)
        )
        return Reservation(
            taken=bool(taken), slot_us=slot_us, redis_time_us=now_us, gen_us=gen[0] if gen else None
        )

    def state(self, scope: str) -> ScopeState:
        """Read the scope's blocked-until and Redis' clock (writes nothing)."""
        blocked_until_us, now_us, gen_us = self._store.run("check", scope)
        return ScopeState(blocked_until_us=blocked_until_us, redis_time_us=now_us, gen_us=gen_us)

    def try_acquire(self, scope: str, rate_per_s: float, burst: int = 1) -> float:
        """0.0 if a slot is free now (and is taken), else seconds until the next one (nothing booked)."""
        reservation = self.reserve(scope, rate_per_s, burst, max_wait_s=0.0)
        return 0.0 if reservation.taken else max(reservation.wait_s, 1e-6)

    def acquire_grant(self, scope: str, rate_per_s: float, burst: int = 1, max_wait_s: float = 60.0) -> Grant:
        """Like `acquire`, also returning the slot and the Redis time the caller was let go."""
        wait_us(max_wait_s)  # validate before anything is booked
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
                step = (reservation.slot_us - state.redis_time_us) / US
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
            # the caller asked to book again when late. Book again — behind the block, or at the end
            # of the queue — within what is left of the budget; the slot goes unused. Lateness
            # re-books once per call, so a uniformly slow host still sends.
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

    def block(self, scope: str, seconds: float) -> float:
        """Pause the scope for every worker until now + `seconds` (Redis time), never earlier
        than an existing block. Returns the resulting blocked-until as Unix seconds of Redis time
        (Redis' "now" when the scope is not blocked, e.g. after `seconds` ≤ 0)."""
        if not math.isfinite(seconds):
            raise ValueError(f"seconds must be a finite number, got {seconds}")
        blocked_until_us, _now_us = self._store.run("block", scope, max(0, math.ceil(seconds * US)))
        return blocked_until_us / US
