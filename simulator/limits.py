"""Per (API key, endpoint) rate limiting for the simulator.

The model is a sliding-window log, not a token bucket: a request passes when fewer than `n` requests of the
same key and endpoint passed within the last `window` seconds, where `n = max(1, round(rps))` and
`window = n / rps` (so 10/s is 10 per any 1-second window, 0.5/s is 1 per 2 s). A token bucket would let
an idle bucket's burst add to the steady rate; the window never lets more than `rps` through on average,
which is what the real gateway showed (14 parallel Decisions requests: 10 answers, 4 x 429) and what the
load bench checks (accepted rate / limit <= 1.0). Rejected requests do not use capacity. Time comes from an
injectable clock so tests advance it instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(frozen=True)
class Window:
    """The capacity `size` per `seconds` derived from a requests-per-second limit."""

    size: int
    seconds: float

    @classmethod
    def for_rate(cls, rps: float) -> Window | None:
        """None means unlimited (rps 0 or below)."""
        if rps <= 0:
            return None
        size = max(1, round(rps))
        return cls(size=size, seconds=size / rps)


class RateLimiter:
    """Thread-safe sliding-window limiter keyed by (api key, endpoint)."""

    def __init__(self, limits: Mapping[str, float], clock: Clock = time.monotonic) -> None:
        self._windows = {endpoint: Window.for_rate(rps) for endpoint, rps in limits.items()}
        self._clock = clock
        self._lock = threading.Lock()
        self._passed: dict[tuple[str, str], deque[float]] = {}

    def limit_for(self, endpoint: str) -> float:
        """The configured requests per second of an endpoint (0 = unlimited)."""
        window = self._windows.get(endpoint)
        return 0.0 if window is None else window.size / window.seconds

    def try_acquire(self, api_key: str, endpoint: str) -> bool:
        """Record and allow one request, or refuse it (the caller answers 429)."""
        window = self._windows.get(endpoint)
        if window is None:
            return True
        with self._lock:
            now = self._clock()
            passed = self._passed.setdefault((api_key, endpoint), deque())
            horizon = now - window.seconds
            while passed and passed[0] <= horizon:
                passed.popleft()
            if len(passed) >= window.size:
                return False
            passed.append(now)
            return True
