"""Benchmark the global rate limiter: how close to the limit many threads get, and raw script speed.

Part 1: N threads, each with its own Redis client, call `acquire_grant` on one scope at
RATE × (1 − HEADROOM)/s (what the workers ask for) for about SECONDS. Prints grants/s ÷ (RATE × (1 − h))
(1.00: every slot used) and ÷ RATE, the most grants in any one-second window of Redis time (slots;
must be ≤ RATE), script calls per grant, how late callers were let go after their slot (Redis time
of the last check − slot), and slots left unused by callers let go too late. That lateness is the
limiter's share of slot-to-arrival jitter: the headroom's slack, 10/RATE · h/(1 − h) s, must cover
its spread plus the network's. The closest 11 consecutive releases show what is left of it.

Part 2: raw script calls/s from one thread (and from N threads on real Redis), on a scope whose
rate never makes anybody wait, so every call takes the write path; on real Redis and on fakeredis.

    .venv/bin/python bench/limiter_bench.py [--threads 8] [--rate 10] [--headroom 0.025] [--seconds 5]

Needs a Redis at FACTGATE_TEST_REDIS_URL (default redis://127.0.0.1:6379/15); deletes only
its own keys afterwards.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from collections.abc import Callable

import fakeredis
import redis

from config import Settings
from workers.limiter import Grant, LimiterTimeout, RateLimiter, Reservation, ScopeState, with_headroom

US = 1_000_000
REDIS_URL = os.environ.get("FACTGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


class CountingLimiter(RateLimiter):
    """Counts script runs (bookings and pre-send checks), to show what each grant costs."""

    calls = 0

    def reserve(self, scope: str, rate_per_s: float, burst: int = 1, max_wait_s: float = 60.0) -> Reservation:
        self.calls += 1
        return super().reserve(scope, rate_per_s, burst, max_wait_s)

    def state(self, scope: str) -> ScopeState:
        self.calls += 1
        return super().state(scope)


def max_in_window(times_us: list[int], window_us: int = US) -> int:
    times = sorted(times_us)
    best = lo = 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window_us:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def hammer(prefix: str, threads: int, rate: float, headroom: float, seconds: float) -> None:
    scope = f"bench:{uuid.uuid4().hex[:8]}"
    asked = with_headroom(rate, headroom)
    stop = threading.Event()
    lock = threading.Lock()
    grants: list[Grant] = []
    calls: list[int] = []
    timeouts = 0

    def worker() -> None:
        nonlocal timeouts
        client = redis.Redis.from_url(REDIS_URL)
        limiter = CountingLimiter(client, prefix=prefix)
        try:
            while not stop.is_set():
                try:
                    grant = limiter.acquire_grant(scope, asked, max_wait_s=2.0)
                except LimiterTimeout:
                    with lock:
                        timeouts += 1
                    time.sleep(0.05)
                    continue
                with lock:
                    grants.append(grant)
        finally:
            with lock:
                calls.append(limiter.calls)
            client.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    time.sleep(seconds + 0.5)
    stop.set()
    for t in pool:
        t.join()

    slots = sorted(g.slot_us for g in grants)
    per_s = (len(slots) - 1) / ((slots[-1] - slots[0]) / US)  # slot to slot: no fencepost error
    late_ms = [(g.redis_time_us - g.slot_us) / 1000 for g in grants]
    released = sorted(g.redis_time_us for g in grants)
    closest_11 = min(released[i + 10] - released[i] for i in range(len(released) - 10)) / US
    slack_ms = 10 / rate * headroom / (1 - headroom) * 1000
    print(f"acquire: {threads} threads at {rate:g}/s with headroom {headroom:g} (asks {asked:g}/s) "
          f"for about {seconds:g} s, burst 1")  # fmt: skip
    print(f"  grants                       {len(slots)}")
    print(f"  grants/s ÷ (rate × (1 − h))  {per_s / asked:.3f}")
    print(f"  grants/s ÷ rate              {per_s / rate:.3f}")
    print(f"  max grants in any 1 s        {max_in_window(slots)} (limit {rate:g})")
    print(f"  script calls/grant           {sum(calls) / len(grants):.2f}")
    print(f"  let go after slot, ms        p50 {pct(late_ms, 0.5):.2f}  p99 {pct(late_ms, 0.99):.2f}  "
          f"max {max(late_ms):.2f}  (spread max − min {max(late_ms) - min(late_ms):.2f})")  # fmt: skip
    print(f"  closest 11 releases          {closest_11:.4f} s (headroom slack {slack_ms:.1f} ms)")
    print(
        f"  slots left unused            {sum(g.rebooked for g in grants)} (re-booked behind a 429's block)"
    )
    print(f"  LimiterTimeouts              {timeouts} (max_wait_s=2, so a thread stops promptly)")


def raw_calls(label: str, make_client: Callable[[], redis.Redis], threads: int, seconds: float) -> None:
    scope = f"raw:{uuid.uuid4().hex[:8]}"
    counts: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        client = make_client()
        limiter = RateLimiter(client, prefix=PREFIX)
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            limiter.try_acquire(scope, 1e9)
            n += 1
        with lock:
            counts.append(n)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    print(f"  {label:<34} {sum(counts) / seconds:>9,.0f} calls/s")


PREFIX = f"factgate:rl:bench:{uuid.uuid4().hex[:8]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--headroom", type=float, default=Settings().limiter_headroom)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()

    admin = redis.Redis.from_url(REDIS_URL)
    info = admin.info("server")
    print(f"redis {info['redis_version']} at {REDIS_URL}; fakeredis {fakeredis.__version__}")
    try:
        hammer(PREFIX, args.threads, args.rate, args.headroom, args.seconds)
        print("raw script calls (rate never makes anybody wait, write path every call):")
        raw_calls("real Redis, 1 thread", lambda: redis.Redis.from_url(REDIS_URL), 1, 2.0)
        raw_calls(
            f"real Redis, {args.threads} threads", lambda: redis.Redis.from_url(REDIS_URL), args.threads, 2.0
        )
        server = fakeredis.FakeServer()
        raw_calls("fakeredis (lupa), 1 thread", lambda: fakeredis.FakeRedis(server=server), 1, 2.0)
    finally:
        for key in admin.scan_iter(match=f"{PREFIX}:*"):
            admin.delete(key)
        admin.close()


if __name__ == "__main__":
    main()
