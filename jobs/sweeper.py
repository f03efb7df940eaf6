"""The sweeper's database side: expired leases back to pending, which jobs are still live, and which
`validating` jobs lost their `start_job` message."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import timedelta

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from jobs.bulk_load import build_lock_sql
from jobs.clock import after, now_of
from models import JOB_LIVE_STATUSES, Item, Job, JobStatus, utcnow
from models.jobs import IN_FLIGHT_SQL


def expire_leases(session: Session) -> int:
    """Running items whose lease ran out (worker killed, machine lost) become pending again.

    They are marked undispatched so the next dispatch enqueues them; if the lost worker comes back,
    its write fails the lease-token check. Leases are counted by the database's clock (jobs/clock.py), so
    neither this host's clock nor the worker's decides when one ran out.
    """
    result = session.execute(
        update(Item)
        .where(Item.status == "running", Item.lease_until < now_of(session))
        .values(status="pending", lease_until=None, enqueued_at=None, error="lease expired; re-driven")
    )
    return int(getattr(result, "rowcount", 0) or 0)


def redrive_abandoned(
    session: Session, held_elsewhere: Collection[int], unrenewed_s: float, lease_s: float
) -> int:
    """Running items whose lease nobody has renewed for `unrenewed_s`, and that no host still beating in
    Redis lists (`held_elsewhere`), become pending and undispatched again before their lease runs out.
    Called while some host has been silent for long (workers/hosts.py:HostWatch._redrive_dead).

    Why both conditions: Redis silence alone is no proof the host stopped — one cut off from Redis only
    still runs its items and renews their leases every third of a lease. A lease is renewed to now +
    `lease_s`, so one below now + `lease_s` − `unrenewed_s` (by the database's clock) was last renewed more
    than `unrenewed_s` ago: with `unrenewed_s` above the renewal interval, its holder has stopped renewing.
    Not the dead host's record alone: an item claimed after its last beat is in no record, and waited for its
    lease. As after `expire_leases`, the new claim takes a new lease token, so should the holder come back,
    its late settle loses."""
    if unrenewed_s >= lease_s:
        return 0  # the lease runs out first: `expire_leases` has them
    statement = update(Item).where(
        text(IN_FLIGHT_SQL),
        Item.status == "running",
        Item.lease_until < after(session, lease_s - unrenewed_s),
    )
    if held_elsewhere:
        statement = statement.where(Item.id.not_in(sorted(held_elsewhere)))
    result = session.execute(
        statement.values(status="pending", lease_until=None, enqueued_at=None, error="host silent; re-driven")
    )
    return int(getattr(result, "rowcount", 0) or 0)


def live_job_ids(session: Session) -> list[uuid.UUID]:
    """Jobs that are not finished yet (the sweeper looks at each)."""
    return list(
        session.scalars(select(Job.id).where(Job.status.in_(JOB_LIVE_STATUSES)).order_by(Job.created_at))
    )


def stale_validating(session: Session, older_than_s: float) -> list[uuid.UUID]:
    """`validating` jobs created more than `older_than_s` ago whose items nobody is building right now: the
    sweeper sends `start_job` for each again (its message was lost — a broker outage at submit, a flushed
    Redis, a worker killed mid-build, whose transaction rolled back).

    A build holds its job's advisory lock (jobs/bulk_load.py:build_staged); trying that lock here leaves
    those jobs out (and holds it only until this transaction ends), so a build that takes longer than
    `older_than_s` is not sent twice. Should a second message arrive anyway, it finds the job locked or
    queued and does nothing. On SQLite no build is ever deferred, so there is nothing to pass over."""
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    stmt = select(Job.id).where(Job.status == JobStatus.VALIDATING, Job.created_at < cutoff)
    if session.get_bind().dialect.name == "postgresql":
        candidates = stmt.order_by(Job.created_at).cte("candidates").prefix_with("MATERIALIZED")
        # Materialized first, so the lock is only tried on the candidates, never on every job row.
        return list(
            session.scalars(select(candidates.c.id).where(text(build_lock_sql(f"{candidates.name}.id"))))
        )
    return list(session.scalars(stmt.order_by(Job.created_at)))
