"""The global rate limiter on a real Redis, shared by threads that each own a client.

Every assertion is on slots, counts and ordering in Redis time (the script returns the slot it
booked and its clock), never on how long the test took. Only keys under this test's own prefix are touched;
the script cache of the shared server is left alone (NOSCRIPT is provoked another way).
"""

from __future__ import annotations

import itertools
import math
import re
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis as redis_lib

from tests.services import REDIS_URL
from workers.limiter import Grant, LimiterTimeout, RateLimiter, scope_for, with_headroom

pytestmark = pytest.mark.integration

US = 1_000_000
HEADROOM = 0.02


@pytest.fixture
def prefix(redis_client: redis_lib.Redis) -> Iterator[str]:
    """A prefix of this test's own; its keys are deleted afterwards (the server is shared)."""
    value = f"factgate:rl:test:{uuid.uuid4().hex[:10]}"
    yield value
    for key in redis_client.scan_iter(match=f"{value}:*"):
        redis_client.delete(key)


@pytest.fixture
def limiter(redis_client: redis_lib.Redis, prefix: str) -> RateLimiter:
    return RateLimiter(redis_client, prefix=prefix)


def max_in_window(times_us: list[int], window_us: int = US) -> int:
    """Most grants in any half-open window [t, t + window) of Redis time."""
    times = sorted(times_us)
    best = lo = 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window_us:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def run_workers(prefix: str, scope: str, rate: float, threads: int, grants_each: int) -> list[Grant]:
    """Threads with a client each acquire slots; returns every grant (slot and release, Redis time)."""
    grants: list[Grant] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        client = redis_lib.Redis.from_url(REDIS_URL)
        try:
            own = RateLimiter(client, prefix=prefix)
            for _ in range(grants_each):
                grant = own.acquire_grant(scope, rate, max_wait_s=30.0)
                with lock:
                    grants.append(grant)
        except BaseException as exc:
            errors.append(exc)
        finally:
            client.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    assert all(g.redis_time_us >= g.slot_us for g in grants)  # nobody let go before its slot
    return grants


def test_many_threads_with_their_own_clients_keep_the_rate_less_headroom(prefix: str) -> None:
    scope = scope_for("pplx-integration-key", "decisions")
    rate = with_headroom(10.0, HEADROOM)
    grants = run_workers(prefix, scope, rate, threads=16, grants_each=2)
    slots = sorted(g.slot_us for g in grants)
    assert len(set(slots)) == 32
    assert min(b - a for a, b in itertools.pairwise(slots)) >= math.ceil(US / rate)
    assert max_in_window(slots) <= math.floor(rate) + 1
    # Any 11 consecutive slots span 10 / (r (1 - h)) s: 20.4 ms of slack against the upstream's second.
    assert min(slots[i + 10] - slots[i] for i in range(len(slots) - 10)) >= US + 20_400


def test_a_block_after_booking_pushes_every_unsent_caller_past_it(
    redis_client: redis_lib.Redis, prefix: str
) -> None:
    scope = scope_for("pplx-integration-key", "decisions")
    blocked: list[float] = []

    def upstream_429_while_they_sleep() -> None:
        time.sleep(0.25)
        blocked.append(RateLimiter(redis_client, prefix=prefix).block(scope, 1.0))

    side = threading.Thread(target=upstream_429_while_they_sleep)
    side.start()
    grants = run_workers(prefix, scope, 10.0, threads=6, grants_each=2)
    side.join()

    (until,) = blocked
    called_at_us = round((until - 1.0) * US)
    until_us = round(until * US)
    # Callers let go before the 429 had sent already; nobody was let go, and no slot used, inside it.
    assert not [g for g in grants if called_at_us <= g.redis_time_us < until_us - 1]
    assert not [g for g in grants if called_at_us <= g.slot_us < until_us - 1]
    pushed = [g for g in grants if g.slot_us >= until_us - 1]
    assert pushed  # 12 slots at 10/s could not all fit before the block: some were pushed past it
    slots = sorted(g.slot_us for g in grants)
    assert min(b - a for a, b in itertools.pairwise(slots)) >= 100_000


def test_a_block_and_its_extension_hold_every_client(redis_client: redis_lib.Redis, prefix: str) -> None:
    scope = scope_for("pplx-integration-key", "decisions")
    first_until = RateLimiter(redis_client, prefix=prefix).block(scope, 1.0)
    extended: list[float] = []

    def extend_while_they_wait() -> None:
        time.sleep(0.3)
        extended.append(RateLimiter(redis_client, prefix=prefix).block(scope, 1.5))

    side = threading.Thread(target=extend_while_they_wait)
    side.start()
    grants = run_workers(prefix, scope, 10.0, threads=4, grants_each=2)
    side.join()

    assert len(grants) == 8
    assert min(g.slot_us for g in grants) >= first_until * US - 1
    (second_until,) = extended
    assert second_until > first_until
    # Every slot was booked at or after the first block's end, all of them after the extension was
    # issued: nobody may be let go before the extension's end.
    assert min(g.redis_time_us for g in grants) >= second_until * US - 1


def test_a_reservation_beyond_max_wait_books_nothing(
    redis_client: redis_lib.Redis, limiter: RateLimiter
) -> None:
    scope = scope_for("pplx-integration-key", "decisions")
    for _ in range(10):
        assert limiter.reserve(scope, 10.0).taken  # the next slot is ~1 s away
    tat = redis_client.hget(limiter.key(scope), "tat")
    with pytest.raises(LimiterTimeout) as info:
        limiter.acquire(scope, 10.0, max_wait_s=0.5)
    assert info.value.waited == 0.0
    assert redis_client.hget(limiter.key(scope), "tat") == tat
    assert limiter.reserve(scope, 10.0, max_wait_s=5.0).slot_us == int(tat or b"0")


def test_extension_never_shortens_and_keys_expire(
    redis_client: redis_lib.Redis, limiter: RateLimiter
) -> None:
    scope = scope_for("pplx-integration-key", "search")
    until = limiter.block(scope, 20.0)
    assert limiter.block(scope, 2.0) == until
    assert 19_000 < redis_client.pttl(limiter.key(scope)) <= 21_000 + 1
    assert limiter.block(scope, 40.0) > until
    assert 39_000 < redis_client.pttl(limiter.key(scope)) <= 41_000 + 1


def test_times_are_stored_exactly_despite_redis_number_formatting(
    redis_client: redis_lib.Redis, limiter: RateLimiter
) -> None:
    # Redis renders Lua numbers with %.14g; a 16-digit microsecond time would be rounded.
    scope = scope_for("pplx-integration-key", "agent")
    reservation = limiter.reserve(scope, 4.0)
    assert reservation.taken
    assert reservation.slot_us == reservation.redis_time_us
    stored = redis_client.hget(limiter.key(scope), "tat")
    assert stored is not None
    assert re.fullmatch(rb"\d{16}", stored)
    assert int(stored) == reservation.slot_us + 250_000


def test_scopes_are_independent_on_real_redis(limiter: RateLimiter) -> None:
    a = scope_for("key-a", "decisions")
    b = scope_for("key-b", "decisions")
    limiter.block(a, 30.0)
    with pytest.raises(LimiterTimeout):
        limiter.acquire(a, 10.0, max_wait_s=5.0)
    assert limiter.acquire(b, 10.0, max_wait_s=5.0) == 0.0


def test_a_lost_key_is_forgotten_and_pacing_resumes(
    redis_client: redis_lib.Redis, limiter: RateLimiter
) -> None:
    scope = scope_for("pplx-integration-key", "decisions")
    for _ in range(30):
        limiter.reserve(scope, 10.0)
    limiter.block(scope, 3600.0)
    redis_client.delete(limiter.key(scope))  # what FLUSHALL, eviction or a failover does to this scope
    first = limiter.reserve(scope, 10.0)
    second = limiter.reserve(scope, 10.0)
    assert first.slot_us == first.redis_time_us
    assert second.slot_us - first.slot_us == 100_000


def test_recovers_from_noscript(redis_client: redis_lib.Redis, limiter: RateLimiter) -> None:
    # A server that lost its script cache answers NOSCRIPT; a wrong sha provokes the same reply
    # without flushing the cache other tests on this server rely on.
    real_sha = limiter._script.sha
    limiter._script.sha = "0" * 40
    scope = scope_for("pplx-integration-key", "decisions")
    assert limiter.try_acquire(scope, 10.0) == 0.0
    assert limiter._script.sha == real_sha
    assert redis_client.script_exists(real_sha) == [True]
    assert limiter.try_acquire(scope, 10.0) > 0.0
