"""The limiter's wire gate (`RateLimiter.enter_wire` / `left_wire`) on fakeredis, with a simulated clock.

What is held: whatever delays a request between its slot and the wire, or between the gate and the wire
(the stall the old check before the POST could not see), the upstream's own window — judged by the
simulator's limiter, `simulator/limits.py`, fed the arrival times — never holds one request too many,
provided the time from "written" to "counted upstream" varies by less than the gate's margin. The same
schedules without the gate do draw 429s, so the tests have teeth. docs/architecture.md ("The wire gate")
derives the bound.

Time: Redis' TIME inside the script and the limiter's clock and sleep are one simulated clock (fakeredis'
TIME is patched for the test), so nothing here sleeps or depends on how fast the machine is.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import fakeredis
import pytest
from fakeredis.commands_mixins import server_mixin

from config import Settings
from simulator.limits import RateLimiter as UpstreamLimiter
from workers.limiter import (
    DEFAULT_IN_FLIGHT_S,
    PASS_SLACK_S,
    LimiterTimeout,
    RateLimiter,
    UpstreamWindow,
    WirePass,
)

US = 1_000_000
RATE = 10.0
# The shipped configuration: what these schedules hold is what the product runs with.
HEADROOM = Settings().limiter_headroom
MARGIN_S = Settings().limiter_arrival_margin_s


class SimClock:
    """One clock for Redis TIME, the limiter's clock and its sleeps. `sleep` runs the events that fall due
    meanwhile (other requests' reports), as another thread would while this one sleeps."""

    def __init__(self) -> None:
        self.now = time.time()  # ahead of the real clock only: fakeredis' key expiry stays out of it
        self.sleeps: list[float] = []
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0

    def time(self) -> float:  # fakeredis' TIME
        return self.now

    def monotonic(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._due, (when, self._seq, action))

    def run_until(self, when: float) -> None:
        while self._due and self._due[0][0] <= when:
            due, _seq, action = heapq.heappop(self._due)
            self.now = max(self.now, due)
            action()
        self.now = max(self.now, when)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.run_until(self.now + seconds)

    def drain(self) -> None:
        self.run_until(math.inf if not self._due else max(d for d, _s, _a in self._due))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimClock:
    sim = SimClock()
    monkeypatch.setattr(server_mixin, "time", sim)
    return sim


@pytest.fixture
def limiter(clock: SimClock) -> RateLimiter:
    return RateLimiter(
        fakeredis.FakeRedis(),
        prefix="t:rl",
        sleep=clock.sleep,
        clock=clock.monotonic,
        arrival_margin_s=MARGIN_S,
    )


def scope() -> str:
    return f"s{uuid.uuid4().hex[:8]}:decisions"


def upstream_refusals(arrivals: list[float], rate: float = RATE) -> int:
    """What the simulator's own limiter answers to requests arriving at these times (429s)."""
    now = [0.0]
    upstream = UpstreamLimiter({"decisions": rate}, clock=lambda: now[0])
    refused = 0
    for t in sorted(arrivals):
        now[0] = t
        refused += not upstream.try_acquire("k", "decisions")
    return refused


# --- the window ----------------------------------------------------------------------------------


def test_the_window_is_derived_as_the_upstream_derives_it() -> None:
    assert UpstreamWindow.for_rate(10.0) == UpstreamWindow(size=10, seconds=1.0)
    assert UpstreamWindow.for_rate(0.5) == UpstreamWindow(size=1, seconds=2.0)
    assert UpstreamWindow.for_rate(3.0) == UpstreamWindow(size=3, seconds=1.0)
    assert UpstreamWindow.for_rate(0.0) is None
    assert UpstreamWindow.for_rate(math.inf) is None
    with pytest.raises(ValueError, match="number"):
        UpstreamWindow.for_rate(math.nan)


@pytest.mark.parametrize(("headroom", "slack_ms", "idle_below_ms"), [(0.02, 20.4, 10.4), (0.01, 10.1, 0.1)])
def test_headroom_arithmetic_leaves_the_slack_the_docs_give(
    headroom: float, slack_ms: float, idle_below_ms: float
) -> None:
    # r + 1 consecutive slots at r(1 - h) span r/(r(1 - h)) = 1/(1 - h) s: h/(1 - h) s more than the window.
    interval = 1 / (RATE * (1 - headroom))
    slack = 10 * interval - 1.0
    assert slack == pytest.approx(headroom / (1 - headroom))
    assert round(slack * 1000, 1) == slack_ms
    # What the gate's margin (10 ms) leaves for our own jitter before the gate has to hold anyone.
    assert round((slack - 0.010) * 1000, 1) == idle_below_ms


def test_the_shipped_defaults_are_the_ones_the_docs_derive() -> None:
    assert (HEADROOM, MARGIN_S) == (0.01, 0.010)


# --- the gate itself -----------------------------------------------------------------------------


def test_the_gate_lets_a_window_size_through_and_holds_the_next_until_the_first_ages_out(
    limiter: RateLimiter, clock: SimClock
) -> None:
    s = scope()
    left_at: list[int] = []
    for _ in range(10):
        wire = limiter.enter_wire(s, RATE)
        assert wire is not None and wire.waited == 0.0
        clock.run_until(clock.now + 0.001)  # written 1 ms later
        left_at.append(limiter.left_wire(wire))
        clock.run_until(clock.now + 0.01)
    eleventh = limiter.enter_wire(s, RATE)
    assert eleventh is not None
    # It passed only once the first one had left more than the window plus the margin before (µs).
    assert eleventh.passed_us - left_at[0] >= US + MARGIN_S * US
    assert eleventh.waited > 0


def test_a_full_window_books_the_moment_it_frees_and_the_caller_goes_without_asking_again(
    limiter: RateLimiter, clock: SimClock
) -> None:
    s = scope()
    for _ in range(10):
        wire = limiter.enter_wire(s, RATE)
        assert wire is not None
        limiter.left_wire(wire)
    probes: list[str] = []

    def probe() -> None:  # another caller, while the booked one sleeps
        try:
            limiter.enter_wire(s, RATE, max_wait_s=0.1)
        except LimiterTimeout:
            probes.append("held")
        else:
            probes.append("passed")

    clock.at(clock.now + 0.5, probe)
    calls_before = len(clock.sleeps)
    booked = limiter.enter_wire(s, RATE)
    assert booked is not None
    # One sleep until the window frees, no polling; booked in flight at once, so a caller meanwhile counts it.
    assert clock.sleeps[calls_before] == pytest.approx(1.0 + MARGIN_S, abs=1e-5)
    assert probes == ["held"]


def test_a_request_still_in_flight_counts_until_it_reports(limiter: RateLimiter, clock: SimClock) -> None:
    s = scope()
    stuck = [limiter.enter_wire(s, RATE) for _ in range(10)]  # none of them reports: all in flight
    assert all(w is not None for w in stuck)
    with pytest.raises(LimiterTimeout):
        limiter.enter_wire(s, RATE, max_wait_s=2.0)
    # Polled, not slept through: short steps first, at most 50 ms each.
    assert clock.sleeps[0] == pytest.approx(0.001)
    assert max(clock.sleeps) <= 0.05 + 1e-9


def test_an_entry_of_a_caller_that_never_reports_ages_out_after_the_in_flight_bound(
    clock: SimClock,
) -> None:
    limiter = RateLimiter(
        fakeredis.FakeRedis(), prefix="t:rl", sleep=clock.sleep, clock=clock.monotonic, in_flight_s=2.0
    )
    s = scope()
    for _ in range(10):
        limiter.enter_wire(s, RATE)
    start = clock.now
    wire = limiter.enter_wire(s, RATE, max_wait_s=10.0)
    assert wire is not None
    # Counted as leaving at the bound at the latest, so free again a window + margin after it.
    assert clock.now - start >= 2.0 + 1.0 + MARGIN_S - 1e-6


def test_left_wire_records_the_tighter_of_its_own_bound_and_redis_now(
    limiter: RateLimiter, clock: SimClock
) -> None:
    s = scope()
    wire = limiter.enter_wire(s, RATE)
    assert wire is not None
    clock.run_until(clock.now + 0.003)
    # Reported at once: the caller's bound is gate time + 3 ms, and so is Redis' clock.
    assert abs(limiter.left_wire(wire) - (wire.passed_us + 3_000)) <= 1  # µs rounding of the float clock
    late = limiter.enter_wire(s, RATE)
    assert late is not None
    shifted = dataclasses.replace(late, called_at=late.called_at - 1.0)
    # A caller whose own clock says more than Redis' does: Redis' now (never later than the report) wins.
    assert limiter.left_wire(shifted) == late.passed_us


def test_a_pass_stalled_past_the_in_flight_bound_is_not_fresh_and_would_have_drawn_a_429(
    limiter: RateLimiter, clock: SimClock
) -> None:
    # A request passes, then its process stops before writing (SIGSTOP, a frozen VM) past the in-flight
    # bound: its entry ages out, a full window of others goes meanwhile, and written now on the old pass it
    # would be the upstream's eleventh in one second. The pass is not fresh by then, so the client asks the
    # gate again instead (clients/perplexity.py:_Wire).
    s = scope()
    stalled = limiter.enter_wire(s, RATE)
    assert stalled is not None and limiter.pass_fresh(stalled)
    clock.run_until(clock.now + DEFAULT_IN_FLIGHT_S - PASS_SLACK_S - 0.01)
    assert limiter.pass_fresh(stalled)
    clock.run_until(clock.now + 0.02)
    assert not limiter.pass_fresh(stalled)
    clock.run_until(clock.now + 1.5)  # the stop goes on past the bound + the window: its entry is gone
    others = []
    for _ in range(10):
        wire = limiter.enter_wire(s, RATE, max_wait_s=10.0)
        assert wire is not None
        others.append(clock.now)
        limiter.left_wire(wire)
    assert upstream_refusals([*others, clock.now]) == 1  # the stale pass written now: a 429
    renewed = limiter.enter_wire(s, RATE, max_wait_s=10.0)  # what the client does instead
    assert renewed is not None and limiter.pass_fresh(renewed)
    assert upstream_refusals([*others, clock.now]) == 0


def test_a_429_block_holds_at_the_gate_too(limiter: RateLimiter, clock: SimClock) -> None:
    s = scope()
    limiter.block(s, 2.0)
    start = clock.now
    wire = limiter.enter_wire(s, RATE)
    assert wire is not None
    assert clock.now - start >= 2.0 - 1e-6


def test_unlimited_rates_have_no_gate(limiter: RateLimiter) -> None:
    assert limiter.enter_wire(scope(), 0.0) is None


def test_gate_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="arrival_margin_s"):
        RateLimiter(fakeredis.FakeRedis(), arrival_margin_s=-0.001)
    with pytest.raises(ValueError, match="in_flight_s"):
        RateLimiter(fakeredis.FakeRedis(), in_flight_s=0.0)


# --- schedules with injected lateness --------------------------------------------------------------


@dataclass
class Schedule:
    """Per request: lateness of its wake-up after its slot, the stall between gate and wire, how long its
    report takes after the write, and the time from the wire to the upstream counting it."""

    wake: list[float]
    stall: list[float]
    report: list[float]
    transit: list[float]
    arrivals: list[float] = field(default_factory=list)


def lateness(seed: int, n: int, worst: float) -> Schedule:
    """Mostly a millisecond or two, now and then a stall of up to `worst` s anywhere on the way; the
    transit varies by less than the gate's margin."""
    rng = random.Random(seed)

    def draw() -> list[float]:
        return [rng.uniform(0, worst) if rng.random() < 0.08 else rng.uniform(0, 0.002) for _ in range(n)]

    return Schedule(draw(), draw(), draw(), [rng.uniform(0, MARGIN_S * 0.98) for _ in range(n)])


def slots(n: int) -> Iterator[float]:
    interval = 1 / (RATE * (1 - HEADROOM))
    return (k * interval for k in range(n))


def run_gated(limiter: RateLimiter, clock: SimClock, plan: Schedule) -> list[float]:
    """Every request through the gate at its slot + wake lateness (requests that fall due while another
    waits at the gate go after it — a stalled thread, as far as the gate can tell)."""
    s = scope()
    base = clock.now
    arrivals: list[float] = []
    for k, slot in enumerate(slots(len(plan.wake))):
        clock.run_until(base + slot + plan.wake[k])
        wire = limiter.enter_wire(s, RATE)
        assert wire is not None
        written = clock.now + plan.stall[k]
        arrivals.append(written + plan.transit[k] - base)

        def report(w: WirePass = wire) -> None:
            limiter.left_wire(w)

        clock.at(written + plan.report[k], report)
    clock.drain()
    return arrivals


@pytest.mark.parametrize("seed", range(6))
def test_no_window_ever_holds_one_too_many_whatever_the_lateness(
    limiter: RateLimiter, clock: SimClock, seed: int
) -> None:
    plan = lateness(seed, 300, worst=0.08)
    ungated = [slot + plan.wake[k] + plan.stall[k] + plan.transit[k] for k, slot in enumerate(slots(300))]
    assert upstream_refusals(ungated) > 0  # the same lateness without the gate: 429s
    gated = run_gated(limiter, clock, plan)
    assert upstream_refusals(gated) == 0
    # And it still sends at nearly the paced rate: what lateness costs is waiting, not lost slots.
    assert len(gated) / (max(gated) - min(gated)) > RATE * (1 - HEADROOM) * 0.95


def test_a_stall_between_gate_and_wire_longer_than_the_slack_is_still_safe(
    limiter: RateLimiter, clock: SimClock
) -> None:
    # The case the old check before the POST could not see: request 0 passes, then stalls 60 ms before its
    # first byte; request 10, on time, would land 60 ms less the headroom's slack inside request 0's window.
    n = 40
    plan = Schedule([0.0] * n, [0.0] * n, [0.0005] * n, [0.001] * n)
    plan.stall[0] = 0.060
    ungated = [slot + plan.wake[k] + plan.stall[k] + plan.transit[k] for k, slot in enumerate(slots(n))]
    assert upstream_refusals(ungated) == 1
    assert upstream_refusals(run_gated(limiter, clock, plan)) == 0
