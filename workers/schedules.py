"""What status pages show of a live job's schedule: its share, its rate, when it should start and end.

Every `ScheduleConfig.refresh_s` the leader writes, for each live job, its share of its busiest scope (by
the fair round's last backlogs, workers/allocation.py), the rate that gives it (or the rate it was
dispatched at lately, if higher), its items left and the time they take at that rate; a held tenant's jobs
show the hold and when it lifts.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, TypedDict

import pydantic
from pydantic import NonNegativeFloat, PositiveFloat

from checks.fairness import shares, wait_bounds
from jobs import scheduling
from jobs.progress import counts_of
from jobs.quotas import Hold
from jobs.scheduling import LiveJob
from models import session_scope, utcnow
from workers.allocation import ScopeState
from workers.context import WorkerContext

SCHEDULE_REFRESH_S = 2.0
RATE_WINDOW_S = 20.0


@pydantic.dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    """How often the views are written, and over how long a job's dispatch rate is measured."""

    refresh_s: NonNegativeFloat = SCHEDULE_REFRESH_S
    rate_window_s: PositiveFloat = RATE_WINDOW_S


@dataclass(frozen=True)
class ScheduleRun:
    """One writing of the views: how many were written, and each live job's items left."""

    written: int
    remaining: Mapping[uuid.UUID, int]


class RunningView(TypedDict):
    """A job's `schedule` while its work waits or runs (the job object documents it: jobs/serialize.py)."""

    state: Literal["running", "waiting"]
    endpoint: str | None
    share: float
    rate_per_s: float
    remaining: int
    eta_s: float | None
    estimated_completion_at: str | None
    estimated_start_at: str | None
    counts: dict[str, int]
    updated_at: str


class HeldView(TypedDict):
    """A job's `schedule` while its tenant's budget holds its work: why, and when it resumes."""

    state: Literal["held"]
    held_reason: str
    quota: str
    resumes_at: str
    remaining: int
    share: float
    rate_per_s: float
    eta_s: None
    estimated_completion_at: None
    estimated_start_at: str
    updated_at: str
    counts: dict[str, int]


class Schedules:
    """The leader's record of what it dispatched lately, and the views it writes from it."""

    def __init__(self, ctx: WorkerContext, config: ScheduleConfig | None = None) -> None:
        self.ctx = ctx
        self.config = config or ScheduleConfig()
        self.at = 0.0  # monotonic: the last writing
        self._sent: deque[tuple[float, uuid.UUID, int]] = deque()  # (monotonic time, job, items)

    def note_sent(self, now: float, job_id: uuid.UUID, items: int) -> None:
        self._sent.append((now, job_id, items))

    def due(self, now: float) -> bool:
        return now - self.at >= self.config.refresh_s

    def job_rates(self) -> dict[uuid.UUID, float]:
        """Items per second dispatched per job over the last `rate_window_s` (≈ its completion rate)."""
        window = self.config.rate_window_s
        horizon = time.monotonic() - window
        while self._sent and self._sent[0][0] < horizon:
            self._sent.popleft()
        totals: dict[uuid.UUID, int] = {}
        for _t, job_id, n in self._sent:
            totals[job_id] = totals.get(job_id, 0) + n
        return {job_id: n / window for job_id, n in totals.items()}

    def write(
        self,
        now: float,
        jobs: list[LiveJob],
        *,
        weights: Mapping[str, float],
        scopes: Mapping[str, ScopeState],
        holds: Mapping[uuid.UUID, Hold],
        rate: Callable[[str], float],
    ) -> ScheduleRun:
        """Each live job's share of its busiest scope, the rate that gives it, and when it should end.
        `rate`: the rate the limiter grants an endpoint."""
        observed = self.job_rates()
        views: dict[uuid.UUID, RunningView | HeldView] = {}
        # One grouped count over the live jobs' items: the job's counts as of `updated_at`, which lists and
        # pages show instead of counting every item on every request (jobs/progress.py:shared_counts).
        with self.ctx.sessions() as session:
            counts = counts_of(session, [j.id for j in jobs])
        remaining = {job_id: c.pending + c.running for job_id, c in counts.items()}
        stamp = utcnow()
        for job in jobs:
            shared = counts[job.id].as_dict()
            hold = holds.get(job.tenant_id)
            if hold is not None:
                views[job.id] = _held_view(hold, remaining.get(job.id, 0), stamp.isoformat(), shared)
                continue
            key = str(job.id)
            share = 0.0
            scope_rate = 0.0
            start_in: float | None = None
            endpoint_used: str | None = None
            for scope, slot in scopes.items():
                if not any(b.job_id == key for b in slot.last_backlogs):
                    continue
                endpoint = scope.rsplit(":", 1)[-1]
                job_share = shares(slot.last_backlogs, weights).get(key, 0.0)
                if job_share >= share:
                    share, endpoint_used = job_share, endpoint
                    scope_rate = rate(endpoint)
                    if job.status == "queued" and scope_rate > 0:
                        start_in = wait_bounds(slot.last_backlogs, weights).get(key, 0) / scope_rate
            job_rate = max(observed.get(job.id, 0.0), share * scope_rate)
            left = remaining.get(job.id, 0)
            eta = left / job_rate if job_rate > 0 else None
            views[job.id] = RunningView(
                state="running" if job.status == "in_progress" else "waiting",
                endpoint=endpoint_used,
                share=round(share, 4),
                rate_per_s=round(job_rate, 3),
                remaining=left,
                eta_s=None if eta is None else round(eta, 1),
                estimated_completion_at=None if eta is None else (stamp + timedelta(seconds=eta)).isoformat(),
                estimated_start_at=None
                if start_in is None
                else (stamp + timedelta(seconds=start_in)).isoformat(),
                counts=shared,
                updated_at=stamp.isoformat(),
            )
        with session_scope(self.ctx.sessions) as session:
            scheduling.store_schedules(session, views)
        self.at = now
        return ScheduleRun(written=len(views), remaining=remaining)


def _held_view(hold: Hold, remaining: int, stamp: str, counts: dict[str, int]) -> HeldView:
    """A held job's view: why it waits and when it resumes."""
    return HeldView(
        state="held",
        held_reason=hold.reason,
        quota=hold.quota,
        resumes_at=hold.resumes_at.isoformat(),
        remaining=remaining,
        share=0.0,
        rate_per_s=0.0,
        eta_s=None,
        estimated_completion_at=None,
        estimated_start_at=hold.resumes_at.isoformat(),
        updated_at=stamp,
        counts=counts,
    )
