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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, func, or_, select, text, union_all, update
from sqlalchemy.orm import Session

from checks.fairness import Priority
from jobs.clock import after, now_of
from jobs.driver import Executor, driver_of, on_driver, sqlalchemy_side
from models import ApiCall, Item, Job, JobStatus, Tenant, utcnow
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
    stage: str = ""  # its stage: the publisher sends a stage that calls nothing upstream several to a task


_LIVE_SQL_PG = (
    "SELECT jobs.id, jobs.tenant_id, tenants.weight, jobs.priority, jobs.status, "
    "tenants.upstream_key_fingerprint, "
    "(tenants.daily_budget_usd IS NOT NULL OR tenants.monthly_budget_usd IS NOT NULL) "
    "FROM jobs JOIN tenants ON tenants.id = jobs.tenant_id "
    "WHERE jobs.status IN ('in_progress', 'queued') ORDER BY jobs.created_at, jobs.id"
)
_LIVE = (
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
)


def live_jobs(session: Executor) -> list[LiveJob]:
    """Jobs that are queued or running, oldest first, with their tenant's weight."""
    conn = driver_of(session)
    if conn is not None:
        rows = on_driver(conn, _LIVE_SQL_PG, {}).fetchall()
    else:
        rows = list(sqlalchemy_side(session).execute(_LIVE).all())
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


_IN_FLIGHT_SQL_PG = f"SELECT id, status = 'running' FROM items WHERE scope = %(scope)s AND {IN_FLIGHT_SQL}"  # noqa: S608


def in_flight_items(session: Executor, scope: str) -> list[tuple[int, bool]]:
    """The items dispatched in `scope` and not settled yet (waiting in the broker, or running): their ids,
    and whether each is running. At most the scope's in-flight bound, read through `ix_items_in_flight`.

    The dispatcher counts them (less the running items of hosts gone silent, which take no upstream slot)
    and closes its windows whose items have all left (workers/windows.py)."""
    conn = driver_of(session)
    if conn is not None:
        return [(int(i), bool(r)) for i, r in on_driver(conn, _IN_FLIGHT_SQL_PG, {"scope": scope})]
    statement = select(Item.id, Item.status).where(Item.scope == scope, text(IN_FLIGHT_SQL))
    rows = sqlalchemy_side(session).execute(statement).all()
    return [(int(i), st == "running") for i, st in rows]


# Every job's first `cap` dispatchable items of an endpoint in one statement whatever the number of jobs: a
# lateral read per job, each an index range of `ix_items_ready` (its condition spelled as the index's).
_READY_SQL_PG = (
    "SELECT j.id, i.id, i.parent_id, i.stage FROM unnest(%(jobs)s::uuid[]) AS j(id) CROSS JOIN LATERAL ("  # noqa: S608
    f"SELECT items.id, items.parent_id, items.stage, items.position FROM items WHERE items.job_id = j.id "
    f"AND items.endpoint = %(endpoint)s AND {READY_SQL} "
    "AND (items.not_before IS NULL OR items.not_before <= %(now)s) "
    "ORDER BY items.position, items.id LIMIT %(cap)s) AS i"
)


def ready_items(
    session: Executor, job_ids: Sequence[uuid.UUID], endpoint: str, cap: int, now: datetime | None = None
) -> dict[uuid.UUID, list[Ready]]:
    """Up to `cap` dispatchable items of each job for one endpoint, in position order (on Postgres one
    round trip whatever the number of jobs; elsewhere one per couple of hundred jobs). Duplicates are
    never dispatched, and an item given back after a transient failure waits for its `not_before`."""
    if cap <= 0 or not job_ids:
        return {}
    moment = now or utcnow()
    out: dict[uuid.UUID, list[Ready]] = {}
    conn = driver_of(session)
    if conn is not None:
        params = {"jobs": list(job_ids), "endpoint": endpoint, "now": moment, "cap": cap}
        for job_id, item_id, parent_id, stage in on_driver(conn, _READY_SQL_PG, params):
            out.setdefault(job_id, []).append(
                Ready(int(item_id), None if parent_id is None else int(parent_id), str(stage))
            )
        for items in out.values():
            items.sort(key=lambda r: r.id)
        return out
    for start in range(0, len(job_ids), _JOBS_PER_STATEMENT):
        parts = []
        for job_id in job_ids[start : start + _JOBS_PER_STATEMENT]:
            sub = (
                select(Item.job_id, Item.id, Item.parent_id, Item.stage)
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
            parts.append(select(sub.c.job_id, sub.c.id, sub.c.parent_id, sub.c.stage))
        statement = parts[0] if len(parts) == 1 else union_all(*parts)
        for job_id, item_id, parent_id, stage in sqlalchemy_side(session).execute(statement):
            out.setdefault(job_id, []).append(
                Ready(int(item_id), None if parent_id is None else int(parent_id), str(stage))
            )
    for items in out.values():
        items.sort(key=lambda r: r.id)  # a union does not keep each part's order; ids follow positions
    return out


_MARK_SQL_PG = (
    "UPDATE items SET enqueued_at = now(), scope = %(scope)s "
    "WHERE id = ANY(%(ids)s) AND status = 'pending' AND enqueued_at IS NULL AND EXISTS ("
    "SELECT FROM jobs WHERE jobs.id = items.job_id AND jobs.status IN ('in_progress', 'queued')) "
    "RETURNING id"
)


def mark_dispatched(session: Executor, item_ids: Iterable[int], scope: str) -> set[int]:
    """Mark items as sent in `scope`; returns the ids this call marked (an item already dispatched, or no
    longer pending, or of a job no longer queued or running — cancelled since the dispatcher read it — is
    left alone, so nothing of a cancelling job is sent once its cancel has committed)."""
    ids = list(item_ids)
    if not ids:
        return set()
    conn = driver_of(session)
    if conn is not None:  # the database's clock: the sweeper on another host reads these marks
        return {int(i) for (i,) in on_driver(conn, _MARK_SQL_PG, {"ids": ids, "scope": scope})}
    sa = sqlalchemy_side(session)
    now = now_of(sa)
    marked = {
        int(i)
        for (i,) in sa.execute(
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


_STARTED_SQL_PG = (
    "UPDATE jobs SET status = 'in_progress', started_at = %(at)s "
    "WHERE id = ANY(%(ids)s) AND status = 'queued'"
)


def mark_started(session: Executor, job_ids: Iterable[uuid.UUID]) -> None:
    """queued → in progress for jobs whose work has started (idempotent)."""
    ids = list(job_ids)
    if not ids:
        return
    conn = driver_of(session)
    if conn is not None:
        on_driver(conn, _STARTED_SQL_PG, {"ids": ids, "at": utcnow()})
    else:
        sqlalchemy_side(session).execute(
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


def reused_share(session: Session, endpoint: str, *, sample: int = 50, window_s: float = 60.0) -> float:
    """The share of the endpoint's latest answers that came from the verdict store (jobs/verdicts.py)
    rather than upstream, over answers of the last `window_s` (0.0 when none): such an item takes no
    limiter slot, so the dispatcher keeps more in flight while re-runs are being answered from the store."""
    since = utcnow() - timedelta(seconds=window_s)
    recent = (
        select(ApiCall.reused)
        .where(
            ApiCall.endpoint == endpoint,
            ApiCall.created_at >= since,
            (ApiCall.status_code == 200) | ApiCall.reused.is_(True),
        )
        .order_by(ApiCall.created_at.desc())
        .limit(sample)
        .subquery()
    )
    value = session.scalar(select(func.avg(case((recent.c.reused.is_(True), 1.0), else_=0.0))))
    return 0.0 if value is None else float(value)


def store_schedules(session: Session, views: Mapping[uuid.UUID, Mapping[str, object]]) -> None:
    """Write the scheduler's view of each live job (share, rate, ETA) onto the job rows.

    A few writes per job every few seconds — never per item, so the job row does not become hot.
    """
    for job_id, view in views.items():
        session.execute(update(Job).where(Job.id == job_id, Job.status.in_(LIVE)).values(schedule=view))
