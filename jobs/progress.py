"""Job progress from item counts (the job row is not rewritten per item: it would be a hot row).

Where a job's counts come from, cheapest first:
- an ended job: the counts stored on its row in the transaction that ended it (jobs/finalize.py) — exact;
- a validating job: the items it will have, all pending (counted at intake) — exact;
- a running job: the counts the dispatcher wrote into its schedule view (`jobs.schedule["counts"]`, every
  few seconds, one grouped count over all live jobs' items: `counts_of`) — as of the view's `updated_at`,
  which `RequestCounts.as_of` carries so pages and the API can say so; used while it is at most
  SHARED_COUNTS_MAX_AGE_S old and newer than the job's last (re)queue;
- else (no dispatcher has seen the job yet, or its view is stale): counted from the items through the
  (job_id, status) index — exact.

So a list of N running jobs costs no read of items at all while the dispatcher runs, whatever their size;
`request_counts` (exact, one job) stays for what must be exact: finalizing a job, and the API's poll of
one job (web/status.py caches it for a second).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import Item, Job, JobStatus, utcnow

ENDED = ("completed", "cancelled", "failed")
# A running job's shared counts (its schedule view's) are used while at most this old; the dispatcher
# writes them every couple of seconds, so an older view means no dispatcher is writing.
SHARED_COUNTS_MAX_AGE_S = 30.0


@dataclass(frozen=True)
class RequestCounts:
    """Counts by item status; `completed` means done. `as_of` is None when the counts are exact now, else
    the time they were counted at (a running job's shared counts)."""

    total: int
    completed: int
    failed: int
    skipped: int
    pending: int
    running: int
    as_of: datetime | None = field(default=None, compare=False)

    @property
    def terminal(self) -> int:
        return self.completed + self.failed + self.skipped

    @property
    def all_terminal(self) -> bool:
        return self.pending == 0 and self.running == 0

    def as_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "completed": self.completed,
            "failed": self.failed,
            "skipped": self.skipped,
            "pending": self.pending,
            "running": self.running,
        }


def _from_statuses(by: Mapping[str, int]) -> RequestCounts:
    return RequestCounts(
        total=sum(by.values()),
        completed=by.get("done", 0),
        failed=by.get("failed", 0),
        skipped=by.get("skipped", 0),
        pending=by.get("pending", 0),
        running=by.get("running", 0),
    )


_STATUSES = ("done", "failed", "skipped", "pending", "running")


def request_counts(session: Session, job_id: uuid.UUID) -> RequestCounts:
    """Count the job's items by status through the (job_id, status) index, as one row of filtered counts.

    Not a GROUP BY: right after a large intake the planner has no statistics for the job's items, and it
    grouped them by sorting every row on the status text (EXPLAIN ANALYZE, 6,000 items: 19 ms, 11 of them
    the sort); filtered counts need no sort and no plan that depends on the statistics."""
    row = session.execute(
        select(func.count(), *(func.count().filter(Item.status == s) for s in _STATUSES)).where(
            Item.job_id == job_id
        )
    ).one()
    by = dict(zip(_STATUSES, (int(n) for n in row[1:]), strict=True))
    other = int(row[0]) - sum(by.values())  # a status this version does not name still counts in total
    return _from_statuses({**by, "other": other} if other else by)


def stored_counts(job: Job) -> RequestCounts | None:
    """The counts written when the job ended, or None (a live job, or one ended before they were kept)."""
    raw = job.request_counts if job.status in ENDED else None
    return _from_dict(raw)


def _from_dict(raw: object, as_of: datetime | None = None) -> RequestCounts | None:
    if not isinstance(raw, dict):
        return None
    try:
        names = ("total", "completed", "failed", "skipped", "pending", "running")
        return RequestCounts(**{name: int(raw[name]) for name in names}, as_of=as_of)
    except (KeyError, TypeError, ValueError):
        return None


def shared_counts(job: Job, now: datetime | None = None) -> RequestCounts | None:
    """A running job's counts as the dispatcher last wrote them (its schedule view's `counts`, as of its
    `updated_at`), or None: not a running job, no view with counts, a view older than
    SHARED_COUNTS_MAX_AGE_S or older than the job's last (re)queue (a retried job's view of its first run)."""
    view = job.schedule if job.status in JobStatus.running() else None
    if not isinstance(view, dict):
        return None
    try:
        updated = datetime.fromisoformat(str(view["updated_at"]))
    except (KeyError, ValueError):
        return None
    if updated.tzinfo is None:
        return None
    now = now or utcnow()
    if now - updated > timedelta(seconds=SHARED_COUNTS_MAX_AGE_S):
        return None
    if job.queued_at is not None and updated < job.queued_at:
        return None
    return _from_dict(view.get("counts"), as_of=updated)


def validating_counts(job: Job) -> RequestCounts | None:
    """A `validating` job's counts: its items are not built yet, so the ones it will have (counted at
    intake), all pending. None for a job in any other state."""
    if job.status != JobStatus.VALIDATING:
        return None
    return RequestCounts(
        total=job.total_items, completed=0, failed=0, skipped=0, pending=job.total_items, running=0
    )


def cheap_counts(job: Job, now: datetime | None = None) -> RequestCounts | None:
    """The job's counts without reading its items (stored, announced or shared), or None."""
    return stored_counts(job) or validating_counts(job) or shared_counts(job, now)


def job_counts(session: Session, job: Job) -> RequestCounts:
    """One job's counts: stored for an ended job, shared for a running one the dispatcher counted lately,
    else counted (see the module docstring)."""
    return cheap_counts(job) or request_counts(session, job.id)


def counts_of(session: Session, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, RequestCounts]:
    """Exact counts of many jobs in one grouped query over their items (every listed job has an entry)."""
    by: dict[uuid.UUID, dict[str, int]] = {jid: {} for jid in job_ids}
    if job_ids:
        rows = session.execute(
            select(Item.job_id, Item.status, func.count())
            .where(Item.job_id.in_(list(job_ids)))
            .group_by(Item.job_id, Item.status)
        ).all()
        for jid, status, n in rows:
            by[jid][status] = int(n)
    return {jid: _from_statuses(statuses) for jid, statuses in by.items()}


def jobs_counts(session: Session, jobs: Iterable[Job]) -> dict[uuid.UUID, RequestCounts]:
    """Counts of many jobs (a list page): stored, announced and shared ones as they are, the few others
    in one grouped query."""
    now = utcnow()
    out: dict[uuid.UUID, RequestCounts] = {}
    counted: list[uuid.UUID] = []
    for job in jobs:
        cheap = cheap_counts(job, now)
        if cheap is None:
            counted.append(job.id)
        else:
            out[job.id] = cheap
    out.update(counts_of(session, counted))
    return out
