"""How long an ended job is kept: the operator's default and maximum, a tenant's own number of days, and the
moments that follow from them (when a job's results are purged, when its row goes).

A job's clock starts when it ends (the timestamp of its final status). At `expires_at` its items, outputs,
staged rows, webhook deliveries and per-attempt rows are purged (usage rolled up first, jobs/purge.py); the
job row, its stored counts, usage and summary stay as many days again, then the row goes too. A retried job
is live again and its clock starts over when it ends again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from config import Settings
from models import Job, JobStatus

_ENDED_AT = {
    JobStatus.COMPLETED: "completed_at",
    JobStatus.CANCELLED: "cancelled_at",
    JobStatus.FAILED: "failed_at",
}


@dataclass(frozen=True)
class Retention:
    """The operator's policy: days kept when a tenant names none, and the most a tenant may name."""

    default_days: int = 30
    max_days: int = 365

    @classmethod
    def of(cls, settings: Settings) -> Retention:
        return cls(settings.retention_days, settings.retention_max_days)

    def days_for(self, tenant_days: int | None) -> int:
        """A tenant's effective retention: its own days, never above the maximum (which an operator may
        have lowered since the tenant's were set), else the default."""
        return min(tenant_days or self.default_days, self.max_days)


@cache
def environment_retention() -> Retention:
    """The policy of this process's environment (FACTGATE_RETENTION_DAYS / _MAX_DAYS), for callers that
    hold no Settings: a webhook's job object is built inside finalize."""
    return Retention.of(Settings.from_env(os.environ))


def ended_at(job: Job) -> datetime | None:
    """When the job reached its final status; None while it is live."""
    name = _ENDED_AT.get(JobStatus(job.status)) if job.status in JobStatus.ended() else None
    return None if name is None else getattr(job, name)


def expires_at(job: Job, days: int) -> datetime | None:
    """When the job's results are purged (or were: see `Job.purged_at`); None while it is live."""
    end = ended_at(job)
    return None if end is None else end + timedelta(days=days)


def row_expires_at(job: Job, days: int) -> datetime | None:
    """When a purged job's row itself goes: one more retention period after its purge."""
    return None if job.purged_at is None else job.purged_at + timedelta(days=days)


def is_past_retention(job: Job, days: int, now: datetime) -> bool:
    """Whether an ended job's results are due for the purge at `now` (jobs/purge.py:purge_queue's rule):
    it ended more than `days` days ago. A live job never is."""
    end = ended_at(job)
    return end is not None and end < now - timedelta(days=days)
