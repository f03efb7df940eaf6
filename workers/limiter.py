"""The global upstream rate limiter: one atomic Lua script in Redis shared by every worker.

Why GCRA (generic cell rate algorithm) rather than a token bucket or a sliding log: it keeps one
number per scope (the "theoretical arrival time", TAT) instead of a token count plus a refill
timestamp or a list of grants, so the script is a couple of reads and one write, and its spacing
guarantee is easy to state and test: with burst ``b`` and rate ``r`` a grant happens only when
``now >= TAT - (b - 1)/r`` and pushes TAT to ``max(TAT, now) + 1/r``. With ``b = 1`` grants are at
least ``1/r`` apart, so any half-open one-second window holds at most ``r`` of them.

Time comes from Redis ``TIME`` inside the script, so clock skew between worker machines cannot
loosen the limit. A denied call reserves nothing: it is told how long until the next slot opens
and comes back then. That keeps a worker that gives up from holding a slot nobody uses.

Every scope (``"{key_fingerprint}:{endpoint}"``) is one Redis hash ``{prefix}:{scope}`` with fields ``tat``
and ``blk`` (``blocked_until``), both integer microseconds of Redis time. A 429's ``Retry-After`` extends
``blk`` for every worker and never shortens it. The key's TTL covers the later of the two, plus a little, so
an idle scope disappears and losing it (expiry, FLUSHALL, failover) only forgets state that no longer
constrains anybody — Redis is a hint (docs/architecture.md, Invariants).
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import redis

# Integer microseconds keep the arithmetic exact: Redis' Lua is 5.1 with doubles, which hold
# whole numbers up to 2**53 (about 285 years of microseconds since 1970). Times are written
# with string.format('%.0f') so the stored value is always plain digits: Lua's own tostring()
# uses "%.14g" and would round a 16-digit timestamp, and we don't rely on how a given Redis
# (or fakeredis) renders a number argument. redis.replicate_commands() is needed before a write
# that follows TIME on Redis 3.2–4 (the default from 5, a no-op kept for compatibility in 7);
# the guard lets the same script run where it is absent (fakeredis) or removed.
_LUA: Final = """
if redis.replicate_commands then pcall(redis.replicate_commands) end
local key = KEYS[1]
local op = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local slack_ms = tonumber(ARGV[4])
local blk = tonumber(redis.call('HGET', key, 'blk') or '0')

local function keep_until(until_us)
  local ms = math.ceil((until_us - now) / 1000) + slack_ms
  if ms > 0 then redis.call('PEXPIRE', key, ms) end
end

if op == 'block' then
  local new_blk = now + tonumber(ARGV[2])
  if new_blk > blk then
    blk = new_blk
    redis.call('HSET', key, 'blk', string.format('%.0f', blk))
    local tat = tonumber(redis.call('HGET', key, 'tat') or '0')
    keep_until(math.max(blk, tat))
  end
  return {math.max(blk, now), now}
end

-- op == 'take': ARGV[2] = emission interval (0 = unlimited), ARGV[3] = burst tolerance, in us.
if blk > now then return {0, blk - now, now} end
local interval = tonumber(ARGV[2])
if interval <= 0 then return {1, 0, now} end
local tau = tonumber(ARGV[3])
local tat = tonumber(redis.call('HGET', key, 'tat') or '0')
if tat < now then tat = now end
-- Under a steady rate and a forward clock TAT never exceeds now + tau + interval; a larger
-- value means Redis' clock stepped back or the rate was raised, and must not stall the scope.
if tat > now + tau + interval then tat = now + tau + interval end
local allow_at = tat - tau
if now < allow_at then return {0, allow_at - now, now} end
tat = tat + interval
redis.call('HSET', key, 'tat', string.format('%.0f', tat))
keep_until(math.max(tat, blk))
return {1, 0, now}
"""

_US: Final = 1_000_000
# Extra TTL past the last instant a key matters, so a key never expires while it still binds.
_TTL_SLACK_MS: Final = 1_000


class LimiterTimeout(Exception):  # noqa: N818 - the name is the workers' contract
    """No slot within the caller's bound; the task should fail this attempt and retry later."""

    def __init__(self, scope: str, waited: float) -> None:
        super().__init__(f"rate limiter: no slot for {scope!r} after waiting {waited:.2f}s")
        self.scope = scope
        self.waited = waited


@dataclass(frozen=True)
class Decision:
    """One run of the script: granted or not, how long until the next chance, and Redis' clock.

    `redis_time_us` is exact integer microseconds, so spacing between grants can be compared
    without float rounding.
    """

    granted: bool
    wait_s: float
    redis_time_us: int


@dataclass(frozen=True)
class Grant:
    """A slot obtained by `acquire_grant`: seconds slept for it and the Redis time of the grant."""

    waited: float
    redis_time_us: int


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


def _interval_us(rate_per_s: float) -> int:
    """Microseconds between grants; 0 means unlimited.

    Rounded up so that rate × interval ≥ 1 s: at 3/s, 333,334 µs, never 333,333 (which
    would let a fourth grant into some one-second window).
    """
    if math.isnan(rate_per_s):
        raise ValueError("rate_per_s must be a number")
    if rate_per_s <= 0 or math.isinf(rate_per_s):
        return 0
    return max(1, math.ceil(_US / rate_per_s))


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
        max_step_s: float = 0.5,
        jitter: float = 0.1,
    ) -> None:
        """`max_step_s` caps one sleep so a waiter re-checks (e.g. after Redis lost the scope);
        `jitter` spreads waiters woken by the same slot by up to that fraction of the wait."""
        self._redis = redis
        self._prefix = prefix
        self._sleep = sleep
        self._max_step_s = max_step_s
        self._jitter = jitter
        # register_script runs EVALSHA and, on NOSCRIPT (SCRIPT FLUSH, restart, failover),
        # loads the script once and retries — the limiter survives Redis being flushed.
        self._script = redis.register_script(_LUA)

    def key(self, scope: str) -> str:
        """The Redis key holding a scope's state."""
        return f"{self._prefix}:{scope}"

    def attempt(self, scope: str, rate_per_s: float, burst: int = 1) -> Decision:
        """Run the script once: take a slot if one is free now, else say how long until one is."""
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        interval = _interval_us(rate_per_s)
        tau = (burst - 1) * interval
        granted, wait_us, now_us = self._script(
            keys=[self.key(scope)], args=["take", interval, tau, _TTL_SLACK_MS]
        )
        return Decision(granted=bool(granted), wait_s=int(wait_us) / _US, redis_time_us=int(now_us))

    def try_acquire(self, scope: str, rate_per_s: float, burst: int = 1) -> float:
        """0.0 if a slot was granted now, else seconds to wait before trying again.

        `rate_per_s` ≤ 0 means unlimited (a 429 block still applies: that is upstream's word).
        `burst` = 1 spaces grants strictly 1/rate apart; larger lets that many go back to back.
        """
        decision = self.attempt(scope, rate_per_s, burst)
        return 0.0 if decision.granted else max(decision.wait_s, 1e-6)

    def acquire_grant(self, scope: str, rate_per_s: float, burst: int = 1, max_wait_s: float = 60.0) -> Grant:
        """Like `acquire`, also returning the Redis time at which the slot was granted."""
        if max_wait_s < 0 or math.isnan(max_wait_s):
            raise ValueError(f"max_wait_s must be non-negative, got {max_wait_s}")
        waited = 0.0
        while True:
            decision = self.attempt(scope, rate_per_s, burst)
            if decision.granted:
                return Grant(waited=waited, redis_time_us=decision.redis_time_us)
            # The suggested wait is a lower bound on when a slot can open (an exact one while
            # blocked), so a wait past the budget cannot end in a grant: fail now, not later.
            if waited + decision.wait_s > max_wait_s:
                raise LimiterTimeout(scope, waited)
            step = min(decision.wait_s, self._max_step_s)
            step += step * self._jitter * random.random()  # noqa: S311 - spreading, not secrecy
            step = min(step, max_wait_s - waited)
            self._sleep(step)
            waited += step

    def acquire(self, scope: str, rate_per_s: float, burst: int = 1, max_wait_s: float = 60.0) -> float:
        """Block until a slot is granted; return the seconds slept for it.

        Sleeps the script's suggested wait in steps of at most `max_step_s`, and raises
        `LimiterTimeout` once the wait would pass `max_wait_s`. Waiting here, rather than
        re-queueing the task with a countdown, keeps messages in order and the queue quiet.
        """
        return self.acquire_grant(scope, rate_per_s, burst, max_wait_s).waited

    def block(self, scope: str, seconds: float) -> float:
        """Pause the scope for every worker until now + `seconds` (Redis time), never earlier
        than an existing block. Returns the resulting blocked-until as Unix seconds of Redis time
        (Redis' "now" when the scope is not blocked, e.g. after `seconds` ≤ 0)."""
        if not math.isfinite(seconds):
            raise ValueError(f"seconds must be a finite number, got {seconds}")
        block_us = max(0, math.ceil(seconds * _US))
        blocked_until_us, _now_us = self._script(
            keys=[self.key(scope)], args=["block", block_us, 0, _TTL_SLACK_MS]
        )
        return int(blocked_until_us) / _US
