"""Every backoff of the service, stated once: how long to wait before the next try of what failed.

One shape serves them all: the wait doubles from `base_s` with each try, is capped at `cap_s`, and is
spread by ±`jitter` (a random draw r in [0, 1) gives `base × (1 + jitter × (2r − 1))`), so that callers that
failed together do not come back together. The policies:

- `UPSTREAM_BACKOFF`: a retryable upstream answer without a usable `Retry-After` (clients/retry.py:
  1, 2, 4 s …; the upstream client's `RetryPolicy` caps the jittered wait, and its base is configurable).
- `TASK_BACKOFF`: a Celery task sent once per event (`start_job`, `after_window`) that met an
  infrastructure fault: 2, 4, 8, 16, 30, 30 s (workers/tasks.py:retry_or_give_up).
- `ITEM_BACKOFF`: an item given back after a transient failure, by its claim number: 2, 4, 8 … s, at most
  a minute (workers/tasks.py).
- `SETTLE_BACKOFF`: storing an item's outcome while the database is briefly away: 0.25, 0.5, 1, 2, 4, 5 s
  without jitter, for a bounded patience (`patiently`, workers/run.py:settle).

A `Backoff` is also a tenacity wait strategy (it takes tenacity's retry state), so a `Retrying` loop uses
the same policy as a caller that computes its countdown itself.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff from `base_s`, capped at `cap_s` before the jitter, spread by ±`jitter`."""

    base_s: float
    cap_s: float = math.inf
    jitter: float = 0.25  # ± fraction of the wait; 0 disables jitter

    def __post_init__(self) -> None:
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError("jitter must be in [0, 1)")
        if self.base_s < 0 or self.cap_s < 0:
            raise ValueError("delays must be 0 or more")

    def wait_s(self, retry_index: int, rand: float | None = None) -> float:
        """The wait before retry number `retry_index` (0-based); `rand`, the draw in [0, 1) for the jitter
        (a fresh one when None)."""
        try:
            grown = self.base_s * 2.0 ** max(0, retry_index)
        except OverflowError:
            grown = math.inf
        base = min(self.cap_s, grown)
        if self.jitter == 0.0:
            return base
        draw = random.random() if rand is None else rand  # noqa: S311 - spreading, not secrecy
        return base * (1.0 + self.jitter * (2.0 * draw - 1.0))

    def __call__(self, retry_state: RetryCallState) -> float:
        """As a tenacity wait: the wait after attempt number `attempt_number` (1-based)."""
        return self.wait_s(retry_state.attempt_number - 1)


UPSTREAM_BACKOFF = Backoff(base_s=1.0)
TASK_BACKOFF = Backoff(base_s=2.0, cap_s=30.0)
ITEM_BACKOFF = Backoff(base_s=2.0, cap_s=60.0)
SETTLE_BACKOFF = Backoff(base_s=0.25, cap_s=5.0, jitter=0.0)


def patiently(retry_if: Callable[[BaseException], bool], backoff: Backoff, patience_s: float) -> Retrying:
    """A tenacity loop that tries again, after `backoff`, on the exceptions `retry_if` accepts, for at most
    `patience_s`; the last exception is raised as it was."""
    return Retrying(
        retry=retry_if_exception(retry_if),
        wait=backoff,
        stop=stop_after_delay(patience_s),
        reraise=True,
    )
