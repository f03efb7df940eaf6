"""The global rate limiter's script on fakeredis (with lupa): spacing, blocks, TTLs, scopes, failure modes.

Time comes from Redis TIME, so assertions are about counts and ordering in Redis time, never
about how long the test took.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid

import fakeredis
import pytest

from workers.limiter import LimiterTimeout, RateLimiter, scope_for

US = 1_000_000


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


def grant_times(limiter: RateLimiter, s: str, rate: float, count: int, burst: int = 1) -> list[int]:
    """Acquire `count` slots one after another (really sleeping), returning their Redis times."""
    return [limiter.acquire_grant(s, rate, burst).redis_time_us for _ in range(count)]


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


# --- spacing ------------------------------------------------------------------------------------


def test_first_slot_is_free_and_the_next_waits_at_most_one_interval(limiter: RateLimiter) -> None:
    s = scope()
    assert limiter.try_acquire(s, 10.0) == 0.0
    wait = limiter.try_acquire(s, 10.0)
    assert 0.0 < wait <= 0.1


def test_burst_one_spaces_grants_by_the_interval_and_any_second_holds_at_most_rate(
    limiter: RateLimiter,
) -> None:
    rate = 40.0
    times = grant_times(limiter, scope(), rate, 50)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= US // 40
    assert max_in_window(times) <= 40


def test_interval_is_rounded_up_so_a_fractional_interval_never_admits_an_extra_grant(
    limiter: RateLimiter,
) -> None:
    # 3/s is 333,333.3 µs: rounding down would fit four grants into some one-second window.
    s = scope()
    granted = limiter.attempt(s, 3.0)
    denied = limiter.attempt(s, 3.0)
    assert granted.granted and not denied.granted
    next_slot = denied.redis_time_us + round(denied.wait_s * US)
    assert next_slot - granted.redis_time_us == 333_334


def test_burst_allows_that_many_back_to_back_then_paces(limiter: RateLimiter) -> None:
    s = scope()
    assert [limiter.try_acquire(s, 1.0, burst=5) for _ in range(5)] == [0.0] * 5
    wait = limiter.try_acquire(s, 1.0, burst=5)
    assert 0.0 < wait <= 1.0


def test_burst_bounds_any_window_at_rate_plus_burst_minus_one(limiter: RateLimiter) -> None:
    times = grant_times(limiter, scope(), 20.0, 30, burst=4)
    assert max_in_window(times) <= 20 + 4 - 1


def test_denied_attempts_reserve_nothing(limiter: RateLimiter) -> None:
    s = scope()
    assert limiter.attempt(s, 1.0).granted
    denied = [limiter.attempt(s, 1.0) for _ in range(20)]
    assert not any(d.granted for d in denied)
    # Twenty refusals later the next slot is still the one just after the first grant.
    assert denied[-1].wait_s <= 1.0


def test_many_clients_on_threads_never_exceed_the_rate(server: fakeredis.FakeServer) -> None:
    s = scope()
    times: list[int] = []
    lock = threading.Lock()
    rate = 25.0

    def worker() -> None:
        own = RateLimiter(fakeredis.FakeRedis(server=server), prefix="t:rl")
        for _ in range(8):
            grant = own.acquire_grant(s, rate)
            with lock:
                times.append(grant.redis_time_us)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(times) == 48
    assert len(set(times)) == 48
    assert max_in_window(times) <= 25
    ordered = sorted(times)
    assert min(b - a for a, b in itertools.pairwise(ordered)) >= US // 25


# --- blocked_until ------------------------------------------------------------------------------


def test_block_makes_every_client_wait_until_it_ends(server: fakeredis.FakeServer) -> None:
    s = scope()
    first = RateLimiter(fakeredis.FakeRedis(server=server), prefix="t:rl")
    second = RateLimiter(fakeredis.FakeRedis(server=server), prefix="t:rl")
    until = first.block(s, 5.0)
    for lim in (first, second):
        decision = lim.attempt(s, 10.0)
        assert not decision.granted
        assert decision.redis_time_us < until * US
        # The wait ends exactly at blocked_until (µs, up to float rounding of `until`).
        assert abs(decision.redis_time_us + decision.wait_s * US - until * US) < 2
        assert 4.0 < decision.wait_s <= 5.0


def test_block_applies_to_unlimited_scopes_too(limiter: RateLimiter) -> None:
    s = scope()
    limiter.block(s, 2.0)
    assert limiter.try_acquire(s, 0.0) > 1.0


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
    now = limiter.attempt(s, 0.0).redis_time_us
    until = limiter.block(s, 0.0)
    assert now <= until * US < now + 60 * US
    assert limiter.try_acquire(s, 10.0) == 0.0


def test_block_rejects_non_finite_seconds(limiter: RateLimiter) -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="seconds"):
            limiter.block(scope(), bad)


# --- TTLs and key layout ------------------------------------------------------------------------


def test_keys_expire_a_little_after_they_stop_mattering(
    limiter: RateLimiter, client: fakeredis.FakeRedis
) -> None:
    s = scope()
    limiter.try_acquire(s, 10.0)
    ttl = client.pttl(limiter.key(s))
    assert 0 < ttl <= 100 + 1_000 + 1
    limiter.block(s, 30.0)
    ttl = client.pttl(limiter.key(s))
    assert 29_000 < ttl <= 30_000 + 1_000 + 1
    # A grant after the block must not cut the TTL below the block's end.
    limiter.try_acquire(s, 10.0)
    assert client.pttl(limiter.key(s)) > 29_000


def test_only_the_prefix_and_scope_appear_in_redis(limiter: RateLimiter, client: fakeredis.FakeRedis) -> None:
    s = scope_for("pplx-very-secret", "decisions")
    limiter.try_acquire(s, 10.0)
    limiter.block(s, 1.0)
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
    assert client.exists(limiter.key(s)) == 0


# --- scopes -------------------------------------------------------------------------------------


def test_scopes_are_independent(limiter: RateLimiter) -> None:
    a, b = scope(), scope()
    assert limiter.try_acquire(a, 1.0) == 0.0
    assert limiter.try_acquire(a, 1.0) > 0.0
    limiter.block(a, 10.0)
    assert limiter.try_acquire(b, 1.0) == 0.0
    assert limiter.block(b, 0.0) < limiter.block(a, 0.0)


def test_raising_the_rate_takes_effect_at_once(limiter: RateLimiter) -> None:
    s = scope()
    assert limiter.try_acquire(s, 0.1) == 0.0
    assert limiter.try_acquire(s, 0.1) > 9.0
    # The slot booked 10 s ahead at the old rate is cut to one interval of the new one.
    assert 0.0 < limiter.try_acquire(s, 100.0) <= 0.01


def test_prefixes_are_independent(client: fakeredis.FakeRedis) -> None:
    s = scope()
    RateLimiter(client, prefix="p1").block(s, 10.0)
    assert RateLimiter(client, prefix="p2").try_acquire(s, 10.0) == 0.0


# --- acquire, timeouts --------------------------------------------------------------------------


def test_acquire_returns_zero_when_free_and_sleeps_when_not(client: fakeredis.FakeRedis) -> None:
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    lim = RateLimiter(client, prefix="t:rl", sleep=sleep)
    s = scope()
    assert lim.acquire(s, 5.0) == 0.0
    assert slept == []
    waited = lim.acquire(s, 5.0)
    assert waited > 0.0
    assert waited == pytest.approx(sum(slept))
    assert all(0 < x <= 0.5 * 1.1 for x in slept)


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


def test_acquire_times_out_when_429s_keep_extending_the_block(client: fakeredis.FakeRedis) -> None:
    s = scope()
    slept: list[float] = []
    lim: RateLimiter

    def sleep_while_upstream_keeps_refusing(seconds: float) -> None:
        slept.append(seconds)
        lim.block(s, 0.4)

    lim = RateLimiter(client, prefix="t:rl", sleep=sleep_while_upstream_keeps_refusing, max_step_s=0.25)
    lim.block(s, 0.4)
    with pytest.raises(LimiterTimeout) as info:
        lim.acquire(s, 10.0, max_wait_s=2.0)
    assert info.value.scope == s
    assert 1.5 <= info.value.waited <= 2.0
    assert info.value.waited == pytest.approx(sum(slept))
    assert max(slept) <= 0.25 * 1.1
    assert "no slot" in str(info.value)


def test_acquire_rejects_nonsense_arguments(limiter: RateLimiter) -> None:
    with pytest.raises(ValueError, match="burst"):
        limiter.acquire(scope(), 10.0, burst=0)
    with pytest.raises(ValueError, match="rate"):
        limiter.acquire(scope(), float("nan"))
    with pytest.raises(ValueError, match="max_wait"):
        limiter.acquire(scope(), 10.0, max_wait_s=-1.0)


# --- Redis losing state -------------------------------------------------------------------------


def test_survives_script_flush_mid_run(limiter: RateLimiter, client: fakeredis.FakeRedis) -> None:
    s = scope()
    assert limiter.try_acquire(s, 10.0) == 0.0
    client.script_flush()
    assert client.script_exists(limiter._script.sha) == [False]
    # Still limiting, with the state that survived: the second slot is not free yet.
    assert limiter.try_acquire(s, 10.0) > 0.0
    assert client.script_exists(limiter._script.sha) == [True]


def test_survives_flushall_forgetting_state(limiter: RateLimiter, client: fakeredis.FakeRedis) -> None:
    s = scope()
    limiter.block(s, 3600.0)
    assert limiter.try_acquire(s, 10.0) > 3000.0
    client.flushall()
    # Redis is a hint: with the block forgotten the scope is usable again, and still paced.
    assert limiter.try_acquire(s, 10.0) == 0.0
    assert limiter.try_acquire(s, 10.0) > 0.0
