"""Benchmark the global rate limiter: how close to the limit many threads get, and raw script speed.

Part 1: N threads, each with its own Redis client, call `acquire` on one scope at RATE/s for
about SECONDS. Prints grants/s ÷ RATE (1.00 is the limit, reached), the most grants in any
one-second window of Redis time (must be ≤ RATE), and script calls per grant (the cost of
denied attempts).

Part 2: raw script calls/s from one thread (and from N threads on real Redis), on a scope whose
rate never denies, so every call takes the write path; on real Redis and on fakeredis.

    .venv/bin/python bench/limiter_bench.py [--threads 8] [--rate 10] [--seconds 5]

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

from workers.limiter import Decision, LimiterTimeout, RateLimiter

US = 1_000_000
REDIS_URL = os.environ.get("FACTGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


class CountingLimiter(RateLimiter):
    """Counts script runs, to show how many denied attempts each grant costs."""

    calls = 0

    def attempt(self, scope: str, rate_per_s: float, burst: int = 1) -> Decision:
        self.calls += 1
        return super().attempt(scope, rate_per_s, burst)


def max_in_window(times_us: list[int], window_us: int = US) -> int:
    times = sorted(times_us)
    best = lo = 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window_us:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def hammer(prefix: str, threads: int, rate: float, seconds: float) -> None:
    scope = f"bench:{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    lock = threading.Lock()
    times: list[int] = []
    calls: list[int] = []
    timeouts = 0

    def worker() -> None:
        nonlocal timeouts
        client = redis.Redis.from_url(REDIS_URL)
        limiter = CountingLimiter(client, prefix=prefix)
        try:
            while not stop.is_set():
                try:
                    grant = limiter.acquire_grant(scope, rate, max_wait_s=2.0)
                except LimiterTimeout:
                    with lock:
                        timeouts += 1
                    continue
                with lock:
                    times.append(grant.redis_time_us)
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

    first = min(times)
    in_span = [t for t in times if t < first + round(seconds * US)]
    per_s = len(in_span) / seconds
    print(f"acquire: {threads} threads at {rate:g}/s for {seconds:g} s (Redis time), burst 1")
    print(f"  grants in span        {len(in_span)}")
    print(f"  grants/s ÷ rate       {per_s / rate:.3f}")
    print(f"  max grants in any 1 s {max_in_window(times)} (limit {rate:g})")
    print(f"  script calls/grant    {sum(calls) / len(times):.2f}")
    print(f"  LimiterTimeouts       {timeouts} (max_wait_s=2, so a thread stops promptly)")


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
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()

    admin = redis.Redis.from_url(REDIS_URL)
    info = admin.info("server")
    print(f"redis {info['redis_version']} at {REDIS_URL}; fakeredis {fakeredis.__version__}")
    try:
        hammer(PREFIX, args.threads, args.rate, args.seconds)
        print("raw script calls (rate never denies, write path every call):")
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
