"""Deleting jobs and purging what retention no longer keeps, in bounded batches.

Why batched DELETEs and not partitions: a job's rows are spread over `items`, `api_calls`,
`webhook_deliveries` and `intake_rows`, and what goes is chosen per job (a delete, a tenant's retention), not
per time range. Partitioning `items` by job or by month would make every index and the scheduler's partial
indexes per partition, turn the foreign keys into per-partition ones, and still not give "drop this job";
detaching a partition would only pay for itself with thousands of jobs per partition ending together.
Dropping a large job's partitions is much faster and writes almost no WAL (bench/purge_design.py; the
figures are in docs/profiles/README.md, "The purge"), but its DROP locks the referenced tables (a small job's
write deadlocked with it once), and a per-tenant retention or a delete still needs these batches. So
the purge deletes `PURGE_BATCH` rows per statement and per transaction (each a short lock on those rows
only, never on the table), keyed by the indexes reads already use (`ix_api_calls_job`, `ix_items_job_status`,
`ix_webhook_deliveries_job`, `ix_intake_rows_job`), and a small job starting meanwhile waits on nothing.

Order, per job: its `api_calls` rows first, each batch rolled up into `usage_days` in the statement that
deletes it (so usage is counted once, never zero and never twice: jobs/usage.py reads both); then its items
(children with their question, through the foreign key) after its verdict entries (jobs/verdicts.py), its
claims' source lists (jobs/source_lists.py),
webhook deliveries (their attempts cascade) and staged rows; then the job row (deleted jobs, and purged
ones whose row has outlived another retention period) or `purged_at` (a job past its retention, whose row
and summary stay).

A deleted job is gone for its tenant at once: every read filters `deleted_at` (jobs/queries.py), so the
rows left for the purge are invisible. Every step re-reads the job under a share lock on its row and re-checks
that it is still to be purged — deleted, or ended and still past its tenant's retention as of now, not as of
when the queue was read — and holds that lock through the statements that delete, until the batch commits.
A retry takes the same row's update lock and refuses a job past its retention (jobs/control.py:retry_failed),
so a retry and a purge never interleave: before, a retry between two batches left a `completed` job with rows
missing, or a job retried and completed again lost its new results to the purge that had queued it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, Uuid, bindparam, case, delete, select, text, update
from sqlalchemy.orm import Session

from jobs.bulk_load import drop_staged_batch
from jobs.control import JobStateError, cancel_job
from jobs.retention import Retention, is_past_retention
from jobs.tenancy import TenantNotFoundError
from jobs.verdicts import delete_verdicts
from models import ApiToken, Job, JobStatus, SourceList, Tenant, WebhookDelivery, WebSession, utcnow
from models.jobs import PURGE_PENDING_SQL

PURGE_BATCH = 10_000
_JOB = bindparam("job", type_=Uuid())  # a job id in raw SQL: a uuid on Postgres, 32 hex digits on SQLite
ENDED = tuple(sorted(JobStatus.ended()))

# One batch of a job's calls deleted and added to the roll-up in one statement (Postgres): what the DELETE
# returns is what the INSERT adds, under one snapshot. Only module constants are interpolated.
_ROLL_UP_PG = text(
    "WITH gone AS ("
    " DELETE FROM api_calls WHERE id = ANY(ARRAY("
    "  SELECT id FROM api_calls WHERE job_id = :job LIMIT :n FOR UPDATE SKIP LOCKED))"
    " RETURNING tenant_id, created_at, endpoint, model, searches, input_tokens, output_tokens, cost_usd,"
    "  reused"
    "), moved AS ("
    " INSERT INTO usage_days AS u (tenant_id, day, endpoint, model, requests, searches, input_tokens,"
    "  output_tokens, cost_usd, reused)"
    " SELECT tenant_id, CAST(timezone('UTC', created_at) AS date), endpoint, coalesce(model, ''),"
    "  count(*) FILTER (WHERE NOT reused), sum(searches), sum(input_tokens), sum(output_tokens),"
    "  sum(cost_usd), count(*) FILTER (WHERE reused)"
    " FROM gone GROUP BY 1, 2, 3, 4"
    " ON CONFLICT (tenant_id, day, endpoint, model) DO UPDATE SET requests = u.requests + excluded.requests,"
    "  searches = u.searches + excluded.searches, input_tokens = u.input_tokens + excluded.input_tokens,"
    "  output_tokens = u.output_tokens + excluded.output_tokens, cost_usd = u.cost_usd + excluded.cost_usd,"
    "  reused = u.reused + excluded.reused"
    " RETURNING requests"
    ") SELECT (SELECT count(*) FROM gone)"
).bindparams(_JOB)
# SQLite (embedded mode): the same in two statements of one write transaction, which no other writer can
# enter between them; the batch is the job's calls up to an id bound read first.
_SQLITE_BATCH = "job_id = :job AND id <= :bound"
_ROLL_UP_SQLITE = text(
    "INSERT INTO usage_days AS u (tenant_id, day, endpoint, model, requests, searches, input_tokens,"  # noqa: S608
    " output_tokens, cost_usd, reused)"
    " SELECT tenant_id, date(created_at), endpoint, coalesce(model, ''),"
    " sum(CASE WHEN reused THEN 0 ELSE 1 END), sum(searches), sum(input_tokens), sum(output_tokens),"
    " sum(cost_usd), sum(CASE WHEN reused THEN 1 ELSE 0 END)"
    f" FROM api_calls WHERE {_SQLITE_BATCH} GROUP BY 1, 2, 3, 4"
    " ON CONFLICT (tenant_id, day, endpoint, model) DO UPDATE SET requests = u.requests + excluded.requests,"
    " searches = u.searches + excluded.searches, input_tokens = u.input_tokens + excluded.input_tokens,"
    " output_tokens = u.output_tokens + excluded.output_tokens, cost_usd = u.cost_usd + excluded.cost_usd,"
    " reused = u.reused + excluded.reused"
).bindparams(_JOB)
_DELETE_SQLITE = text(f"DELETE FROM api_calls WHERE {_SQLITE_BATCH}").bindparams(_JOB)  # noqa: S608
_SQLITE_BOUND = text(
    "SELECT max(id) FROM (SELECT id FROM api_calls WHERE job_id = :job ORDER BY id LIMIT :n)"
).bindparams(_JOB)
_DELETE_ITEMS_PG = text(
    "DELETE FROM items WHERE id = ANY(ARRAY(SELECT id FROM items WHERE job_id = :job LIMIT :n "
    "FOR UPDATE SKIP LOCKED))"
).bindparams(_JOB)
_DELETE_ITEMS_SQLITE = text(
    "DELETE FROM items WHERE id IN (SELECT id FROM items WHERE job_id = :job LIMIT :n)"
).bindparams(_JOB)


def delete_job(session: Session, job: Job) -> bool:
    """Delete an ended job for its tenant: gone from every read at once, its rows purged in the background.
    Raises JobStateError for a live job (cancel it first); False when it was already deleted."""
    if job.status not in JobStatus.ended():
        raise JobStateError(f"job is {job.status}; cancel it first, then delete it once it has ended")
    result = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.status.in_(ENDED), Job.deleted_at.is_(None))
        .values(deleted_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))


def roll_up_calls(session: Session, job_id: uuid.UUID, limit: int = PURGE_BATCH) -> int:
    """Move up to `limit` of the job's `api_calls` rows into `usage_days`; returns how many."""
    if session.get_bind().dialect.name == "postgresql":
        return int(session.scalar(_ROLL_UP_PG, {"job": job_id, "n": limit}) or 0)
    bound = session.scalar(_SQLITE_BOUND, {"job": job_id, "n": limit})
    if bound is None:
        return 0
    params = {"job": job_id, "bound": bound}
    session.execute(_ROLL_UP_SQLITE, params)
    return int(cast("CursorResult[Any]", session.execute(_DELETE_SQLITE, params)).rowcount)


def _delete_items(session: Session, job_id: uuid.UUID, limit: int) -> int:
    pg = session.get_bind().dialect.name == "postgresql"
    result = session.execute(_DELETE_ITEMS_PG if pg else _DELETE_ITEMS_SQLITE, {"job": job_id, "n": limit})
    return int(cast("CursorResult[Any]", result).rowcount)


def _delete_source_lists(session: Session, job_id: uuid.UUID, limit: int) -> int:
    """Up to `limit` of the job's source lists (its claims' sources, stored once per list)."""
    batch = select(SourceList.digest).where(SourceList.job_id == job_id).limit(limit)
    result = session.execute(
        delete(SourceList).where(SourceList.job_id == job_id, SourceList.digest.in_(batch.scalar_subquery()))
    )
    return int(cast("CursorResult[Any]", result).rowcount)


def _delete_deliveries_and_staged(session: Session, job_id: uuid.UUID, limit: int) -> int:
    """The job's webhook deliveries, and a batch of its staged intake rows."""
    result = session.execute(delete(WebhookDelivery).where(WebhookDelivery.job_id == job_id))
    return int(cast("CursorResult[Any]", result).rowcount) + drop_staged_batch(session, job_id, limit)


# A purge step's batches, in order: each runs only once the ones before it have nothing left. Calls first,
# each batch rolled up into `usage_days`; its verdict entries stopped answering when it was deleted or passed
# its retention (jobs/verdicts.py joins the job), here they go; source lists after the items, as an output
# names its list until its item is gone.
_PURGE_STEPS: tuple[Callable[[Session, uuid.UUID, int], int], ...] = (
    roll_up_calls,
    delete_verdicts,
    _delete_items,
    _delete_source_lists,
    _delete_deliveries_and_staged,
)


def _purgeable(session: Session, job_id: uuid.UUID, retention: Retention, now: datetime) -> Job | None:
    """The job, share-locked until the caller's transaction ends, if it is still to be purged: ended, and
    deleted, already purged, or past its tenant's retention at `now`. None otherwise (gone, live again, or
    ended again after a retry and so not expired)."""
    job = session.scalar(select(Job).where(Job.id == job_id).with_for_update(read=True))
    if job is None or job.status not in JobStatus.ended():
        return None
    if job.deleted_at is not None or job.purged_at is not None:
        return job
    days = session.scalar(select(Tenant.retention_days).where(Tenant.id == job.tenant_id))
    return job if is_past_retention(job, retention.days_for(days), now) else None


def purge_step(
    session: Session,
    job_id: uuid.UUID,
    limit: int = PURGE_BATCH,
    *,
    retention: Retention | None = None,
    now: datetime | None = None,
) -> int:
    """One bounded step of purging a deleted or expired job, in the caller's transaction; returns the rows
    it removed (0: the job is done — its row gone or marked purged — or is not to be purged). Whether it is
    still to be purged is decided here, per step, under the job row's share lock (`_purgeable`), with
    `retention` (the default policy when None) at `now` (the present when None)."""
    job = _purgeable(session, job_id, retention or Retention(), now or utcnow())
    if job is None:
        return 0
    for step in _PURGE_STEPS:
        gone = step(session, job_id, limit)
        if gone:
            return gone
    if job.deleted_at is not None:
        session.execute(delete(Job).where(Job.id == job_id))
        return 1
    if job.purged_at is None:
        session.execute(update(Job).where(Job.id == job_id).values(purged_at=utcnow()))
        return 1
    return 0


@dataclass(frozen=True)
class PurgeQueue:
    """What the purge has to do now: jobs whose rows go entirely (deleted, or purged and past their row's
    time, which this marks deleted), and jobs past their retention."""

    remove: list[uuid.UUID]
    expire: list[uuid.UUID]

    def __len__(self) -> int:
        return len(self.remove) + len(self.expire)


def _ended_at_sql() -> Any:
    return case(
        (Job.status == JobStatus.COMPLETED, Job.completed_at),
        (Job.status == JobStatus.CANCELLED, Job.cancelled_at),
        (Job.status == JobStatus.FAILED, Job.failed_at),
    )


def purge_queue(session: Session, retention: Retention, now: datetime | None = None) -> PurgeQueue:
    """The jobs to purge: deleted ones; ended ones past their tenant's retention; purged ones whose row has
    been kept one more retention period (marked deleted here, so the purge removes the row). A query per
    distinct retention in use (tenants are few)."""
    moment = now or utcnow()
    # A removed tenant's jobs go as they end (its live ones were cancelled when it was removed).
    removed = select(Tenant.id).where(Tenant.deleted_at.is_not(None))
    session.execute(
        update(Job)
        .where(Job.tenant_id.in_(removed), Job.status.in_(ENDED), Job.deleted_at.is_(None))
        .values(deleted_at=moment)
    )
    by_days: dict[int, list[uuid.UUID]] = {}
    for tid, days in session.execute(select(Tenant.id, Tenant.retention_days)):
        by_days.setdefault(retention.days_for(days), []).append(tid)
    expire: list[uuid.UUID] = []
    for days, tenant_ids in by_days.items():
        cutoff = moment - timedelta(days=days)
        session.execute(
            update(Job)
            .where(Job.tenant_id.in_(tenant_ids), Job.purged_at < cutoff, Job.deleted_at.is_(None))
            .values(deleted_at=moment)
        )
        expire += session.scalars(
            select(Job.id).where(
                Job.tenant_id.in_(tenant_ids),
                Job.status.in_(ENDED),
                Job.deleted_at.is_(None),
                Job.purged_at.is_(None),
                _ended_at_sql() < cutoff,
            )
        )
    # Through ix_jobs_purge (deleted or purged jobs only), whatever the size of `jobs`.
    remove = list(
        session.scalars(
            select(Job.id)
            .where(text(PURGE_PENDING_SQL), Job.deleted_at.is_not(None))
            .order_by(Job.deleted_at)
        )
    )
    return PurgeQueue(remove=remove, expire=expire)


@dataclass(frozen=True)
class TenantRemoval:
    """What removing a tenant did at once; its rows go with the purge."""

    tenant_id: uuid.UUID
    tokens_revoked: int
    sessions_ended: int
    jobs_cancelled: list[uuid.UUID]  # live jobs, now cancelling: they are deleted once they end
    jobs_deleted: int  # ended jobs, now deleted


def delete_tenant(session: Session, name: str) -> TenantRemoval:
    """Remove a tenant: its tokens are revoked and its page sessions ended (nothing of it authenticates
    from this commit on), its live jobs cancelled, its ended jobs deleted; the purge then removes their
    rows in batches like any deleted job's, and the jobs cancelled here as they end. The tenant row stays,
    marked removed, with its usage roll-up (billing), and its name is not reused. Another tenant's rows are
    never touched: every statement names this tenant's id. TenantNotFoundError for an unknown name."""
    tenant = session.scalar(select(Tenant).where(Tenant.name == name, Tenant.deleted_at.is_(None)))
    if tenant is None:
        raise TenantNotFoundError(f"no tenant {name!r}")
    now = utcnow()
    tokens = session.execute(
        update(ApiToken)
        .where(ApiToken.tenant_id == tenant.id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    sessions = session.execute(
        update(WebSession)
        .where(WebSession.tenant_id == tenant.id, WebSession.ended_at.is_(None))
        .values(ended_at=now, end_reason="revoked")
    )
    cancelled = [
        job.id
        for job in session.scalars(
            select(Job).where(Job.tenant_id == tenant.id, Job.status.in_(sorted(JobStatus.cancellable())))
        )
        if cancel_job(session, job)
    ]
    deleted = session.execute(
        update(Job)
        .where(Job.tenant_id == tenant.id, Job.status.in_(ENDED), Job.deleted_at.is_(None))
        .values(deleted_at=now)
    )
    tenant.deleted_at = now
    session.flush()
    return TenantRemoval(
        tenant_id=tenant.id,
        tokens_revoked=int(getattr(tokens, "rowcount", 0) or 0),
        sessions_ended=int(getattr(sessions, "rowcount", 0) or 0),
        jobs_cancelled=cancelled,
        jobs_deleted=int(getattr(deleted, "rowcount", 0) or 0),
    )
