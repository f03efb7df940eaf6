"""Finalize a job once every item is terminal: summary, usage, final status. Idempotent.

The item counts are stored on the job row with its final status (jobs.progress reads them back).
Safe to call from every chord body and from the sweeper at once: the status moves with a
conditional UPDATE, so exactly one caller builds the summary; the others see it moved and stop.
This is the one place a job ends (completed, cancelled or failed), so it is also where the job's webhook
is written to the outbox (jobs/webhooks.py), in the same transaction as the job's final status.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from jobs.bulk_load import drop_staged, try_build_lock
from jobs.kinds import job_kind
from jobs.progress import request_counts
from jobs.usage import usage_totals
from jobs.webhooks import record_job_ended
from models import Item, ItemStatus, Job, JobStatus, utcnow

log = logging.getLogger("factgate.jobs")

ENDED = tuple(sorted(JobStatus.ended()))


def build_summary(session: Session, job: Job) -> dict[str, object]:
    """The kind's report totals (its recipe's summary contract), as stored on the job. A kind's summary
    also holds what its pages read instead of counting every item per view (claims: calibration bins)."""
    return job_kind(job.kind).summarize(session, job).dump()


def ready_to_finalize(session: Session, job: Job) -> bool:
    """Beyond every item being terminal: a staged kind also needs every entry item's report, which is
    built after its last child settles (jobs/stages.py); a one-stage kind is ready."""
    return job_kind(job.kind).ready(session, job)


def maybe_finalize(session: Session, job_id: uuid.UUID) -> bool:
    """Finalize if every item is terminal. True when the job has ended (now or before)."""
    job = session.get(Job, job_id)
    if job is None:
        return True
    if job.status in ENDED:
        return True
    # Cheap first: one index probe answers "still working?" (the common case, asked after every window),
    # before counting a job's items by status, which reads all of them.
    if (
        session.scalar(
            select(Item.id).where(Item.job_id == job_id, Item.status.in_(sorted(ItemStatus.open()))).limit(1)
        )
        is not None
    ):
        return False
    counts = request_counts(session, job_id)
    if counts.total == 0 and job.status != JobStatus.CANCELLING:
        # Its items are not built yet (a `validating` job: jobs/bulk_load.py). A job cancelled while
        # validating never gets any: it ends here with none, its staged rows deleted (below).
        return False
    if not counts.all_terminal or not ready_to_finalize(session, job):
        return False
    if counts.total == 0 and not try_build_lock(session, job_id):
        # Cancelled while its items are being built: the build sees the cancel, rolls back and finishes
        # the cancel itself. Ending the job now would race that build for the staged rows.
        return False
    now = utcnow()
    # Whether it ends `cancelled` is decided by the row this UPDATE moves, never by `job` as read above: a
    # cancel that commits in between (the CLI's `cancel` while the check's worker finalizes) left that copy
    # saying in progress, and the job ended `completed`, its skipped items unexplained.
    cancelling = _to_finalizing(session, job_id, (JobStatus.CANCELLING,), now)
    if not cancelling and not _to_finalizing(session, job_id, (JobStatus.QUEUED, JobStatus.IN_PROGRESS), now):
        # Someone else is finalizing it right now, or a cancel came after the first UPDATE: the cancel's
        # own `finish_cancel` (and the sweeper's backstop) finalizes it.
        return False
    session.refresh(job)
    try:
        values: dict[str, object] = {"summary": None, "usage": usage_totals(session, job_id)}
        if counts.total:  # a job cancelled before its items were built has nothing to summarize
            summary = build_summary(session, job)
            summary["request_counts"] = counts.as_dict()
            values["summary"] = summary
        if cancelling:
            values.update(status=JobStatus.CANCELLED, cancelled_at=utcnow())
        else:
            values.update(status=JobStatus.COMPLETED, completed_at=utcnow())
    except Exception as exc:  # a broken summary must not leave the job stuck in finalizing
        log.exception("finalizing job %s failed", job_id)
        values = {
            "status": JobStatus.FAILED,
            "failed_at": utcnow(),
            "error": f"finalizing failed: {type(exc).__name__}: {exc}",
            "usage": usage_totals(session, job_id),
        }
    # Every item is terminal and stays so while the job is ended (a retry reopens the job first), so these
    # counts stay true: lists and status reads of the ended job use them instead of counting its items.
    values["request_counts"] = counts.as_dict()
    if counts.total == 0:
        drop_staged(session, job_id)  # cancelled while validating, and its build never ran
    session.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.FINALIZING).values(**values))
    session.refresh(job)
    log.info("job %s %s: %d items", job_id, values["status"], counts.total)
    _outbox(session, job)
    return True


def _to_finalizing(
    session: Session, job_id: uuid.UUID, statuses: tuple[JobStatus, ...], now: datetime
) -> bool:
    """Move the job to `finalizing` if it is in one of `statuses` now (one conditional UPDATE)."""
    moved = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_(statuses))
        .values(status=JobStatus.FINALIZING, finalizing_at=now)
    )
    return bool(getattr(moved, "rowcount", 0))


def _outbox(session: Session, job: Job) -> None:
    """The job's webhook, in this transaction. In a savepoint: a failure to build it is logged and must not
    keep the job from ending (nor roll its end back)."""
    try:
        with session.begin_nested():
            record_job_ended(session, job)
    except Exception:
        log.exception("job %s ended but its webhook could not be written", job.id)
