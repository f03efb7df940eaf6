"""After a Redis failover (or a restart empty) the limiter starts paced from "now", never with a burst.

The promoted replica holds the scope's hash as last replicated — or nothing, if the key had not reached
it or expired. workers/limiter.py's script reads a missing `tat` as 0, so the first slot is Redis's now and
every following one 1/r later: an empty bucket is not a full one (burst is 1: tau = 0). A stale `tat` in
the past is the same as none. These tests pin that down, so a change to the script that let an empty key
mean "a burst's worth of free slots" fails here.
"""

from __future__ import annotations

import itertools
import time

import fakeredis
import pytest

from workers.limiter import RateLimiter

RATE = 10.0
US = 1_000_000


def _slots(limiter: RateLimiter, scope: str, n: int) -> tuple[list[int], int]:
    """Book n slots at once (as n threads would) and return them with Redis's time at the first booking."""
    first = limiter.reserve(scope, RATE, max_wait_s=60.0)
    slots = [first.slot_us]
    for _ in range(n - 1):
        slots.append(limiter.reserve(scope, RATE, max_wait_s=60.0).slot_us)
    return slots, first.redis_time_us


def _assert_paced_from(slots: list[int], now_us: int) -> None:
    interval = int(US / RATE)
    assert slots[0] >= now_us
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert min(gaps) >= interval, gaps  # no two slots closer than 1/r: no burst
    # ... and no more than ceil(r) in any one second from the first.
    assert sum(1 for s in slots if s < slots[0] + US) <= RATE


def test_an_empty_bucket_on_the_new_master_starts_paced_from_now() -> None:
    old = RateLimiter(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    _slots(old, "k:decisions", 30)  # the old master had bookings three seconds ahead
    promoted = RateLimiter(fakeredis.FakeRedis(server=fakeredis.FakeServer()))  # nothing replicated
    slots, now_us = _slots(promoted, "k:decisions", 25)
    _assert_paced_from(slots, now_us)


@pytest.mark.parametrize("age_s", [1.0, 3600.0])
def test_a_stale_bucket_in_the_past_starts_paced_from_now(age_s: float) -> None:
    store = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    limiter = RateLimiter(store)
    now_us = limiter.state("k:decisions").redis_time_us
    store.hset(limiter.key("k:decisions"), mapping={"tat": str(now_us - int(age_s * US)), "blk": "0"})
    slots, now_us = _slots(limiter, "k:decisions", 25)
    _assert_paced_from(slots, now_us)


def test_a_flushed_bucket_mid_job_starts_paced_again() -> None:
    """The key gone under a running limiter (FLUSHALL, a restart empty): the same as a new master."""
    store = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    limiter = RateLimiter(store)
    _slots(limiter, "k:decisions", 10)
    store.flushall()
    slots, now_us = _slots(limiter, "k:decisions", 25)
    _assert_paced_from(slots, now_us)


def test_a_sleeper_whose_booking_was_lost_books_again_behind_the_new_callers() -> None:
    """Redis restarted empty (or failed over) while a caller slept until its slot: the callers booking on
    the new Redis start from "now" and get that same slot. The sleeper must not send on it too."""
    store = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    others = RateLimiter(store)
    scope = "k:decisions"
    _slots(others, scope, 5)  # the sleeper's slot is half a second ahead
    fresh: list[int] = []

    def restart_while_asleep(seconds: float) -> None:
        if not fresh:
            store.flushall()  # the new master: nothing of the old bookings
            fresh.extend(_slots(others, scope, 8)[0])  # callers arriving there book from "now"
        time.sleep(seconds)

    # Lateness must not be what makes it book again (booking the new callers takes a few ms of the sleep).
    sleeper = RateLimiter(store, sleep=restart_while_asleep, max_late_s=60.0)
    grant = sleeper.acquire_grant(scope, RATE, max_wait_s=10.0)
    assert fresh, "the sleeper never slept"
    _assert_paced_from(sorted([*fresh, grant.slot_us]), min(fresh))
    assert grant.rebooked >= 1
