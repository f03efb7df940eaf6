"""The scheduler's database side: which jobs have work, what is in flight, and marking items dispatched.

The database decides the order in which items reach the upstream; the broker only holds what the
dispatcher (workers/dispatcher.py) has just sent. Per scope (upstream key + endpoint) it keeps a bounded
number of items in flight — dispatched and not yet settled — and each time slots free up it reads, for
every live job, the first few items it could send now and lets `checks.fairness.allocate` choose.

Every read here is bounded by the work it describes, not by the size of the tables: both conditions match
a partial index (`ix_items_ready`, `ix_items_in_flight`, models/jobs.py), and they are spelled as literal
SQL so that Postgres can prove a prepared statement matches the index predicate.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, text, union_all, update
from sqlalchemy.orm import Session

from checks.fairness import Priority
from jobs.clock import after, now_of
from models import ApiCall, Item, ItemStatus, Job, JobStatus, Tenant, utcnow
from models.jobs import IN_FLIGHT_SQL, READY_SQL

LIVE = tuple(sorted(JobStatus.running()))
# A union of per-job reads is split into statements of at most this many jobs (bind-parameter limits).
_JOBS_PER_STATEMENT = 200


@dataclass(frozen=True)
class LiveJob:
    """A job that may have work to dispatch, with what the fairness policy needs to know of it."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    weight: float
    priority: Priority
    order: int
    status: str
    key_fingerprint: str | None = None  # the tenant's own upstream key; None: the operator's
    budgeted: bool = False  # the tenant has a daily or monthly budget (the dispatcher checks its spend)


@dataclass(frozen=True)
class Ready:
    """One dispatchable item: its id, and its question (for the chord body that moves the question on)."""

    id: int
    parent_id: int | None


def live_jobs(session: Session) -> list[LiveJob]:
    """Jobs that are queued or running, oldest first, with their tenant's weight."""
    rows = session.execute(
        select(
            Job.id,
            Job.tenant_id,
            Tenant.weight,
            Job.priority,
            Job.status,
            Tenant.upstream_key_fingerprint,
            (Tenant.daily_budget_usd.is_not(None) | Tenant.monthly_budget_usd.is_not(None)),
        )
        .join(Tenant, Tenant.id == Job.tenant_id)
        .where(Job.status.in_(LIVE))
        .order_by(Job.created_at, Job.id)
    ).all()
    return [
        LiveJob(
            id=jid,
            tenant_id=tid,
            weight=float(weight or 1.0),
            priority="interactive" if prio == "interactive" else "batch",
            order=n,
            status=str(st),
            key_fingerprint=fp,
            budgeted=bool(budgeted),
        )
        for n, (jid, tid, weight, prio, st, fp, budgeted) in enumerate(rows)
    ]


def in_flight(session: Session, scope: str, lost: Collection[int] = ()) -> int:
    """Items dispatched in `scope` and not settled yet (waiting in the broker, or running).

    `lost`: items held by hosts that went silent (workers/leases.py:silent_hosts). Those still running do
    not count: their host is frozen or cut off, so they take no upstream slot now, and counting them kept a
    scope below its rate until their leases ran out. They stay running and their host's (the lease token
    decides who writes); only the count leaves them out."""
    statement = select(func.count()).select_from(Item).where(Item.scope == scope, text(IN_FLIGHT_SQL))
    if lost:
        statement = statement.where(~(Item.id.in_(sorted(lost)) & (Item.status == "running")))
    return int(session.scalar(statement) or 0)


def ready_items(
    session: Session, job_ids: Sequence[uuid.UUID], endpoint: str, cap: int, now: datetime | None = None
) -> dict[uuid.UUID, list[Ready]]:
    """Up to `cap` dispatchable items of each job for one endpoint, in position order (one round trip per
    couple of hundred jobs). Duplicates are never dispatched, and an item given back after a transient
    failure waits for its `not_before`."""
    if cap <= 0 or not job_ids:
        return {}
    moment = now or utcnow()
    out: dict[uuid.UUID, list[Ready]] = {}
    for start in range(0, len(job_ids), _JOBS_PER_STATEMENT):
        parts = []
        for job_id in job_ids[start : start + _JOBS_PER_STATEMENT]:
            sub = (
                select(Item.job_id, Item.id, Item.parent_id)
                .where(
                    Item.job_id == job_id,
                    Item.endpoint == endpoint,
                    text(READY_SQL),
                    or_(Item.not_before.is_(None), Item.not_before <= moment),
                )
                .order_by(Item.position, Item.id)
                .limit(cap)
                .subquery()
            )
            parts.append(select(sub.c.job_id, sub.c.id, sub.c.parent_id))
        statement = parts[0] if len(parts) == 1 else union_all(*parts)
        for job_id, item_id, parent_id in session.execute(statement):
            out.setdefault(job_id, []).append(
                Ready(int(item_id), None if parent_id is None else int(parent_id))
            )
    for items in out.values():
        items.sort(key=lambda r: r.id)  # a union does not keep each part's order; ids follow positions
    return out


def mark_dispatched(session: Session, item_ids: Iterable[int], scope: str) -> set[int]:
    """Mark items as sent in `scope`; returns the ids this call marked (an item already dispatched, or no
    longer pending, or of a job no longer queued or running — cancelled since the dispatcher read it — is
    left alone, so nothing of a cancelling job is sent once its cancel has committed)."""
    ids = list(item_ids)
    if not ids:
        return set()
    now = now_of(session)  # the database's clock: the sweeper on another host reads these marks
    marked = {
        int(i)
        for (i,) in session.execute(
            update(Item)
            .where(
                Item.id.in_(ids),
                Item.status == "pending",
                Item.enqueued_at.is_(None),
                select(Job.id).where(Job.id == Item.job_id, Job.status.in_(LIVE)).exists(),
            )
            .values(enqueued_at=now, scope=scope)
            .returning(Item.id)
        )
    }
    return marked


def mark_started(session: Session, job_ids: Iterable[uuid.UUID]) -> None:
    """queued → in progress for jobs whose work has started (idempotent)."""
    ids = list(job_ids)
    if ids:
        session.execute(
            update(Job)
            .where(Job.id.in_(ids), Job.status == "queued")
            .values(status="in_progress", started_at=utcnow())
        )


def forget_dispatches(session: Session, item_ids: Iterable[int]) -> int:
    """Undo `mark_dispatched` for items whose message could not be sent (the broker was unreachable)."""
    ids = list(item_ids)
    if not ids:
        return 0
    result = session.execute(
        update(Item)
        .where(Item.id.in_(ids), Item.status == "pending", Item.enqueued_at.is_not(None))
        .values(enqueued_at=None, scope=None)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def forget_stale_dispatches(session: Session, older_than_s: float) -> int:
    """Pending items dispatched more than `older_than_s` ago whose message was probably lost (Redis flushed,
    a killed worker's prefetched message): they become dispatchable again. If the old message does turn up,
    claiming is conditional, so the item still runs once. 0 forgets every pending dispatch."""
    cutoff = after(session, -older_than_s)
    result = session.execute(
        update(Item)
        .where(Item.status == "pending", Item.enqueued_at.is_not(None), Item.enqueued_at <= cutoff)
        .values(enqueued_at=None, scope=None)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def observed_latency_s(
    session: Session, endpoint: str, *, sample: int = 50, window_s: float = 600.0
) -> float | None:
    """Mean upstream latency of the endpoint's latest answered calls (the POST alone), or None if none."""
    since = utcnow() - timedelta(seconds=window_s)
    recent = (
        select(ApiCall.latency_ms)
        .where(ApiCall.endpoint == endpoint, ApiCall.status_code == 200, ApiCall.created_at >= since)
        .order_by(ApiCall.created_at.desc())
        .limit(sample)
        .subquery()
    )
    value = session.scalar(select(func.avg(recent.c.latency_ms)))
    return None if value is None else float(value) / 1000.0


def remaining_items(session: Session, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    """Items not settled yet (pending or running), per job."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(Item.job_id, func.count())
        .where(Item.job_id.in_(list(job_ids)), Item.status.in_(sorted(ItemStatus.open())))
        .group_by(Item.job_id)
    ).all()
    return {jid: int(n) for jid, n in rows}


def store_schedules(session: Session, views: Mapping[uuid.UUID, dict[str, Any]]) -> None:
    """Write the scheduler's view of each live job (share, rate, ETA) onto the job rows.

    A few writes per job every few seconds — never per item, so the job row does not become hot.
    """
    for job_id, view in views.items():
        session.execute(update(Job).where(Job.id == job_id, Job.status.in_(LIVE)).values(schedule=view))
