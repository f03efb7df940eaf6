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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypedDict, cast

from psycopg.types.json import Jsonb
from sqlalchemy import (
    Executable,
    Table,
    bindparam,
    exists,
    func,
    insert,
    select,
    tuple_,
    update,
)
from sqlalchemy.orm import Session

from jobs.clock import after
from jobs.driver import Executor, driver_of, on_driver, sqlalchemy_side
from jobs.records import CallRow, ClaimedItem
from jobs.source_lists import INSERT_CTE_SQL, sources_apart, store_sources
from models import ApiCall, Item, Job, utcnow
from models.base import UTCDateTime

CANCELLED_ERROR = "job cancelled"
DEFAULT_MAX_TRIES = 4
# Column widths of `api_calls` (models/jobs.py): clients/ already caps upstream text to fit, this only
# guards the write so that a surprise can never leave an item unsettled.
_MODEL_CHARS = 64
_REQUEST_ID_CHARS = 128
_ERROR_CHARS = 4_000


# --- the per-item statements, each named once ------------------------------------------------------------
#
# Every upstream request costs a claim and a settle, so each is written once as a named statement and run
# through one place (`_run`). On Postgres its text goes straight to psycopg on the session's or bare
# connection (jobs/driver.py), prepared server-side: even a prebuilt SQLAlchemy statement costs an execution
# context, its parameters processed one by one and a result wrapper — about as much Python again as
# psycopg's own work (the ceiling bench's profile: docs/profiles/README.md). Elsewhere (SQLite, embedded
# mode) the same statement runs prebuilt on the tables: a prebuilt statement's cache key is memoized, so a
# run costs binding its values, not building the expression and going through the ORM's bulk machinery.
_ITEMS = cast(Table, Item.__table__)
_CALLS = cast(Table, ApiCall.__table__)
_JOBS = cast(Table, Job.__table__)
_THIS_ITEM = _ITEMS.c.id == bindparam("item_id")
# The item's job is neither cancelling nor cancelled.
_LIVE_JOB = exists().where(_JOBS.c.id == _ITEMS.c.job_id, _JOBS.c.status.not_in(("cancelling", "cancelled")))


@dataclass(frozen=True)
class Statement:
    """One named operation: its Postgres text and the same statement for SQLAlchemy (None: Postgres only).
    `json` names the parameters psycopg is handed as JSONB (SQLAlchemy's column types encode them)."""

    name: str
    sql: str
    core: Executable | None
    json: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ran:
    """What a statement did: the rows it changed, and the first row it returned (None: none)."""

    rowcount: int
    row: Sequence[Any] | None


def _run(session: Executor, statement: Statement, params: dict[str, object]) -> Ran:
    """Run `statement` on Postgres's psycopg connection (inside a session's transaction, for a session),
    or through SQLAlchemy on another database."""
    if isinstance(session, Session) and session.autoflush:
        session.flush()  # as `Session.execute` would: the statement must see what the session added
    driver = driver_of(session)
    if driver is not None:
        for name in statement.json:
            if name in params:
                params[name] = Jsonb(params[name])
        cursor = on_driver(driver, statement.sql, params)
        return Ran(cursor.rowcount, cursor.fetchone() if cursor.description is not None else None)
    side = sqlalchemy_side(session)
    dialect = side.get_bind().dialect if isinstance(side, Session) else side.dialect
    if dialect.name == "postgresql" or statement.core is None:
        # Postgres is reached through psycopg (config/settings.py); the lease's clock depends on it.
        raise ValueError(f"statement {statement.name} runs on Postgres through psycopg only")
    result = side.execute(statement.core, params)
    returns_rows = getattr(result, "returns_rows", False)
    return Ran(getattr(result, "rowcount", 0) or 0, result.first() if returns_rows else None)


# A pending item of a live job with tries left becomes ours. The lease runs by the database's clock where
# there is one (Postgres: `lease_for`, jobs/clock.py), else by this process's (`lease_to`).
CLAIM = Statement(
    name="claim",
    sql=(
        "UPDATE items SET status = 'running', attempts = attempts + 1, tries = tries + 1, not_before = NULL, "
        "lease_until = now() + %(lease_for)s "
        "WHERE id = %(item_id)s AND status = 'pending' AND tries < %(max_tries)s AND EXISTS ("
        "SELECT FROM jobs WHERE jobs.id = items.job_id AND jobs.status NOT IN ('cancelling', 'cancelled')) "
        "RETURNING job_id, attempts, stage, mode, custom_id, input, dedupe_key"
    ),
    core=update(_ITEMS)
    .where(_THIS_ITEM, _ITEMS.c.status == "pending", _ITEMS.c.tries < bindparam("max_tries"), _LIVE_JOB)
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
    ),
)
# A running item we hold (the lease token `attempts`) moves to a terminal status.
SETTLE = Statement(
    name="settle",
    sql=(
        "UPDATE items SET status = %(to_status)s, output = %(to_output)s, error = %(to_error)s, "
        "lease_until = NULL, finished_at = %(at)s "
        "WHERE id = %(item_id)s AND status = 'running' AND attempts = %(token)s"
    ),
    core=update(_ITEMS)
    .where(_THIS_ITEM, _ITEMS.c.status == "running", _ITEMS.c.attempts == bindparam("token"))
    .values(
        status=bindparam("to_status"),
        output=bindparam("to_output", type_=_ITEMS.c.output.type),
        error=bindparam("to_error"),
        lease_until=None,
        finished_at=bindparam("at", type_=UTCDateTime()),
    ),
    json=("to_output",),
)
# A job's tenant, options and kind: fixed at intake, so a worker reads them once per job (`_job_static`).
JOB_STATIC = Statement(
    name="job_static",
    sql="SELECT tenant_id, options, kind FROM jobs WHERE id = %(job_id)s",
    core=select(_JOBS.c.tenant_id, _JOBS.c.options, _JOBS.c.kind).where(_JOBS.c.id == bindparam("job_id")),
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
_SETTLE_WITH: dict[tuple[int, bool], Statement] = {}


def settle_with(calls: int, sources: bool) -> Statement:
    """`SETTLE` with the try's `calls` call rows (usually 1; at most the client's attempts per call times the
    calls of one item) and, if `sources`, a claim's source list (jobs/source_lists.py) inserted by
    data-modifying CTEs: Postgres runs those exactly once whether or not the UPDATE matches, so the calls
    are kept even when the lease was lost (and a list stored then is only a list no output names yet)."""
    if not calls and not sources:
        return SETTLE
    statement = _SETTLE_WITH.get((calls, sources))
    if statement is None:
        ctes = [
            f"call_{i} AS (INSERT INTO api_calls ({', '.join(_CALL_COLUMNS)}) "  # noqa: S608 - fixed names
            f"VALUES ({', '.join(f'%({c}_{i})s' for c in _CALL_COLUMNS)}))"
            for i in range(calls)
        ]
        if sources:
            ctes.append(INSERT_CTE_SQL)
        statement = Statement(
            name=f"settle_with_{calls}_calls{'_and_sources' if sources else ''}",
            sql=f"WITH {', '.join(ctes)} {SETTLE.sql}",
            core=None,
            json=(*SETTLE.json, "src_sources"),
        )
        _SETTLE_WITH[(calls, sources)] = statement
    return statement


class UsageJson(TypedDict):
    """An item's `usage` as its output stores it (`ItemUsage.as_dict`)."""

    attempts: int
    searches: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    upstream_latency_s: float
    queue_wait_s: float


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

    def as_dict(self) -> UsageJson:
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


# What a set of `api_calls` rows adds up to, as every usage read sums it: HTTP attempts (an answer taken from
# the verdict store is none), billed searches, tokens in and out, dollars.
CALL_SUMS = (
    func.count().filter(ApiCall.reused.is_(False)),
    func.coalesce(func.sum(ApiCall.searches), 0),
    func.coalesce(func.sum(ApiCall.input_tokens), 0),
    func.coalesce(func.sum(ApiCall.output_tokens), 0),
    func.coalesce(func.sum(ApiCall.cost_usd), 0.0),
)


def item_usage(session: Session, item_id: int) -> ItemUsage:
    """The usage of every `api_calls` row of an item (all tries)."""
    row = session.execute(
        select(
            *CALL_SUMS,
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


class _JobStatic(NamedTuple):
    """What a claimed item needs of its job: all fixed at intake, so a worker reads them once per job."""

    tenant_id: uuid.UUID
    options: dict[str, Any]  # ClaimedItem.options: the job's validated options (checks/kinds/*)
    kind: str


# By job id, bounded: past `_JOB_STATIC_MAX` jobs the cache starts over.
_JOB_STATIC: dict[uuid.UUID, _JobStatic] = {}
_JOB_STATIC_MAX = 1_024


def _job_static(session: Executor, job_id: uuid.UUID) -> _JobStatic:
    hit = _JOB_STATIC.get(job_id)
    if hit is None:
        row = _run(session, JOB_STATIC, {"job_id": job_id}).row
        if row is None:
            raise LookupError(f"job {job_id} not found")
        tenant_id, options, kind = row
        if len(_JOB_STATIC) >= _JOB_STATIC_MAX:
            _JOB_STATIC.clear()
        hit = _JOB_STATIC[job_id] = _JobStatic(tenant_id, options, str(kind))
    return hit


def try_claim(
    session: Executor, item_id: int, lease_s: float, max_tries: int = DEFAULT_MAX_TRIES
) -> ClaimedItem | None:
    """The common case of `claim_item` alone: a pending item of a live job with tries left becomes ours, in
    one conditional UPDATE (one round trip: it needs no transaction around it). None when that misses; the
    caller then runs `claim_item` in a transaction to apply the other rules."""
    lease = timedelta(seconds=lease_s)
    params: dict[str, object] = {
        "item_id": item_id,
        "max_tries": max_tries,
        "lease_for": lease,
        "lease_to": utcnow() + lease,
    }
    claimed = _run(session, CLAIM, params).row
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


def _call_values(item: ClaimedItem, calls: Sequence[CallRow], now: datetime) -> list[dict[str, object]]:
    """Each call's `api_calls` row, by column (`_CALL_COLUMNS`)."""
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
    record_calls_of(session, [(item, calls, pack_items)])


def record_calls_of(
    session: Session, tries: Sequence[tuple[ClaimedItem, Sequence[CallRow], Sequence[int] | None]]
) -> None:
    """`record_calls` for several items' tries (item, its calls, the pack they answered) in one statement."""
    now = utcnow()
    values = [
        {**v, "pack_items": list(pack_items) if pack_items is not None else None}
        for item, calls, pack_items in tries
        for v in _call_values(item, calls, now)
    ]
    if values:
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
    output: Mapping[str, object] | None,
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


def _settle_params(
    item: ClaimedItem, status: str, output: Mapping[str, object] | None, error: str | None, at: datetime
) -> dict[str, object]:
    """The parameters of `SETTLE` (and of `settle_with`, which adds its rows' own)."""
    return {
        "item_id": item.id,
        "token": item.token,
        "to_status": status,
        "to_output": output,
        "to_error": error,
        "at": at,
    }


def _settle(
    session: Session,
    item: ClaimedItem,
    *,
    status: str,
    output: Mapping[str, object] | None,
    error: str | None,
) -> bool:
    """Move a running item we hold to a terminal status, and its pending duplicates with it."""
    if not _run(session, SETTLE, _settle_params(item, status, output, error, utcnow())).rowcount:
        return False  # our lease was taken over; the new holder writes the result
    if item.dedupe_key is not None:
        _settle_duplicates(
            session, item.job_id, item.id, item.dedupe_key, status=status, output=output, error=error
        )
    return True


def _settle_try(
    session: Session,
    item: ClaimedItem,
    calls: Sequence[CallRow],
    *,
    status: str,
    output: Mapping[str, object],
    error: str | None,
    usage: ItemUsage | None,
) -> bool:
    """Record the try's calls, then settle with the usage of every try (`usage`, if given, instead)."""
    record_calls(session, item, calls)
    out = {**output, "usage": (usage or _usage_after(session, item, calls)).as_dict()}
    return _settle(session, item, status=status, output=out, error=error)


def finish_item(
    session: Session,
    item: ClaimedItem,
    output: Mapping[str, object],
    calls: Sequence[CallRow] = (),
    *,
    usage: ItemUsage | None = None,
) -> bool:
    """Store a result. False when the lease was lost (the result is discarded, the calls are kept). A
    claim's sources are stored once for its job and its output names them (jobs/source_lists.py). `usage`
    is given for a pack's member (its share of the pack's calls, jobs/packs.py), else read from its calls."""
    split = sources_apart(item.stage, output)
    if split is not None:
        store_sources(session, item.job_id, split)
        output = split.output
    return _settle_try(session, item, calls, status="done", output=output, error=None, usage=usage)


def fail_item(
    session: Session,
    item: ClaimedItem,
    error: str,
    calls: Sequence[CallRow] = (),
    output: Mapping[str, object] | None = None,
    *,
    usage: ItemUsage | None = None,
) -> bool:
    """Record a final failure with its error (and any partial output), and what every try cost."""
    return _settle_try(
        session, item, calls, status="failed", output=output or {}, error=error[:_ERROR_CHARS], usage=usage
    )


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
    output: Mapping[str, object],
    error: str | None,
    calls: Sequence[CallRow],
) -> bool:
    """`_settle_try` in one statement (`settle_with`): the try's call rows, a claim's source list and the
    settle, with this try's rows as the usage."""
    dialect = session.get_bind().dialect if isinstance(session, Session) else session.dialect
    if not settles_at_once(dialect.name, item):
        raise ValueError(f"item {item.id} cannot settle in one statement")
    now = utcnow()
    split = sources_apart(item.stage, output)
    out = {**(output if split is None else split.output), "usage": usage_of_rows(calls).as_dict()}
    params = _settle_params(item, status, out, error, now)
    for i, row in enumerate(_call_values(item, calls, now)):
        params.update({f"{name}_{i}": value for name, value in row.items()})
    if split is not None:
        params.update(src_job=item.job_id, src_digest=uuid.UUID(hex=split.ref), src_sources=split.sources)
    return _run(session, settle_with(len(calls), split is not None), params).rowcount > 0


def finish_item_at_once(
    session: Executor, item: ClaimedItem, output: Mapping[str, object], calls: Sequence[CallRow] = ()
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
    output: Mapping[str, object] | None = None,
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
    return release_member(session, item, error, counted=bool(calls), retry_at=retry_at)


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
    values: dict[str, object] = {
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
