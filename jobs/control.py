"""Cancel, retry, delete. Each is a conditional update so that racing requests are harmless.

A cancel costs the caller one small UPDATE of the job row whatever the job's size: the job becomes
`cancelling` at once, and its pending items are skipped afterwards, `SKIP_BATCH` at a time
(`skip_pending_batch`, called by the `factgate.finish_cancel` task and by the sweeper until none is left).
Skipping a million items in the request took about 30 s, and the request also waited for the build's row
lock (another 30–40 s for a million-row `validating` job): the issue's 68.4 s cancel. Nothing new is
dispatched once the job row says `cancelling` (the dispatcher reads only queued and running jobs, marks
only their items, and a claim of a cancelling job's item skips it), so the items left pending are inert
until the batches reach them.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from jobs.bulk_load import drop_staged_batch, try_build_lock
from jobs.items import CANCELLED_ERROR
from jobs.quotas import check_live_jobs
from jobs.retention import Retention, is_past_retention
from models import Item, Job, JobStatus, Tenant, utcnow

# Items skipped per statement (and per transaction) after a cancel: ~0.3 s of Postgres work on this machine,
# short enough that no worker's settle or dispatcher read waits behind it for long.
SKIP_BATCH = 10_000
# A job this small has its pending items skipped in the cancel's own transaction (one statement of at most
# this many rows, a few milliseconds), so a small job reads `skipped` at once, as it always did; a larger
# one is left to the batches.
SKIP_INLINE = 1_000


class JobStateError(Exception):
    """The job is not in a state that allows the operation (e.g. retrying a running job)."""


def cancel_job(session: Session, job: Job) -> bool:
    """Stop a live job: it is `cancelling` now; its pending items are skipped in the background, running
    items finish, then finalize ends it `cancelled`.

    One UPDATE of the job row, which no build holds locked (jobs/bulk_load.py:build_staged takes an advisory
    lock instead), so a cancel never waits for a `validating` job's item build: that build sees the cancel
    when it is done and rolls its items back. A job of at most `SKIP_INLINE` items also has them skipped
    here (one bounded statement); the caller enqueues `factgate.finish_cancel` after commit either way.
    Returns False when the job had already ended.
    """
    result = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.status.in_(sorted(JobStatus.cancellable())))
        .values(status=JobStatus.CANCELLING, cancelling_at=utcnow())
    )
    if not getattr(result, "rowcount", 0):
        return False
    if job.total_items <= SKIP_INLINE:
        skip_pending_batch(session, job.id, SKIP_INLINE)
    session.refresh(job)
    return True


def skip_pending_batch(session: Session, job_id: uuid.UUID, limit: int = SKIP_BATCH) -> int:
    """Skip up to `limit` pending items of a cancelling job (through `ix_items_job_status`); returns how
    many. Items another transaction holds (a worker settling one) are passed over (`SKIP LOCKED`), so two
    callers share the work instead of waiting on each other. Only a `cancelling` job's items are touched:
    a job that ended or was retried meanwhile is left alone."""
    if session.scalar(select(Job.status).where(Job.id == job_id)) != JobStatus.CANCELLING:
        return 0
    # A materialized CTE, read once: as `id IN (subquery with LIMIT)` Postgres re-ran the subquery and
    # skipped more than `limit` rows (5 for a limit of 4, seen in tests/integration/test_cancel_batches.py).
    batch = (
        select(Item.id)
        .where(Item.job_id == job_id, Item.status == "pending")
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("batch")
        .prefix_with("MATERIALIZED", dialect="postgresql")
    )
    result = session.execute(
        update(Item)
        .where(Item.id == batch.c.id, Item.status == "pending")
        .values(status="skipped", error=CANCELLED_ERROR, finished_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return int(cast("CursorResult[Any]", result).rowcount)


def cancel_step(session: Session, job_id: uuid.UUID, limit: int = SKIP_BATCH) -> int | None:
    """One bounded step of finishing a cancel, in the caller's transaction: up to `limit` staged rows of a
    job cancelled while `validating` deleted, or else up to `limit` pending items skipped. Returns how many
    rows it handled (0: nothing left), or None while a build holds the job (the build sees the cancel when
    it is done, rolls its items back and finishes the cancel itself: workers/tasks.py:start_job)."""
    if session.scalar(select(Job.status).where(Job.id == job_id)) != JobStatus.CANCELLING:
        return 0
    if not try_build_lock(session, job_id):
        return None
    dropped = drop_staged_batch(session, job_id, limit)
    if dropped:
        return dropped
    return skip_pending_batch(session, job_id, limit)


def cancelling_with_pending(session: Session) -> list[uuid.UUID]:
    """Cancelling jobs that still have pending items (the sweeper's backstop for a lost `finish_cancel`)."""
    pending = select(Item.id).where(Item.job_id == Job.id, Item.status == "pending").exists()
    return list(
        session.scalars(
            select(Job.id).where(Job.status == JobStatus.CANCELLING, pending).order_by(Job.cancelling_at)
        )
    )


def retry_failed(session: Session, job: Job, retention: Retention, now: datetime | None = None) -> int:
    """Put a finished job's failed items back to pending and requeue the job; returns how many.

    Only ended jobs (completed, failed, cancelled) can be retried: retrying a live job would race
    its own workers. The job row is locked and re-read first, and a job the purge may be emptying — purged,
    deleted, or past its tenant's retention (`retention` at `now`), which the purge queues — is refused with
    JobStateError: the purge deletes it in batches under a share lock on the same row (jobs/purge.py), and a
    retry between two batches would run a job with rows missing. A job that becomes live counts against the
    tenant's live-job quota like a submission (QuotaExceeded, counted under the tenant's lock).
    """
    session.execute(select(Job.id).where(Job.id == job.id).with_for_update())
    session.refresh(job)
    if job.status not in JobStatus.ended():
        raise JobStateError(f"job is {job.status}; only an ended job can be retried")
    if job.purged_at is not None or job.deleted_at is not None:
        raise JobStateError("the job's items were purged under its retention; there is nothing to retry")
    tenant = session.get(Tenant, job.tenant_id)
    days = retention.days_for(tenant.retention_days if tenant is not None else None)
    if is_past_retention(job, days, now or utcnow()):
        raise JobStateError(
            f"the job is past its retention of {days} days and its items are being purged; it cannot be "
            "retried (submit its rows again as a new job)"
        )
    failed = select(Item.id).where(Item.job_id == job.id, Item.status == "failed").exists()
    if tenant is not None and session.scalar(select(failed)):
        check_live_jobs(session, tenant, verb="retry")
    result = session.execute(
        update(Item)
        .where(Item.job_id == job.id, Item.status == "failed")
        .values(
            status="pending", error=None, output=None, enqueued_at=None, lease_until=None, finished_at=None
        )
    )
    n = int(getattr(result, "rowcount", 0) or 0)
    if n:
        session.execute(
            update(Job)
            .where(Job.id == job.id)
            .values(status="queued", queued_at=utcnow(), completed_at=None, failed_at=None, summary=None)
        )
        session.refresh(job)
    return n
