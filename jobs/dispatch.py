"""Which items to hand to the queue next, and job start.

Items are enqueued in windows (a few chords at a time), not all at once: the broker holds at most
a few thousand messages per job, a cancel takes effect within one window, and a flushed Redis loses
at most one window — which the sweeper re-dispatches from this table.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from models import Item, Job, utcnow


def mark_started(session: Session, job_id: uuid.UUID) -> bool:
    """queued → in_progress (idempotent). False if the job is not queued."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == "queued")
        .values(status="in_progress", started_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))


def next_window(session: Session, job_id: uuid.UUID, limit: int) -> list[int]:
    """Claim up to `limit` undispatched leader items for enqueueing, in position order.

    Duplicates (`duplicate_of` set) are never enqueued: they settle with their leader. An item given back
    after a transient failure waits until its `not_before`.
    """
    if limit <= 0:
        return []
    now = utcnow()
    ids = list(
        session.scalars(
            select(Item.id)
            .where(
                Item.job_id == job_id,
                Item.status == "pending",
                Item.enqueued_at.is_(None),
                Item.duplicate_of.is_(None),
                or_(Item.not_before.is_(None), Item.not_before <= now),
            )
            .order_by(Item.position, Item.id)
            .limit(limit)
        )
    )
    if ids:
        session.execute(
            update(Item).where(Item.id.in_(ids), Item.enqueued_at.is_(None)).values(enqueued_at=now)
        )
    return ids


def in_flight(session: Session, job_id: uuid.UUID) -> int:
    """Items enqueued but not finished, or running: work the queue still owes this job."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(Item)
            .where(
                Item.job_id == job_id,
                Item.duplicate_of.is_(None),
                ((Item.status == "pending") & Item.enqueued_at.is_not(None)) | (Item.status == "running"),
            )
        )
        or 0
    )


def forget_stale_dispatches(session: Session, job_id: uuid.UUID, older_than_s: float) -> int:
    """Pending items enqueued long ago whose messages were probably lost (e.g. Redis flushed).

    They become undispatched again; if the old message does turn up, claiming is conditional, so
    the item still runs once.
    """
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    result = session.execute(
        update(Item)
        .where(
            Item.job_id == job_id,
            Item.status == "pending",
            Item.enqueued_at.is_not(None),
            Item.enqueued_at < cutoff,
        )
        .values(enqueued_at=None)
    )
    return int(getattr(result, "rowcount", 0) or 0)
