"""Tenant quotas and budgets: what a tenant may submit, and when its work waits for money.

Checked twice. At intake, a submission that would break a quota is refused whole (nothing stored) with the
quota named, its limit, what is used and when it resets: too many items in one job, too many live jobs, or a
daily / monthly budget already spent. During the run, a budget reached mid-job does not fail anything: the
scheduler holds the tenant's remaining items (they stay pending, undispatched) until the budget resets at
the next UTC day or month, or an operator raises it — and the job's status says why it waits.

The live-job count holds under concurrency: on Postgres, counting and the insert that follows run under a
per-tenant transaction-level advisory lock (`lock_live_jobs`), so twenty submissions at once with a limit of
one store one job, not the three that counted zero before any had inserted. The lock is taken only for a
tenant with a live-job limit and is held until the submission's transaction ends (a streamed body is read
inside it), so such a tenant's submissions are stored one after another; other tenants never wait on it.
SQLite (embedded mode) serialises writers already. A retry makes a job live again, so it counts the same way
(jobs/control.py:retry_failed).

Spend is the sum of the tenant's `api_calls` costs since the start of the UTC day or month, through
`ix_api_calls_tenant_created`. Holding happens at dispatch, so a budget can be overshot by what was already
in flight when it was reached (at most the scope's few in-flight items), never by a backlog.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from models import ApiCall, Job, JobStatus, Tenant, UsageDay

LIVE_JOB_STATUSES = tuple(sorted(JobStatus.live()))
# The namespace of the advisory lock a submission holds on its tenant while it counts live jobs and inserts
# its own (the other key is hashtext of the tenant id); jobs/bulk_load.py:BUILD_LOCK_NS is another namespace.
QUOTA_LOCK_NS = 0x46475131  # "FGQ1"
_LOCK_LIVE_JOBS = text(f"SELECT pg_advisory_xact_lock({QUOTA_LOCK_NS}, hashtext(CAST(:tenant AS text)))")


def day_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def month_start(now: datetime) -> datetime:
    return day_start(now).replace(day=1)


def next_day(now: datetime) -> datetime:
    return day_start(now) + timedelta(days=1)


def next_month(now: datetime) -> datetime:
    start = month_start(now)
    return (start + timedelta(days=32)).replace(day=1)


@dataclass(frozen=True)
class QuotaExceeded(Exception):  # noqa: N818 - read as "the quota is exceeded", the API's error type
    """A submission refused by a tenant quota: which one, its limit, what is used, when it resets."""

    quota: str
    limit: float
    used: float
    resets_at: datetime | None
    message: str

    def __str__(self) -> str:
        return self.message

    def details(self) -> dict[str, Any]:
        return {
            "quota": self.quota,
            "limit": self.limit,
            "used": self.used,
            "resets_at": None if self.resets_at is None else self.resets_at.isoformat(),
        }


@dataclass(frozen=True)
class Hold:
    """Why a tenant's work waits, and until when (unless the budget is raised)."""

    quota: str
    limit: float
    used: float
    resumes_at: datetime
    reason: str


def spend_since(session: Session, tenant_id: uuid.UUID, since: datetime) -> float:
    """What the tenant's upstream calls cost since `since` (the start of a UTC day or month): the live rows,
    plus the roll-up of purged ones (jobs/purge.py), so deleting a job never gives a budget back."""
    live = session.scalar(
        select(func.coalesce(func.sum(ApiCall.cost_usd), 0.0)).where(
            ApiCall.tenant_id == tenant_id, ApiCall.created_at >= since
        )
    )
    rolled = session.scalar(
        select(func.coalesce(func.sum(UsageDay.cost_usd), 0.0)).where(
            UsageDay.tenant_id == tenant_id, UsageDay.day >= since.date()
        )
    )
    return float(live or 0.0) + float(rolled or 0.0)


def live_jobs_of(session: Session, tenant_id: uuid.UUID) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.tenant_id == tenant_id, Job.status.in_(LIVE_JOB_STATUSES))
        )
        or 0
    )


@dataclass(frozen=True)
class _Budget:
    """A tenant's budget over a period: its name (the tenant's column), the period's start and end, and
    how the hold's reason names the period."""

    name: str
    period: str
    spent: str
    start: Callable[[datetime], datetime]
    end: Callable[[datetime], datetime]


# Daily first: it resets sooner.
_BUDGETS = (
    _Budget("daily_budget_usd", "daily", "today", day_start, next_day),
    _Budget("monthly_budget_usd", "monthly", "this month", month_start, next_month),
)


def budget_hold(session: Session, tenant: Tenant, now: datetime) -> Hold | None:
    """The budget the tenant has spent, if any (daily first: it resets sooner)."""
    for budget in _BUDGETS:
        limit: float | None = getattr(tenant, budget.name)
        if limit is None:
            continue
        used = spend_since(session, tenant.id, budget.start(now))
        if used >= limit:
            return Hold(
                budget.name,
                limit,
                round(used, 6),
                budget.end(now),
                f"the {budget.period} budget of ${limit:.2f} is spent (${used:.2f} {budget.spent})",
            )
    return None


def holds(session: Session, tenant_ids: list[uuid.UUID], now: datetime) -> dict[uuid.UUID, Hold]:
    """The tenants among `tenant_ids` whose work must wait for a budget, and why."""
    if not tenant_ids:
        return {}
    out: dict[uuid.UUID, Hold] = {}
    for tenant in session.scalars(select(Tenant).where(Tenant.id.in_(tenant_ids))):
        hold = budget_hold(session, tenant, now)
        if hold is not None:
            out[tenant.id] = hold
    return out


def lock_live_jobs(session: Session, tenant_id: uuid.UUID) -> None:
    """Hold the tenant's live-job count still until this transaction ends (Postgres; SQLite serialises
    writers already): a concurrent submission or retry of the same tenant waits here, then counts what this
    one inserted."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_LOCK_LIVE_JOBS, {"tenant": str(tenant_id)})


def check_live_jobs(session: Session, tenant: Tenant, *, verb: str = "submit again") -> None:
    """The live-job quota, counted under the tenant's lock (`lock_live_jobs`): the caller makes a job live
    in the same transaction, so no concurrent caller counts before it is visible."""
    if tenant.max_active_jobs is None:
        return
    lock_live_jobs(session, tenant.id)
    live = live_jobs_of(session, tenant.id)
    if live >= tenant.max_active_jobs:
        raise QuotaExceeded(
            "max_active_jobs",
            tenant.max_active_jobs,
            live,
            None,
            f"{live} jobs are still running or queued, the limit is {tenant.max_active_jobs}; "
            f"{verb} when one has ended (or cancel one)",
        )


def check_submission(session: Session, tenant: Tenant, now: datetime) -> None:
    """Quotas a submission can break before its body is read: live jobs (counted under the tenant's lock,
    held until the caller's transaction ends) and spent budgets."""
    check_live_jobs(session, tenant)
    hold = budget_hold(session, tenant, now)
    if hold is not None:
        raise QuotaExceeded(
            hold.quota,
            hold.limit,
            hold.used,
            hold.resumes_at,
            f"{hold.reason}; it resets at {hold.resumes_at:%Y-%m-%d %H:%M} UTC",
        )


def check_items(tenant: Tenant, items: int) -> None:
    """The size quota, once the body has been read and its items counted."""
    if tenant.max_items_per_job is not None and items > tenant.max_items_per_job:
        raise QuotaExceeded(
            "max_items_per_job",
            tenant.max_items_per_job,
            items,
            None,
            f"the job has {items:,} items (rows × modes), the limit is {tenant.max_items_per_job:,} per job; "
            "split the batch",
        )


def _no_item_limit(items: int) -> None:
    return None


def item_quota(tenant: Tenant) -> Callable[[int], None]:
    """`check_items` for a streamed body, called with the running item count after every row: the tenant's
    limit is read once here rather than from the ORM object per row (about 1 µs a read, a million times)."""
    limit = tenant.max_items_per_job
    if limit is None:
        return _no_item_limit

    def check(items: int) -> None:
        if items > limit:
            check_items(tenant, items)

    return check
