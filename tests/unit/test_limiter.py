"""The global rate limiter's script on fakeredis (with lupa): reservations, headroom, blocks, TTLs, scopes,
failure modes.

Time comes from Redis TIME, so assertions are about slots, counts and ordering in Redis time (the
script returns them), or about the sleeps a caller asked for — never about how long the test took.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import uuid
from pathlib import Path

import fakeredis
import pytest

from config import Settings
from workers.context import build_context
from workers.limiter import Grant, LimiterTimeout, RateLimiter, scope_for, with_headroom

US = 1_000_000
HEADROOM = 0.02


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
def client(server: fakeredis.FakeServer) -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis(server=server)


@pytest.fixture
def limiter(client: fakeredis.FakeRedis) -> RateLimiter:
    return RateLimiter(client, prefix="t:rl")


def scope() -> str:
    return f"s{uuid.uuid4().hex[:8]}:decisions"


def interval_us(rate: float, headroom: float = 0.0) -> int:
    """The spacing the limiter must keep at `rate` with `headroom`, rounded up to whole µs."""
    return math.ceil(US / (rate * (1 - headroom)))


def max_in_window(times_us: list[int], window_us: int = US) -> int:
    """Most grants in any half-open window [t, t + window) of Redis time."""
    times = sorted(times_us)
    best = 0
    lo = 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window_us:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def recording_sleep(slept: list[float]) -> object:
    """A real sleep that also records what was asked for."""

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    return sleep


# --- scope_for -----------------------------------------------------------------------------------


def test_scope_hides_the_key_and_separates_keys_and_endpoints() -> None:
    key = "pplx-secret-abcdef123456"
    s = scope_for(key, "decisions")
    assert key not in s and "secret" not in s
    assert s.endswith(":decisions")
    assert s == scope_for(key, "decisions")
    assert s != scope_for(key + "x", "decisions")
    assert s != scope_for(key, "search")
    assert scope_for(None, "search") == "nokey:search"


@pytest.mark.parametrize("endpoint", ["", "a b", "x\n"])
def test_scope_rejects_blank_endpoints(endpoint: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        scope_for("k", endpoint)


def test_max_in_window_counts_half_open_windows() -> None:
    assert max_in_window([0, US - 1, US, 2 * US]) == 2
    assert max_in_window([0, 1, 2, US + 3]) == 3
    assert max_in_window([]) == 0


# --- headroom ------------------------------------------------------------------------------------


def test_headroom_lowers_the_rate_and_leaves_unlimited_alone() -> None:
    assert with_headroom(10.0, 0.025) == pytest.approx(9.75)
    assert with_headroom(10.0, 0.0) == 10.0
    assert with_headroom(0.0, 0.5) == 0.0
    assert with_headroom(float("inf"), 0.5) == float("inf")


@pytest.mark.parametrize("bad", [-0.01, 1.0, 1.5, float("nan")])
def test_headroom_outside_zero_to_one_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="headroom"):
        with_headroom(10.0, bad)
    with pytest.raises(ValueError, match="FACTGATE_LIMITER_HEADROOM"):
        Settings.from_env({"FACTGATE_LIMITER_HEADROOM": str(bad)})


def test_headroom_setting_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).limiter_headroom == 0.01  # the wire gate guarantees; this keeps it idle
    assert Settings.from_env({"FACTGATE_LIMITER_HEADROOM": "0.05"}).limiter_headroom == 0.05
    assert Settings.from_env({"FACTGATE_LIMITER_HEADROOM": "0"}).limiter_headroom == 0.0


def test_workers_ask_the_limiter_for_the_rate_less_the_headroom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(instance_path=tmp_path, decisions_rps=10.0, search_rps=50.0, limiter_headroom=0.2)
    ctx = build_context(settings)
    asked: list[tuple[str, float, float]] = []

    def spy(scope: str, rate_per_s: float, burst: int = 1, max_wait_s: float = 60.0) -> float:
        asked.append((scope, rate_per_s, max_wait_s))
        return 0.0

    monkeypatch.setattr(ctx.limiter, "acquire", spy)
    try:
        before_attempt = ctx.client._before_attempt
        assert before_attempt is not None
        before_attempt("decisions")
        before_attempt("search")
    finally:
        ctx.close()
    assert asked == [
        ("nokey:decisions", pytest.approx(8.0), settings.limiter_max_wait_s),
        ("nokey:search", pytest.approx(40.0), settings.limiter_max_wait_s),
    ]


# --- reservations and spacing --------------------------------------------------------------------


def test_reservations_are_spaced_by_the_interval_at_rate_less_headroom(limiter: RateLimiter) -> None:
    rate = with_headroom(10.0, HEADROOM)
    s = scope()
    reservations = [limiter.reserve(s, rate) for _ in range(30)]
    assert all(r.taken for r in reservations)
    slots = [r.slot_us for r in reservations]
    # The first is free now; every later one is booked in the future, one interval after the last.
    assert slots[0] == reservations[0].redis_time_us
    assert {b - a for a, b in itertools.pairwise(slots)} == {interval_us(10.0, HEADROOM)}
    # The guarantee against the upstream's one-second window: 11 consecutive slots span at least
    # 10 / (r (1 - h)) s, which is 10/r · h/(1-h) s (20.4 ms at 10/s) more than one second.
    spans = [slots[i + 10] - slots[i] for i in range(len(slots) - 10)]
    assert min(spans) >= 10 * US / (10.0 * (1 - HEADROOM))
    assert min(spans) - US >= 20_400
    assert max_in_window(slots) == 10


def test_interval_is_rounded_up_so_a_fractional_interval_never_admits_an_extra_slot(
    limiter: RateLimiter,
) -> None:
    # 3/s is 333,333.3 µs: rounding down would fit four slots into some one-second window.
    s = scope()
    first, second = limiter.reserve(s, 3.0), limiter.reserve(s, 3.0)
    assert second.slot_us - first.slot_us == 333_334


def test_try_acquire_takes_a_free_slot_and_books_nothing_otherwise(limiter: RateLimiter) -> None:
    s = scope()
    assert limiter.try_acquire(s, 10.0) == 0.0
    waits = [limiter.try_acquire(s, 10.0) for _ in range(20)]
    assert all(0.0 < w <= 0.1 for w in waits)
    # Twenty refusals later the next slot is still the one just after the first grant.
    assert limiter.reserve(s, 10.0).wait_s <= 0.1


def test_burst_allows_that_many_back_to_back_then_paces(limiter: RateLimiter) -> None:
    s = scope()
    assert [limiter.try_acquire(s, 1.0, burst=5) for _ in range(5)] == [0.0] * 5
    wait = limiter.try_acquire(s, 1.0, burst=5)
    assert 0.0 < wait <= 1.0


def test_burst_bounds_any_window_at_rate_plus_burst_minus_one(limiter: RateLimiter) -> None:
    s = scope()
    slots = [limiter.reserve(s, 20.0, burst=4).slot_us for _ in range(60)]
    assert max_in_window(slots) == 20 + 4 - 1


def test_a_reservation_beyond_max_wait_raises_and_books_nothing(
    limiter: RateLimiter, client: fakeredis.FakeRedis
) -> None:
    s = scope()
    for _ in range(5):
        limiter.reserve(s, 10.0)  # the next free slot is now about 0.5 s away
    tat_before = client.hget(limiter.key(s), "tat")
    slept: list[float] = []
    impatient = RateLimiter(client, prefix="t:rl", sleep=slept.append)
    with pytest.raises(LimiterTimeout) as info:
        impatient.acquire(s, 10.0, max_wait_s=0.3)
    assert info.value.waited == 0.0
    assert slept == []
    refused = limiter.reserve(s, 10.0, max_wait_s=0.3)
    assert not refused.taken
    assert client.hget(limiter.key(s), "tat") == tat_before
    # The next caller with a longer budget gets exactly the slot the impatient ones did not take.
    patient = limiter.reserve(s, 10.0, max_wait_s=5.0)
    assert patient.taken
    assert patient.slot_us == refused.slot_us


def test_many_clients_on_threads_never_exceed_the_rate_less_headroom(server: fakeredis.FakeServer) -> None:
    rate = with_headroom(40.0, HEADROOM)  # 39/s
    s = scope()
    grants: list[Grant] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        own = RateLimiter(fakeredis.FakeRedis(server=server), prefix="t:rl")
        try:
            for _ in range(8):
                grant = own.acquire_grant(s, rate, max_wait_s=30.0)
                with lock:
                    grants.append(grant)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    slots = sorted(g.slot_us for g in grants)
    assert len(set(slots)) == 64
    assert min(b - a for a, b in itertools.pairwise(slots)) >= interval_us(40.0, HEADROOM)
    assert max_in_window(slots) <= math.floor(rate) + 1
    # Nobody was let go before its slot (Redis time).
    assert all(g.redis_time_us >= g.slot_us for g in grants)


# --- sleeping until the slot ---------------------------------------------------------------------


def test_acquire_sleeps_once_exactly_until_the_slot(client: fakeredis.FakeRedis) -> None:
    slept: list[float] = []
    # Lateness never re-books here, even on a loaded machine: this test is about sleeping once.
    lim = RateLimiter(client, prefix="t:rl", sleep=recording_sleep(slept), max_late_s=1.0)
    s = scope()
    assert lim.acquire(s, 5.0) == 0.0
    assert slept == []
    booked = lim.reserve(s, 5.0)  # someone else takes the second slot
    grant = lim.acquire_grant(s, 5.0)
    assert grant.slot_us == booked.slot_us + 200_000
    assert grant.redis_time_us >= grant.slot_us
    # One sleep for the whole wait, no polling in steps: the first sleep ends at the slot. (A wall
    # clock that runs a hair slow could add a top-up of microseconds, never a second step.)
    assert 0.2 < slept[0] <= 0.4
    assert sum(slept[1:]) < 0.001
    assert grant.waited == pytest.approx(sum(slept))


def test_a_caller_that_wakes_early_sleeps_the_rest_before_it_is_let_go(client: fakeredis.FakeRedis) -> None:
    slept: list[float] = []

    def short_sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds / 2)

    lim = RateLimiter(client, prefix="t:rl", sleep=short_sleep)
    s = scope()
    lim.reserve(s, 5.0)
    grant = lim.acquire_grant(s, 5.0)
    assert len(slept) >= 2
    assert grant.redis_time_us >= grant.slot_us


def test_a_caller_let_go_too_late_leaves_its_slot_and_books_again_once(client: fakeredis.FakeRedis) -> None:
    slept: list[float] = []

    def stalled_sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds + 0.05)  # as if a 50 ms garbage collection held the process

    lim = RateLimiter(client, prefix="t:rl", sleep=stalled_sleep, max_late_s=0.01)
    s = scope()
    lim.reserve(s, 10.0)
    missed = lim.reserve(s, 10.0, max_wait_s=0.0)  # the slot the caller books first (not taken here)
    grant = lim.acquire_grant(s, 10.0)
    assert grant.rebooked == 1
    assert grant.slot_us >= missed.slot_us + 100_000
    # Late again on the second slot, it sends anyway: lateness re-books only once per call.
    assert grant.redis_time_us - grant.slot_us >= 50_000
    assert len(slept) == 2
    assert grant.waited == pytest.approx(sum(slept))


def test_a_caller_let_go_in_time_keeps_its_slot(client: fakeredis.FakeRedis) -> None:
    lim = RateLimiter(client, prefix="t:rl", sleep=time.sleep, max_late_s=1.0)
    s = scope()
    lim.reserve(s, 10.0)
    expected = lim.reserve(s, 10.0, max_wait_s=0.0)
    grant = lim.acquire_grant(s, 10.0)
    assert grant.rebooked == 0
    assert grant.slot_us == expected.slot_us


def test_max_late_must_not_be_negative(client: fakeredis.FakeRedis) -> None:
    with pytest.raises(ValueError, match="max_late_s"):
        RateLimiter(client, max_late_s=-0.001)


# --- blocked_until -------------------------------------------------------------------------------


def test_no_reservation_is_before_blocked_until(server: fakeredis.FakeServer) -> None:
    s = scope()
    first = RateLimiter(fakeredis.FakeRedis(server=server), prefix="t:rl")
    second = RateLimiter(fakeredis.FakeRedis(server=server), prefix="t:rl")
    until_us = round(first.block(s, 5.0) * US)
    slots = [lim.reserve(s, 10.0).slot_us for lim in (first, second, first, second)]
    assert slots[0] - until_us in (-1, 0, 1)  # exactly blocked_until, up to float rounding of `until`
    assert min(slots) >= until_us - 1
    assert {b - a for a, b in itertools.pairwise(slots)} == {100_000}


def test_block_applies_to_unlimited_scopes_too(limiter: RateLimiter) -> None:
    s = scope()
    until_us = round(limiter.block(s, 2.0) * US)
    reservation = limiter.reserve(s, 0.0)
    assert abs(reservation.slot_us - until_us) <= 1
    assert limiter.try_acquire(s, 0.0) > 1.0


def test_a_block_issued_after_booking_pushes_the_unsent_caller_past_it(server: fakeredis.FakeServer) -> None:
    s = scope()
    other = RateLimiter(fakeredis.FakeRedis(server=server), prefix="t:rl")
    other.reserve(s, 10.0)
    other.reserve(s, 10.0)  # the caller's slot is ~0.2 s away
    blocks: list[float] = []
    slept: list[float] = []

    def upstream_says_429_while_we_sleep(seconds: float) -> None:
        if not blocks:
            blocks.append(other.block(s, 0.5))
        slept.append(seconds)
        time.sleep(seconds)

    caller = RateLimiter(
        fakeredis.FakeRedis(server=server), prefix="t:rl", sleep=upstream_says_429_while_we_sleep
    )
    first = caller.reserve(s, 10.0, max_wait_s=0.0)  # what the caller would book (not taken)
    grant = caller.acquire_grant(s, 10.0, max_wait_s=5.0)
    (until,) = blocks
    assert first.slot_us < until * US
    assert grant.slot_us >= until * US - 1
    assert grant.redis_time_us >= grant.slot_us
    assert grant.rebooked >= 1
    assert len(slept) >= 2


def test_a_block_that_ends_before_the_slot_leaves_it_alone(server: fakeredis.FakeServer) -> None:
    s = scope()
    other = RateLimiter(fakeredis.FakeRedis(server=server), prefix="t:rl")
    for _ in range(4):
        other.reserve(s, 10.0)  # the caller's slot is ~0.4 s away

    def short_429_while_we_sleep(seconds: float) -> None:
        other.block(s, 0.1)
        time.sleep(seconds)

    caller = RateLimiter(
        fakeredis.FakeRedis(server=server), prefix="t:rl", sleep=short_429_while_we_sleep, max_late_s=1.0
    )
    expected = caller.reserve(s, 10.0, max_wait_s=0.0)
    grant = caller.acquire_grant(s, 10.0)
    assert grant.slot_us == expected.slot_us


def test_block_extends_but_never_shortens(limiter: RateLimiter) -> None:
    s = scope()
    long_until = limiter.block(s, 30.0)
    assert limiter.block(s, 1.0) == long_until
    assert limiter.block(s, 0.0) == long_until
    assert limiter.block(s, -5.0) == long_until
    longer = limiter.block(s, 60.0)
    assert longer >= long_until + 29.0


def test_block_on_an_unblocked_scope_with_no_time_returns_now(limiter: RateLimiter) -> None:
    s = scope()
    now = limiter.state(s).redis_time_us
    until = limiter.block(s, 0.0)
    assert now <= until * US < now + 60 * US
    assert not limiter.state(s).blocked
    assert limiter.try_acquire(s, 10.0) == 0.0


def test_block_rejects_non_finite_seconds(limiter: RateLimiter) -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="seconds"):
            limiter.block(scope(), bad)


# --- TTLs and key layout -------------------------------------------------------------------------


def test_keys_expire_a_little_after_they_stop_mattering(
    limiter: RateLimiter, client: fakeredis.FakeRedis
) -> None:
    s = scope()
    limiter.try_acquire(s, 10.0)
    ttl = client.pttl(limiter.key(s))
    assert 0 < ttl <= 100 + 1_000 + 1
    # Bookings ahead keep the key until the last of them.
    for _ in range(9):
        limiter.reserve(s, 10.0)
    assert 900 < client.pttl(limiter.key(s)) <= 1_000 + 1_000 + 1
    limiter.block(s, 30.0)
    ttl = client.pttl(limiter.key(s))
    assert 29_000 < ttl <= 30_000 + 1_000 + 1
    # A reservation after the block must not cut the TTL below the block's end.
    limiter.reserve(s, 10.0)
    assert client.pttl(limiter.key(s)) > 29_000


def test_only_the_prefix_and_scope_appear_in_redis(limiter: RateLimiter, client: fakeredis.FakeRedis) -> None:
    s = scope_for("pplx-very-secret", "decisions")
    limiter.try_acquire(s, 10.0)
    limiter.block(s, 1.0)
    limiter.state(s)
    keys = [k.decode() for k in client.keys("*")]
    assert keys == [f"t:rl:{s}"]
    assert all("secret" not in k for k in keys)


def test_unlimited_rate_grants_everything_and_writes_nothing(
    limiter: RateLimiter, client: fakeredis.FakeRedis
) -> None:
    s = scope()
    assert [limiter.try_acquire(s, 0.0) for _ in range(200)] == [0.0] * 200
    assert [limiter.try_acquire(s, -1.0) for _ in range(5)] == [0.0] * 5
    assert [limiter.try_acquire(s, float("inf")) for _ in range(5)] == [0.0] * 5
    assert limiter.acquire(s, 0.0) == 0.0
    assert client.exists(limiter.key(s)) == 0


# --- scopes and rates ----------------------------------------------------------------------------


def test_scopes_are_independent(limiter: RateLimiter) -> None:
    a, b = scope(), scope()
    assert limiter.try_acquire(a, 1.0) == 0.0
    assert limiter.try_acquire(a, 1.0) > 0.0
    limiter.block(a, 10.0)
    assert limiter.try_acquire(b, 1.0) == 0.0
    assert limiter.block(b, 0.0) < limiter.block(a, 0.0)


def test_changing_the_rate_keeps_the_slots_already_booked(limiter: RateLimiter) -> None:
    s = scope()
    slow = [limiter.reserve(s, 0.1) for _ in range(2)]
    assert slow[1].slot_us - slow[0].slot_us == 10 * US
    # A raised rate cannot move a slot somebody is sleeping towards: the new caller queues behind
    # the bookings (one old interval after the last), and the new rate spaces what follows.
    fast = [limiter.reserve(s, 100.0) for _ in range(3)]
    assert fast[0].slot_us == slow[1].slot_us + 10 * US
    assert [b.slot_us - a.slot_us for a, b in itertools.pairwise(fast)] == [10_000, 10_000]


def test_prefixes_are_independent(client: fakeredis.FakeRedis) -> None:
    s = scope()
    RateLimiter(client, prefix="p1").block(s, 10.0)
    assert RateLimiter(client, prefix="p2").try_acquire(s, 10.0) == 0.0


# --- timeouts ------------------------------------------------------------------------------------


def test_acquire_fails_fast_when_the_block_outlasts_the_budget(client: fakeredis.FakeRedis) -> None:
    slept: list[float] = []
    lim = RateLimiter(client, prefix="t:rl", sleep=slept.append)
    s = scope()
    lim.block(s, 3600.0)
    with pytest.raises(LimiterTimeout) as info:
        lim.acquire(s, 10.0, max_wait_s=60.0)
    assert info.value.scope == s
    assert info.value.waited == 0.0
    assert slept == []
    assert "no slot" in str(info.value)


def test_acquire_times_out_when_429s_keep_extending_the_block(client: fakeredis.FakeRedis) -> None:
    s = scope()
    slept: list[float] = []
    lim: RateLimiter

    def sleep_while_upstream_keeps_refusing(seconds: float) -> None:
        slept.append(seconds)
        lim.block(s, seconds + 0.2)  # another worker's 429: the block outlasts this sleep
        time.sleep(seconds)

    lim = RateLimiter(client, prefix="t:rl", sleep=sleep_while_upstream_keeps_refusing)
    lim.block(s, 0.3)
    with pytest.raises(LimiterTimeout) as info:
        lim.acquire(s, 10.0, max_wait_s=0.8)
    assert info.value.scope == s
    assert len(slept) >= 2
    assert 0.3 <= info.value.waited <= 0.8
    assert info.value.waited == pytest.approx(sum(slept))


def test_acquire_rejects_nonsense_arguments(limiter: RateLimiter) -> None:
    with pytest.raises(ValueError, match="burst"):
        limiter.acquire(scope(), 10.0, burst=0)
    with pytest.raises(ValueError, match="rate"):
        limiter.acquire(scope(), float("nan"))
    with pytest.raises(ValueError, match="max_wait"):
        limiter.acquire(scope(), 10.0, max_wait_s=-1.0)
    with pytest.raises(ValueError, match="max_wait"):
        limiter.acquire(scope(), 10.0, max_wait_s=float("nan"))


def test_an_infinite_budget_is_allowed(limiter: RateLimiter) -> None:
    s = scope()
    limiter.block(s, 3600.0)
    assert limiter.reserve(s, 10.0, max_wait_s=float("inf")).taken


# --- Redis losing state --------------------------------------------------------------------------


def test_survives_script_flush_mid_run(limiter: RateLimiter, client: fakeredis.FakeRedis) -> None:
    s = scope()
    assert limiter.try_acquire(s, 10.0) == 0.0
    client.script_flush()
    assert client.script_exists(limiter._script.sha) == [False]
    # Still limiting, with the state that survived: the second slot is not free yet.
    assert limiter.try_acquire(s, 10.0) > 0.0
    assert client.script_exists(limiter._script.sha) == [True]


def test_a_flushed_key_forgets_bookings_and_blocks_and_recovers(
    limiter: RateLimiter, client: fakeredis.FakeRedis
) -> None:
    s = scope()
    for _ in range(20):
        limiter.reserve(s, 10.0)
    limiter.block(s, 3600.0)
    assert limiter.try_acquire(s, 10.0) > 3000.0
    client.flushall()
    # Redis is a hint: with the bookings and the block forgotten the scope is usable again, and paced.
    first = limiter.reserve(s, 10.0)
    second = limiter.reserve(s, 10.0)
    assert first.slot_us == first.redis_time_us
    assert second.slot_us - first.slot_us == 100_000
