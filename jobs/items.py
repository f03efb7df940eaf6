"""Item state changes: claim with a lease, keep the lease alive, finish, fail, release for a later try, skip.

Every change is a conditional UPDATE, so a message delivered twice, a worker killed mid-task or a
sweeper re-driving an expired lease can never store two results for one item: only the holder of
the current lease token (`attempts`) may write, and only a `pending` item can be claimed.
Results, `api_calls` rows and the status change are written in one transaction by the caller's
session (the caller commits).

Every item has a bounded life: `tries` counts the claims that may have cost money, and an item that
has used `max_tries` of them is failed at its next claim instead of being sent again (its calls are
already recorded, try by try). A try that sent nothing upstream (an infrastructure fault or a limiter
timeout before the first POST) is given back and does not count.

Accounting is exact: when an item settles, its output gets `usage`, the sum of every `api_calls` row of
every try (failed items included), so result lines, scorecards and job usage agree with what the
upstream saw. Duplicates of a request (`duplicate_of`) copy the answer but not the usage: they cost
nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from psycopg.types.json import Jsonb
from sqlalchemy import (
    Interval,
    Table,
    Update,
    bindparam,
    exists,
    func,
    insert,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from jobs.clock import after, uses_database_clock
from jobs.driver import DriverConnection, Executor, driver_of, on_driver
from jobs.records import CallRow, ClaimedItem
from jobs.source_lists import INSERT_CTE_SQL, sources_apart, store_sources
from models import ApiCall, Item, Job, SourceList, utcnow
from models.base import UTCDateTime

CANCELLED_ERROR = "job cancelled"
DEFAULT_MAX_TRIES = 4
# Column widths of `api_calls` (models/jobs.py): clients/ already caps upstream text to fit, this only
# guards the write so that a surprise can never leave an item unsettled.
_MODEL_CHARS = 64
_REQUEST_ID_CHARS = 128
_ERROR_CHARS = 4_000


# Job id -> (tenant id, options, kind). All are fixed at intake, so a worker reads them once per job.
_JOB_STATIC: dict[uuid.UUID, tuple[uuid.UUID, dict[str, Any], str]] = {}
_JOB_STATIC_MAX = 1_024
# What the one-statement operations run on: a session, or — cheaper, for a statement on its own — a
# connection in autocommit (jobs/driver.py:statement_scope): `Executor`.
_LIVE_JOB = exists().where(Job.id == Item.job_id, Job.status.not_in(("cancelling", "cancelled")))

# The statements every item runs (a claim, then a settle: twice per upstream request) are built once, on
# the tables rather than the mapped classes. A prebuilt statement's cache key is memoized, so each run
# costs binding its values — not building the expression, computing its cache key and going through the
# ORM's bulk UPDATE/INSERT machinery, which together cost more than the database's own work here
# (measured: about 1.3 ms of Python per item; docs/architecture.md, "Modes of running", facts measured).
_ITEMS = cast(Table, Item.__table__)
_CALLS = cast(Table, ApiCall.__table__)
_JOBS = cast(Table, Job.__table__)
_SOURCES = cast(Table, SourceList.__table__)
_LIVE_JOB_T = exists().where(
    _JOBS.c.id == _ITEMS.c.job_id, _JOBS.c.status.not_in(("cancelling", "cancelled"))
)
_CLAIM = (
    update(_ITEMS)
    .where(
        _ITEMS.c.id == bindparam("item_id"),
        _ITEMS.c.status == "pending",
        _ITEMS.c.tries < bindparam("max_tries"),
        _LIVE_JOB_T,
    )
    .values(
        status="running",
        attempts=_ITEMS.c.attempts + 1,
        tries=_ITEMS.c.tries + 1,
        lease_until=bindparam("lease_to", type_=UTCDateTime()),
        not_before=None,
    )
    .returning(
        _ITEMS.c.job_id,
        _ITEMS.c.attempts,
        _ITEMS.c.stage,
        _ITEMS.c.mode,
        _ITEMS.c.custom_id,
        _ITEMS.c.input,
        _ITEMS.c.dedupe_key,
    )
)
# The same claim with the lease counted by the database's clock (jobs/clock.py): Postgres.
_CLAIM_DB_CLOCK = _CLAIM.values(lease_until=func.now() + bindparam("lease_for", type_=Interval()))
_SETTLE = (
    update(_ITEMS)
    .where(
        _ITEMS.c.id == bindparam("item_id"),
        _ITEMS.c.status == "running",
        _ITEMS.c.attempts == bindparam("token"),
    )
    .values(
        status=bindparam("to_status"),
        output=bindparam("to_output", type_=_ITEMS.c.output.type),
        error=bindparam("to_error"),
        lease_until=None,
        finished_at=bindparam("at", type_=UTCDateTime()),
    )
)
_INSERT_CALL = insert(_CALLS)
_CALL_COLUMNS = (
    "tenant_id",
    "job_id",
    "item_id",
    "endpoint",
    "model",
    "attempt",
    "status_code",
    "request_id",
    "latency_ms",
    "wait_ms",
    "input_tokens",
    "output_tokens",
    "searches",
    "search_results",
    "cost_usd",
    "error",
    "created_at",
    "reused",
)
# `_SETTLE` with the try's call rows inserted by a CTE, by number of rows (usually 1; at most the client's
# attempts per call times the calls of one item) and whether a claim's source list is stored with it.
_SETTLE_WITH_CALLS: dict[tuple[int, bool], Update] = {}
# A claim's source list stored for its job unless there already (jobs/source_lists.py), as a CTE.
_SOURCES_CTE = (
    postgresql.insert(_SOURCES)
    .values(
        job_id=bindparam("src_job", type_=_SOURCES.c.job_id.type),
        digest=bindparam("src_digest", type_=_SOURCES.c.digest.type),
        sources=bindparam("src_sources", type_=_SOURCES.c.sources.type),
    )
    .on_conflict_do_nothing()
)


def _settle_with_calls(n: int, sources: bool = False) -> Update:
    """One statement that inserts `n` call rows (and the claim's source list, if `sources`) and settles the
    item: Postgres runs a data-modifying CTE exactly once, whether or not the UPDATE matches, so the calls
    are kept even when the lease was lost (and a list stored then is only a list no output names yet)."""
    statement = _SETTLE_WITH_CALLS.get((n, sources))
    if statement is None:
        # One single-row INSERT per call: a multi-row VALUES has no cache key (it would compile every time).
        inserts = [
            insert(_CALLS)
            .values({c: bindparam(f"{c}_{i}", type_=_CALLS.c[c].type) for c in _CALL_COLUMNS})
            .cte(f"call_{i}")
            for i in range(n)
        ]
        if sources:
            inserts.append(_SOURCES_CTE.cte("src"))
        statement = _SETTLE.add_cte(*inserts) if inserts else _SETTLE
        _SETTLE_WITH_CALLS[(n, sources)] = statement
    return statement


# The same two statements as Postgres text, sent straight to psycopg on a bare connection (`jobs/driver.py`):
# even a prebuilt statement costs SQLAlchemy an execution context, its parameters processed one by one (17
# per call row) and a result wrapper — about as much Python again as psycopg's own work. Measured in the
# ceiling bench's profile (docs/profiles/): claim and settle were a quarter of a worker's CPU per claim.
# The texts say exactly what `_CLAIM_DB_CLOCK` and `_settle_with_calls` say (the lease by the database's
# clock, jobs/clock.py); tests/integration/test_item_lifecycle.py runs both paths.
_CLAIM_SQL = (
    "UPDATE items SET status = 'running', attempts = attempts + 1, tries = tries + 1, not_before = NULL, "
    "lease_until = now() + %(lease_for)s "
    "WHERE id = %(item_id)s AND status = 'pending' AND tries < %(max_tries)s AND EXISTS ("
    "SELECT FROM jobs WHERE jobs.id = items.job_id AND jobs.status NOT IN ('cancelling', 'cancelled')) "
    "RETURNING job_id, attempts, stage, mode, custom_id, input, dedupe_key"
)
_SETTLE_SQL = (
    "UPDATE items SET status = %(to_status)s, output = %(to_output)s, error = %(to_error)s, "
    "lease_until = NULL, finished_at = %(at)s "
    "WHERE id = %(item_id)s AND status = 'running' AND attempts = %(token)s"
)
_SETTLE_SQL_WITH_CALLS: dict[tuple[int, bool], str] = {}


def _settle_sql(n: int, sources: bool = False) -> str:
    """`_SETTLE_SQL` with `n` call rows (and the claim's source list, if `sources`) inserted by
    data-modifying CTEs (see `_settle_with_calls`)."""
    sql = _SETTLE_SQL_WITH_CALLS.get((n, sources))
    if sql is None:
        ctes = [
            f"call_{i} AS (INSERT INTO api_calls ({', '.join(_CALL_COLUMNS)}) "  # noqa: S608 - fixed names
            f"VALUES ({', '.join(f'%({c}_{i})s' for c in _CALL_COLUMNS)}))"
            for i in range(n)
        ]
        if sources:
            ctes.append(INSERT_CTE_SQL)
        sql = f"WITH {', '.join(ctes)} {_SETTLE_SQL}" if ctes else _SETTLE_SQL
        _SETTLE_SQL_WITH_CALLS[(n, sources)] = sql
    return sql


@dataclass(frozen=True)
class ItemUsage:
    """What an item cost over all its tries: POSTs sent, billed searches, tokens, dollars, and time split
    into the upstream's own latency (the POSTs) and our queue (waiting for a rate-limiter slot)."""

    attempts: int = 0
    searches: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    upstream_latency_s: float = 0.0
    queue_wait_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        # Spelled out rather than `dataclasses.asdict`, which copies recursively: once per item settled, it
        # was 1 % of a worker's CPU at the ceiling. tests/unit pin the keys to the fields.
        return {
            "attempts": self.attempts,
            "searches": self.searches,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 8),
            "upstream_latency_s": round(self.upstream_latency_s, 4),
            "queue_wait_s": round(self.queue_wait_s, 4),
        }

    def plus(self, other: ItemUsage) -> ItemUsage:
        return ItemUsage(
            attempts=self.attempts + other.attempts,
            searches=self.searches + other.searches,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            upstream_latency_s=self.upstream_latency_s + other.upstream_latency_s,
            queue_wait_s=self.queue_wait_s + other.queue_wait_s,
        )


NO_USAGE = ItemUsage()


@dataclass(frozen=True)
class Exhausted:
    """An item that had used every try: it was failed instead of claimed (see `claim_item`)."""

    id: int
    job_id: uuid.UUID
    stage: str
    tries: int


def usage_of_rows(calls: Sequence[CallRow]) -> ItemUsage:
    """The usage of the calls one try made (no database read)."""
    return ItemUsage(
        attempts=sum(1 for c in calls if not c.reused),
        searches=sum(c.searches for c in calls),
        input_tokens=sum(c.input_tokens for c in calls),
        output_tokens=sum(c.output_tokens for c in calls),
        cost_usd=sum(c.cost_usd for c in calls),
        upstream_latency_s=sum(c.latency_ms for c in calls) / 1000.0,
        queue_wait_s=sum(c.wait_ms for c in calls) / 1000.0,
    )


def item_usage(session: Session, item_id: int) -> ItemUsage:
    """The usage of every `api_calls` row of an item (all tries)."""
    row = session.execute(
        select(
            func.count().filter(ApiCall.reused.is_(False)),
            func.coalesce(func.sum(ApiCall.searches), 0),
            func.coalesce(func.sum(ApiCall.input_tokens), 0),
            func.coalesce(func.sum(ApiCall.output_tokens), 0),
            func.coalesce(func.sum(ApiCall.cost_usd), 0.0),
            func.coalesce(func.sum(ApiCall.latency_ms), 0.0),
            func.coalesce(func.sum(ApiCall.wait_ms), 0.0),
        ).where(ApiCall.item_id == item_id)
    ).one()
    attempts, searches, tin, tout, cost, latency_ms, wait_ms = row
    return ItemUsage(
        attempts=int(attempts),
        searches=int(searches),
        input_tokens=int(tin),
        output_tokens=int(tout),
        cost_usd=float(cost),
        upstream_latency_s=float(latency_ms) / 1000.0,
        queue_wait_s=float(wait_ms) / 1000.0,
    )


_JOB_STATIC_SQL = "SELECT tenant_id, options, kind FROM jobs WHERE id = %(job_id)s"


def _job_static(session: Executor, job_id: uuid.UUID) -> tuple[uuid.UUID, dict[str, Any], str]:
    hit = _JOB_STATIC.get(job_id)
    if hit is None:
        if isinstance(session, DriverConnection):
            row = on_driver(session, _JOB_STATIC_SQL, {"job_id": job_id}).fetchone()
            if row is None:
                raise LookupError(f"job {job_id} not found")
            tenant_id, options, kind = row
        else:
            tenant_id, options, kind = session.execute(
                select(Job.tenant_id, Job.options, Job.kind).where(Job.id == job_id)
            ).one()
        if len(_JOB_STATIC) >= _JOB_STATIC_MAX:
            _JOB_STATIC.clear()
        hit = _JOB_STATIC[job_id] = (tenant_id, options, str(kind))
    return hit


def try_claim(
    session: Executor, item_id: int, lease_s: float, max_tries: int = DEFAULT_MAX_TRIES
) -> ClaimedItem | None:
    """The common case of `claim_item` alone: a pending item of a live job with tries left becomes ours, in
    one conditional UPDATE (one round trip: it needs no transaction around it). None when that misses; the
    caller then runs `claim_item` in a transaction to apply the other rules."""
    driver = driver_of(session) if not isinstance(session, Session) else None
    if driver is not None:  # Postgres: the lease by the database's clock (jobs/clock.py)
        params = {"item_id": item_id, "max_tries": max_tries, "lease_for": timedelta(seconds=lease_s)}
        claimed = on_driver(driver, _CLAIM_SQL, params).fetchone()
    elif isinstance(session, DriverConnection):
        raise TypeError("a driver connection is Postgres only")
    elif uses_database_clock(session):
        params = {"item_id": item_id, "max_tries": max_tries, "lease_for": timedelta(seconds=lease_s)}
        claimed = session.execute(_CLAIM_DB_CLOCK, params).first()
    else:
        params = {
            "item_id": item_id,
            "max_tries": max_tries,
            "lease_to": utcnow() + timedelta(seconds=lease_s),
        }
        claimed = session.execute(_CLAIM, params).first()
    if claimed is None:
        return None
    job_id, attempts, stage, mode, custom_id, input_, dedupe_key = claimed
    tenant_id, options, kind = _job_static(session, job_id)
    return ClaimedItem(
        id=item_id,
        job_id=job_id,
        tenant_id=tenant_id,
        stage=stage,
        mode=mode,
        custom_id=custom_id,
        input=input_,
        token=attempts,
        options=options,
        dedupe_key=dedupe_key,
        kind=kind,
    )


def claim_item(
    session: Session, item_id: int, lease_s: float, max_tries: int = DEFAULT_MAX_TRIES
) -> ClaimedItem | Exhausted | None:
    """Take a pending item for this worker; None if it is not pending (already done, running, ...).

    One conditional UPDATE does the claim (this runs once per upstream request, so round trips count).
    An item of a job that is being cancelled is skipped instead of claimed, and an item that has used
    `max_tries` tries is failed instead (returned as `Exhausted`, so the caller can move its job on).
    """
    claimed = try_claim(session, item_id, lease_s, max_tries)
    if claimed is not None:
        return claimed
    skipped = session.execute(
        update(Item)
        .where(Item.id == item_id, Item.status == "pending", ~_LIVE_JOB)
        .values(status="skipped", error=CANCELLED_ERROR, finished_at=utcnow())
    )
    if getattr(skipped, "rowcount", 0):
        return None
    return _fail_exhausted(session, item_id, max_tries)


def _fail_exhausted(session: Session, item_id: int, max_tries: int) -> Exhausted | None:
    """Fail a pending item that has used every try, keeping its last error and its usage."""
    row = session.execute(
        select(Item.job_id, Item.stage, Item.tries, Item.error, Item.dedupe_key, Item.output).where(
            Item.id == item_id, Item.status == "pending", Item.tries >= max_tries
        )
    ).first()
    if row is None:
        return None
    job_id, stage, tries, last_error, dedupe_key, output = row
    noun = "try" if tries == 1 else "tries"
    error = f"gave up after {tries} {noun}" + (f"; last error: {last_error}" if last_error else "")
    out = {**(output or {}), "usage": item_usage(session, item_id).as_dict()}
    now = utcnow()
    moved = session.execute(
        update(Item)
        .where(Item.id == item_id, Item.status == "pending", Item.tries >= max_tries)
        .values(status="failed", error=error[:_ERROR_CHARS], output=out, finished_at=now, lease_until=None)
    )
    if not getattr(moved, "rowcount", 0):
        return None
    if dedupe_key is not None:
        _settle_duplicates(session, job_id, item_id, dedupe_key, status="failed", output=out, error=error)
    return Exhausted(id=item_id, job_id=job_id, stage=stage, tries=int(tries))


def extend_leases(session: Session, held: Sequence[tuple[int, int]], lease_s: float) -> int:
    """Push the lease of items still held (id, lease token) to now + `lease_s`: the heartbeat of a worker,
    so the sweeper never hands a live item to a second worker however long its calls take."""
    if not held:
        return 0
    result = session.execute(
        update(Item)
        .where(Item.status == "running", tuple_(Item.id, Item.attempts).in_(list(held)))
        .values(lease_until=after(session, lease_s))
    )
    return int(getattr(result, "rowcount", 0) or 0)


def _call_values(item: ClaimedItem, calls: Sequence[CallRow], now: datetime) -> list[dict[str, Any]]:
    return [
        {
            "tenant_id": item.tenant_id,
            "job_id": item.job_id,
            "item_id": item.id,
            "endpoint": c.endpoint,
            "model": c.model[:_MODEL_CHARS] if c.model else c.model,
            "attempt": c.attempt,
            "status_code": c.status_code,
            "request_id": c.request_id[:_REQUEST_ID_CHARS] if c.request_id else c.request_id,
            "latency_ms": c.latency_ms,
            "wait_ms": c.wait_ms,
            "input_tokens": c.input_tokens,
            "output_tokens": c.output_tokens,
            "searches": c.searches,
            "search_results": c.search_results,
            "cost_usd": c.cost_usd,
            "error": c.error[:_ERROR_CHARS] if c.error else c.error,
            "created_at": now,
            "reused": c.reused,
        }
        for c in calls
    ]


def record_calls(
    session: Session, item: ClaimedItem, calls: Sequence[CallRow], pack_items: Sequence[int] | None = None
) -> None:
    """Store one `api_calls` row per HTTP attempt (they happened, whatever becomes of the item). An attempt
    that answered a pack is stored once, on its head, listing every item it answered (`pack_items`)."""
    if calls:
        values = _call_values(item, calls, utcnow())
        if pack_items is not None:
            values = [{**v, "pack_items": list(pack_items)} for v in values]
        session.execute(_INSERT_CALL, values)


def _usage_after(session: Session, item: ClaimedItem, calls: Sequence[CallRow]) -> ItemUsage:
    """The item's usage once this try's rows are recorded; the first claim needs no read."""
    if item.token == 1:
        return usage_of_rows(calls)
    return item_usage(session, item.id)


def _settle_duplicates(
    session: Session,
    job_id: uuid.UUID,
    leader_id: int,
    dedupe_key: str,
    *,
    status: str,
    output: dict[str, Any] | None,
    error: str | None,
) -> None:
    """Pending repeats of the leader's request take its result, but none of its cost."""
    copied = None
    if output is not None:
        copied = {**output, "usage": NO_USAGE.as_dict(), "duplicate_of_item": leader_id}
    session.execute(
        update(Item)
        .where(
            Item.job_id == job_id,
            Item.dedupe_key == dedupe_key,
            Item.duplicate_of == leader_id,
            Item.status == "pending",
        )
        .values(status=status, output=copied, error=error, finished_at=utcnow())
    )


def _settle(
    session: Session,
    item: ClaimedItem,
    *,
    status: str,
    output: dict[str, Any] | None,
    error: str | None,
) -> bool:
    """Move a running item we hold to a terminal status, and its pending duplicates with it."""
    result = session.execute(
        _SETTLE,
        {
            "item_id": item.id,
            "token": item.token,
            "to_status": status,
            "to_output": output,
            "to_error": error,
            "at": utcnow(),
        },
    )
    if not getattr(result, "rowcount", 0):
        return False  # our lease was taken over; the new holder writes the result
    if item.dedupe_key is not None:
        _settle_duplicates(
            session, item.job_id, item.id, item.dedupe_key, status=status, output=output, error=error
        )
    return True


def finish_item(
    session: Session,
    item: ClaimedItem,
    output: dict[str, Any],
    calls: Sequence[CallRow] = (),
    *,
    usage: ItemUsage | None = None,
) -> bool:
    """Store a result. False when the lease was lost (the result is discarded, the calls are kept). A
    claim's sources are stored once for its job and its output names them (jobs/source_lists.py). `usage`
    is given for a pack's member (its share of the pack's calls, jobs/packs.py), else read from its calls."""
    record_calls(session, item, calls)
    split = sources_apart(item.stage, output)
    if split is not None:
        store_sources(session, item.job_id, split)
        output = split.output
    out = {**output, "usage": (usage or _usage_after(session, item, calls)).as_dict()}
    return _settle(session, item, status="done", output=out, error=None)


def fail_item(
    session: Session,
    item: ClaimedItem,
    error: str,
    calls: Sequence[CallRow] = (),
    output: dict[str, Any] | None = None,
    *,
    usage: ItemUsage | None = None,
) -> bool:
    """Record a final failure with its error (and any partial output), and what every try cost."""
    record_calls(session, item, calls)
    out = {**(output or {}), "usage": (usage or _usage_after(session, item, calls)).as_dict()}
    return _settle(session, item, status="failed", output=out, error=error[:_ERROR_CHARS])


def settles_at_once(dialect: str, item: ClaimedItem) -> bool:
    """Whether `finish_item_at_once` / `fail_item_at_once` can store this item's outcome: on Postgres, on
    its first try (its usage is this try's rows, no read) and when it is not a repeated request (whose
    duplicates must settle in the same transaction)."""
    return dialect == "postgresql" and item.token == 1 and item.dedupe_key is None


def _settle_at_once(
    session: Executor,
    item: ClaimedItem,
    *,
    status: str,
    output: dict[str, Any],
    error: str | None,
    calls: Sequence[CallRow],
) -> bool:
    dialect = session.get_bind().dialect if isinstance(session, Session) else session.dialect
    if not settles_at_once(dialect.name, item):
        raise ValueError(f"item {item.id} cannot settle in one statement")
    now = utcnow()
    split = sources_apart(item.stage, output)
    params: dict[str, Any] = {
        "item_id": item.id,
        "token": item.token,
        "to_status": status,
        "to_output": {**(output if split is None else split.output), "usage": usage_of_rows(calls).as_dict()},
        "to_error": error,
        "at": now,
    }
    for i, row in enumerate(_call_values(item, calls, now)):
        params.update({f"{name}_{i}": value for name, value in row.items()})
    if split is not None:
        params.update(src_job=item.job_id, src_digest=uuid.UUID(hex=split.ref), src_sources=split.sources)
    driver = driver_of(session) if not isinstance(session, Session) else None
    if driver is not None:
        params["to_output"] = Jsonb(params["to_output"])
        if split is not None:
            params["src_sources"] = Jsonb(split.sources)
        sql = _settle_sql(len(calls), split is not None)
        return on_driver(driver, sql, params).rowcount > 0
    if isinstance(session, DriverConnection):
        raise TypeError("a driver connection is Postgres only")
    result = session.execute(_settle_with_calls(len(calls), split is not None), params)
    return bool(getattr(result, "rowcount", 0))


def finish_item_at_once(
    session: Executor, item: ClaimedItem, output: dict[str, Any], calls: Sequence[CallRow] = ()
) -> bool:
    """`finish_item` as one statement (see `settles_at_once` for when it applies): the call rows and the
    result commit together even without a transaction around them, so a worker can store an outcome in one
    round trip instead of BEGIN, INSERT, UPDATE and COMMIT."""
    return _settle_at_once(session, item, status="done", output=output, error=None, calls=calls)


def fail_item_at_once(
    session: Executor,
    item: ClaimedItem,
    error: str,
    calls: Sequence[CallRow] = (),
    output: dict[str, Any] | None = None,
) -> bool:
    """`fail_item` as one statement (see `finish_item_at_once`)."""
    return _settle_at_once(
        session, item, status="failed", output=output or {}, error=error[:_ERROR_CHARS], calls=calls
    )


def skip_item(session: Session, item: ClaimedItem, reason: str) -> bool:
    """Give up on an item without calling upstream (budget reached, job cancelled)."""
    return _settle(session, item, status="skipped", output=None, error=reason)


def release_item(
    session: Session,
    item: ClaimedItem,
    error: str,
    calls: Sequence[CallRow] = (),
    *,
    retry_at: datetime | None = None,
) -> bool:
    """Hand a held item back to `pending` for a later try (not before `retry_at`); the error stays
    visible meanwhile. A try that sent nothing upstream (no calls) is given back: it cost nothing,
    so it does not count against the item's tries."""
    record_calls(session, item, calls)
    return _release(session, item, error, counted=bool(calls), retry_at=retry_at)


def release_member(
    session: Session,
    item: ClaimedItem,
    error: str,
    *,
    counted: bool,
    retry_at: datetime | None,
    alone: bool = False,
) -> bool:
    """`release_item` for a pack's member, whose calls are recorded on its head: `counted` says whether the
    try reached upstream, and `alone` takes it out of its pack, to be sent in a request of its own."""
    return _release(session, item, error, counted=counted, retry_at=retry_at, alone=alone)


def _release(
    session: Session,
    item: ClaimedItem,
    error: str,
    *,
    counted: bool,
    retry_at: datetime | None,
    alone: bool = False,
) -> bool:
    values: dict[str, Any] = {
        "status": "pending",
        "lease_until": None,
        "error": error[:_ERROR_CHARS],
        "enqueued_at": None,  # no message waits for it: the dispatcher sends it again when it is due
        "not_before": retry_at,
    }
    if not counted:
        values["tries"] = Item.tries - 1
    if alone:
        values["pack_of"] = None
    result = session.execute(
        update(Item)
        .where(Item.id == item.id, Item.status == "running", Item.attempts == item.token)
        .values(**values)
    )
    return bool(getattr(result, "rowcount", 0))
