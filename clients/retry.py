"""The retry policy as pure decisions: what retries and how long to wait.

No I/O and no sleeping here, so the sync client and any async caller share one policy, and
tests check every wait without a clock. The caller supplies "now" (wall time, for HTTP-date
`Retry-After`) and a random draw in [0, 1) (for jitter).

Policy (docs/spec.md §1):
- Retry 429, 500, 502, 503, 504 and transient transport failures (timeouts, connection
  and protocol errors), at most `max_retries` times (default 3 → 4 POSTs).
- Never retry other 4xx: the same request would fail the same way.
- Never retry a malformed 200: the server answered, and a grounded request has already
  billed its search — repeating it spends money on what is most likely the same bad shape.
- Wait `Retry-After` when it is whole seconds or an HTTP date, exactly (no jitter: the
  server said when, and the global limiter pauses every worker on it). Otherwise back off
  1, 2, 4 s … with ±25 % jitter: `base × (1 + 0.25 × (2r − 1))`, so r = 0.5 gives exactly
  1, 2, 4. Every wait is capped at 30 s.
"""

from __future__ import annotations

import datetime
import email.utils
import math
from dataclasses import dataclass

import httpx

from clients.backoff import UPSTREAM_BACKOFF, Backoff

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_WAIT_S = 30.0

# Transport failures worth another try. Not here: UnsupportedProtocol and LocalProtocolError
# (our request or configuration is wrong) and TooManyRedirects (the endpoint is wrong).
_TRANSIENT_TRANSPORT = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
)


def retryable_status(status: int) -> bool:
    """429 and the 5xx codes the API uses for overload; every other status is final."""
    return status in RETRYABLE_STATUSES


def retryable_exception(error: BaseException) -> bool:
    """Timeouts, dropped connections and broken responses retry; configuration errors don't."""
    return isinstance(error, _TRANSIENT_TRANSPORT)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a `Retry-After` header, or None when absent or unusable.

    Accepts whole non-negative seconds ("3") or an HTTP date (a past date means "now": 0).
    Fractions ("2.5"), negatives and junk return None, so the caller falls back to backoff.
    `now` is Unix time, used only for dates.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" parses as naive; HTTP dates are always GMT
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with `Retry-After` first, then jittered exponential backoff."""

    max_retries: int = 3
    base_delay_s: float = UPSTREAM_BACKOFF.base_s
    max_wait_s: float = MAX_WAIT_S
    jitter: float = UPSTREAM_BACKOFF.jitter  # ± fraction of the backoff; 0 disables jitter

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError("jitter must be in [0, 1)")
        if self.base_delay_s < 0 or self.max_wait_s < 0:
            raise ValueError("delays must be 0 or more")

    @property
    def max_attempts(self) -> int:
        """POSTs sent at most for one call."""
        return self.max_retries + 1

    def can_retry(self, attempts_sent: int) -> bool:
        """True while another POST stays within the bound."""
        return attempts_sent < self.max_attempts

    def backoff_s(self, retry_index: int, rand: float) -> float:
        """Wait before retry number `retry_index` (0-based) without `Retry-After`: 1, 2, 4 … ± jitter
        (clients/backoff.py:UPSTREAM_BACKOFF, from this policy's base and jitter)."""
        return self._cap(Backoff(base_s=self.base_delay_s, jitter=self.jitter).wait_s(retry_index, rand))

    def wait_s(self, retry_index: int, retry_after: str | None, now: float, rand: float) -> float:
        """The wait before retry number `retry_index`: `Retry-After` when usable, else backoff."""
        told = parse_retry_after(retry_after, now)
        if told is not None:
            return self._cap(told)
        return self.backoff_s(retry_index, rand)

    def _cap(self, seconds: float) -> float:
        if math.isnan(seconds):
            return self.max_wait_s
        return min(max(seconds, 0.0), self.max_wait_s)
