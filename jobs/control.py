"""Cancel and retry. Both are conditional updates so that racing requests are harmless."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from jobs.items import CANCELLED_ERROR
from models import Item, Job, JobStatus, utcnow


class JobStateError(Exception):
    """The job is not in a state that allows the operation (e.g. retrying a running job)."""


def cancel_job(session: Session, job: Job) -> bool:
    """Stop a live job: pending items are skipped now, running items finish, then it is cancelled.

    A `validating` job has no items yet: it becomes `cancelling` with none, its build never runs
    (jobs/bulk_load.py:build_staged deletes its staged rows instead) and finalize ends it `cancelled`.
    Returns False when the job had already ended (nothing to cancel).
    """
    now = utcnow()
    result = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.status.in_(sorted(JobStatus.cancellable())))
        .values(status="cancelling", cancelling_at=now)
    )
    if not getattr(result, "rowcount", 0):
        return False
    session.execute(
        update(Item)
        .where(Item.job_id == job.id, Item.status == "pending")
        .values(status="skipped", error=CANCELLED_ERROR, finished_at=now)
    )
    session.refresh(job)
    return True


def retry_failed(session: Session, job: Job) -> int:
    """Put a finished job's failed items back to pending and requeue the job; returns how many.

    Only ended jobs (completed, failed, cancelled) can be retried: retrying a live job would race
    its own workers.
    """
    if job.status not in JobStatus.ended():
        raise JobStateError(f"job is {job.status}; only an ended job can be retried")
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
