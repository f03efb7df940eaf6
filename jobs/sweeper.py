"""The sweeper's database side: expired leases back to pending, and which jobs are still live."""

from __future__ import annotations

import uuid

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from models import JOB_LIVE_STATUSES, Item, Job, utcnow


def expire_leases(session: Session) -> int:
    """Running items whose lease ran out (worker killed, machine lost) become pending again.

    They are marked undispatched so the next dispatch enqueues them; if the lost worker comes back,
    its write fails the lease-token check.
    """
    result = session.execute(
        update(Item)
        .where(Item.status == "running", Item.lease_until < utcnow())
        .values(status="pending", lease_until=None, enqueued_at=None, error="lease expired; re-driven")
    )
    return int(getattr(result, "rowcount", 0) or 0)


def live_job_ids(session: Session) -> list[uuid.UUID]:
    """Jobs that are not finished yet (the sweeper looks at each)."""
    return list(
        session.scalars(select(Job.id).where(Job.status.in_(JOB_LIVE_STATUSES)).order_by(Job.created_at))
    )
