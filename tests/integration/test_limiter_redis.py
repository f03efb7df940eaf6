"""The global rate limiter on a real Redis, shared by threads that each own a client.

Every assertion is on counts and ordering in Redis time (the script returns the instant it
granted), never on how long the test took. Only keys under this test's own prefix are touched;
the script cache of the shared server is left alone (NOSCRIPT is provoked another way).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis as redis_lib

from tests.services import REDIS_URL
from workers.limiter import LimiterTimeout, RateLimiter, scope_for

pytestmark = pytest.mark.integration

US = 1_000_000


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


def run_workers(prefix: str, scope: str, rate: float, threads: int, grants_each: int) -> list[int]:
    """Threads with a client each acquire slots; returns every grant's Redis time."""
    times: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        client = redis_lib.Redis.from_url(REDIS_URL)
        try:
            own = RateLimiter(client, prefix=prefix)
            for _ in range(grants_each):
                grant = own.acquire_grant(scope, rate, max_wait_s=30.0)
                with lock:
                    times.append(grant.redis_time_us)
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
    return times


def test_threads_with_their_own_clients_never_exceed_ten_per_second(prefix: str) -> None:
    scope = scope_for("pplx-integration-key", "decisions")
    times = run_workers(prefix, scope, 10.0, threads=6, grants_each=5)
    assert len(times) == 30
    assert len(set(times)) == 30
    assert max_in_window(times) <= 10
    ordered = sorted(times)
    assert min(b - a for a, b in itertools.pairwise(ordered)) >= 100_000


def test_a_block_and_its_extension_hold_every_client(redis_client: redis_lib.Redis, prefix: str) -> None:
    scope = scope_for("pplx-integration-key", "decisions")
    first_until = RateLimiter(redis_client, prefix=prefix).block(scope, 1.0)
    extended: list[float] = []

    def extend_while_they_wait() -> None:
        time.sleep(0.3)
        extended.append(RateLimiter(redis_client, prefix=prefix).block(scope, 1.5))

    side = threading.Thread(target=extend_while_they_wait)
    side.start()
    times = run_workers(prefix, scope, 10.0, threads=4, grants_each=2)
    side.join()

    assert len(times) == 8
    assert min(times) >= first_until * US
    (second_until,) = extended
    assert second_until > first_until
    # No grant fell between the extending 429 (second_until - 1.5 s) and its end. Whether the
    # extension came before or after some grants depends on scheduling; the gap must not.
    called_at_us = round((second_until - 1.5) * US)
    until_us = round(second_until * US)
    assert not [t for t in times if called_at_us <= t < until_us]


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
    decision = limiter.attempt(scope, 4.0)
    assert decision.granted
    stored = redis_client.hget(limiter.key(scope), "tat")
    assert stored is not None
    assert re.fullmatch(rb"\d{16}", stored)
    assert int(stored) == decision.redis_time_us + 250_000


def test_scopes_are_independent_on_real_redis(limiter: RateLimiter) -> None:
    a = scope_for("key-a", "decisions")
    b = scope_for("key-b", "decisions")
    limiter.block(a, 30.0)
    with pytest.raises(LimiterTimeout):
        limiter.acquire(a, 10.0, max_wait_s=5.0)
    assert limiter.acquire(b, 10.0, max_wait_s=5.0) == 0.0


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
