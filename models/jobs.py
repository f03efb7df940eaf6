"""Jobs, their items, and one row per upstream HTTP attempt.

Postgres is the source of truth (Redis only holds hints): an item's status, lease and output live
here, so a job can always be finished from this data alone.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any, TypedDict

from pydantic import JsonValue
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Computed,
    Date,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigIntPK, JSONType, UTCDateTime, partial_index, utcnow
from models.states import ItemStatus, JobStatus

# Job kinds are not listed here: they are the recipes' names (checks/recipes.py), a plain string column.
JOB_STATUSES = tuple(JobStatus)
JOB_LIVE_STATUSES = tuple(s for s in JobStatus if s in JobStatus.live())
ITEM_STATUSES = tuple(ItemStatus)
ITEM_TERMINAL_STATUSES = tuple(s for s in ItemStatus if s in ItemStatus.terminal())
# The purge's partial index (migration 0010): jobs deleted, or purged and waiting for their row to go.
PURGE_PENDING_SQL = "deleted_at IS NOT NULL OR purged_at IS NOT NULL"
# Conditions of the scheduler's partial indexes (also in migration 0003).
# Pack members (`pack_of` set) are never ready themselves: claiming their head claims them (migration 0013).
READY_SQL = "status = 'pending' AND enqueued_at IS NULL AND duplicate_of IS NULL AND pack_of IS NULL"
# Only members still waiting for their pack: what a head's claim and the sweep's orphan check read.
PACKED_SQL = "pack_of IS NOT NULL AND status = 'pending'"
IN_FLIGHT_SQL = "enqueued_at IS NOT NULL AND status IN ('pending', 'running')"
# Conditions of the partial indexes that describe a small subset of the items (also in migration 0008): a
# bulk intake of new top-level pending items without a dedupe key writes no entry into any of them.
DEDUPED_SQL = "dedupe_key IS NOT NULL"
CHILD_SQL = "parent_id IS NOT NULL"
RUNNING_SQL = "status = 'running'"
# A claim item's answered probability and its label as plain columns, generated from the JSON the workers
# write (also in migration 0007, with the SQLite spelling): the report's scorecards, cutoff replay,
# calibration and filters read these through one covering index instead of every item's output. Only a
# `done` claim's p from 0 to 1 counts, as in jobs.claims; a nested CASE so the cast never sees a non-number.
CLAIM_P_SQL = (
    "CASE WHEN stage = 'claim' AND status = 'done' AND jsonb_typeof(output -> 'p') = 'number' "
    "THEN CASE WHEN (output ->> 'p')::numeric BETWEEN 0 AND 1 THEN (output ->> 'p')::double precision END END"
)
CLAIM_LABEL_SQL = (
    "CASE WHEN stage = 'claim' AND jsonb_typeof(input -> 'label') = 'boolean' "
    "THEN (input ->> 'label')::boolean END"
)


class EndpointTotals(TypedDict):
    """A job's calls to one endpoint, summed: the `by_endpoint` values of `UsageTotals`."""

    http_attempts: int
    reused: int
    input_tokens: int
    output_tokens: int
    searches: int
    throttled: int
    cost_usd: float


class UsageTotals(EndpointTotals):
    """A job's usage (jobs/usage.py:usage_totals): live in the job object, stored in `usage` at finalize."""

    by_endpoint: dict[str, EndpointTotals]


class Job(Base):
    """One submitted batch. `summary` holds the finalized report totals (scorecards, flips, ...)."""

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("tenant_id", "idempotency_key"),
        Index("ix_jobs_tenant_created", "tenant_id", "created_at"),
        Index("ix_jobs_status", "status"),
        # The purge's queue: jobs deleted or past their retention whose rows are not all gone yet. Partial,
        # so it holds only those few (migration 0010).
        partial_index("ix_jobs_purge", "id", where=PURGE_PENDING_SQL),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="validating")
    options: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), default=None)
    # sha256 of what was submitted (content type, query parameters, body bytes): a reused Idempotency-Key
    # with anything else is a conflict, not this job. Null for jobs created before it was recorded.
    submission_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    # `metadata` is reserved by SQLAlchemy's declarative base, hence the attribute name. The caller's own JSON
    # object: open by contract.
    meta: Mapped[dict[str, JsonValue]] = mapped_column("metadata", JSONType, default=dict)
    total_items: Mapped[int] = mapped_column(Integer, default=0)
    # Items by status ({"total", "completed", "failed", ...}), written in the transaction that ends the job:
    # lists and status reads of an ended job use it instead of counting its items. Live jobs are counted.
    request_counts: Mapped[dict[str, int] | None] = mapped_column(JSONType, default=None)
    # The kind's summary (its recipe's contract, validated when written at finalize).
    summary: Mapped[dict[str, JsonValue] | None] = mapped_column(JSONType, default=None)
    warnings: Mapped[list[str]] = mapped_column(JSONType, default=list)
    usage: Mapped[UsageTotals | None] = mapped_column(JSONType, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    # True when answers came from the bundled simulator, so every output can say so.
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    # `interactive` work goes first within its tenant's share of the upstream; `batch` is the default.
    priority: Mapped[str] = mapped_column(String(16), default="batch", server_default="batch")
    # The scheduler's latest view of this job (share, rate, ETA), refreshed every few seconds while it runs.
    schedule: Mapped[dict[str, JsonValue] | None] = mapped_column(JSONType, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    queued_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    finalizing_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    cancelling_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    cancelled_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    failed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # Deleted by its tenant (DELETE /v1/jobs/{id}): from then on every read treats it as gone, and the purge
    # removes its rows in batches, the job row last (jobs/purge.py).
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # Past its retention: items, outputs, staged rows and per-attempt rows were purged then (its usage rolled
    # up first); the job row and its summary stay for one more retention period.
    purged_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class UsageDay(Base):
    """A tenant's upstream usage of one UTC day, endpoint and model, rolled up from the `api_calls` rows the
    purge removed (jobs/purge.py): the usage reader adds these to the live rows (jobs/usage.py), so
    `/v1/usage`, the Usage page and the budgets say the same before and after a purge. Each purged row is
    added here in the statement that deletes it, so it is counted exactly once."""

    __tablename__ = "usage_days"

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    endpoint: Mapped[str] = mapped_column(String(16), primary_key=True)
    # "" for calls that recorded no model (a primary key column cannot be null).
    model: Mapped[str] = mapped_column(String(64), primary_key=True)
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    searches: Mapped[int] = mapped_column(BigInteger, default=0)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    # Answers taken from the verdict store (api_calls rows with `reused`): counted apart, never in `requests`.
    reused: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class SourceList(Base):
    """A grounded claim's search sources, once per job and list (checks/claim_sources.py): an item's output
    names its list by `src_ref`, the digest here, and readers put the list back in its place. Claims of one
    job whose searches found the same pages stored the same ~950 bytes per item before (migration 0012).
    Read only with the job's id, which reads take from the tenant's own job; purged with the job's items."""

    __tablename__ = "source_lists"

    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    digest: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    sources: Mapped[list[Any]] = mapped_column(JSONType)


class Item(Base):
    """One unit of upstream work: a claim in one mode, an answer sentence, a search result, ...

    `dedupe_key` identifies identical upstream requests inside a job: only the first such item is
    sent and its result is copied to the others (`duplicate_of`). `lease_until` bounds how long a
    running item may stay claimed before the sweeper hands it out again (a heartbeat extends it while
    the item runs); `attempts` counts claims and doubles as the lease token, so a worker whose lease was
    taken over cannot overwrite the new owner's result; `tries` counts the claims that may have cost
    money and is capped.
    """

    __tablename__ = "items"
    __table_args__ = (
        UniqueConstraint("job_id", "custom_id", "mode"),
        Index("ix_items_job_status", "job_id", "status"),
        Index("ix_items_job_position", "job_id", "position"),
        # Only repeated requests keep a dedupe key, only child items have a parent and the sweeper only
        # reads running items' leases: each index holds just those rows. Every query reading them names a
        # value its condition implies (`dedupe_key = …`, `parent_id = …`, `status = 'running'`).
        partial_index("ix_items_job_dedupe", "job_id", "dedupe_key", where=DEDUPED_SQL),
        partial_index("ix_items_parent_id", "parent_id", where=CHILD_SQL),
        partial_index("ix_items_pack_of", "pack_of", where=PACKED_SQL),
        partial_index("ix_items_running_lease", "lease_until", where=RUNNING_SQL),
        # What the scheduler reads many times a second: a job's dispatchable items of one endpoint in
        # order, and the items in flight (dispatched, not settled) per upstream scope. Partial, so both
        # stay the size of the work they describe, not of the table.
        partial_index("ix_items_ready", "job_id", "endpoint", "position", "id", where=READY_SQL),
        # The claims report: per (job, mode) in input order, with everything its scorecards, replay,
        # calibration and filters read, so they are index-only scans of the job's entries.
        Index(
            "ix_items_claim_scores",
            "job_id",
            "mode",
            "position",
            postgresql_include=["claim_p", "claim_label", "status", "custom_id"],
        ),
        partial_index("ix_items_in_flight", "scope", "enqueued_at", where=IN_FLIGHT_SQL),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), default=None)
    # claim | question | sentence | investigation | result | compare
    stage: Mapped[str] = mapped_column(String(16))
    # The upstream endpoint of the item's first call (decisions | agent | search): with the job's key it
    # names the rate-limit scope the scheduler dispatches the item in.
    endpoint: Mapped[str] = mapped_column(String(16), default="decisions", server_default="decisions")
    # The scope it was dispatched in ("<key fingerprint>:<endpoint>"), set with `enqueued_at`.
    scope: Mapped[str | None] = mapped_column(String(48), default=None)
    position: Mapped[int] = mapped_column(Integer)
    custom_id: Mapped[str] = mapped_column(String(200))
    mode: Mapped[str] = mapped_column(String(16), default="")
    input: Mapped[dict[str, Any]] = mapped_column(JSONType)
    output: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Claims that may have reached upstream (a claim given back for an infrastructure fault before any call
    # is not counted); capped by FACTGATE_MAX_ITEM_ATTEMPTS so no item is billed again and again.
    tries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # A released item waits until then before it is dispatched again (backoff after a transient failure).
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    dedupe_key: Mapped[str | None] = mapped_column(String(64), default=None)
    duplicate_of: Mapped[int | None] = mapped_column(BigIntPK, default=None)
    # The head of the pack this item is answered in (docs/spec.md §9), on every member but the head: only the
    # head is dispatched, and its claim takes its pending members with it.
    pack_of: Mapped[int | None] = mapped_column(BigIntPK, default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # Generated by the database (never written): see CLAIM_P_SQL.
    claim_p: Mapped[float | None] = mapped_column(Float, Computed(CLAIM_P_SQL, persisted=True))
    claim_label: Mapped[bool | None] = mapped_column(Boolean, Computed(CLAIM_LABEL_SQL, persisted=True))


class ApiCall(Base):
    """One HTTP attempt upstream. Support looks calls up by `request_id` (the upstream `x-request-id`)."""

    __tablename__ = "api_calls"
    __table_args__ = (
        Index("ix_api_calls_job", "job_id"),
        Index("ix_api_calls_item", "item_id"),
        # Recent calls by time: observed latency for the scheduler, windows for /metrics.
        Index("ix_api_calls_created", "created_at"),
        # A tenant's calls by time: its spend today and this month (budgets), its usage per day.
        Index("ix_api_calls_tenant_created", "tenant_id", "created_at"),
        # Support's lookup by upstream request id, always by equality: a hash index on Postgres, a third of
        # the B-tree's size (migration 0011); SQLite ignores the method and keeps a B-tree.
        Index("ix_api_calls_request_id", "request_id", postgresql_using="hash"),
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    item_id: Mapped[int | None] = mapped_column(ForeignKey("items.id", ondelete="SET NULL"), default=None)
    endpoint: Mapped[str] = mapped_column(String(16))
    model: Mapped[str | None] = mapped_column(String(64), default=None)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    request_id: Mapped[str | None] = mapped_column(String(128), default=None)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)  # the POST alone: upstream latency
    # Time spent waiting for a rate-limiter slot before this POST: our queue, not the API.
    wait_ms: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    searches: Mapped[int] = mapped_column(Integer, default=0)
    search_results: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Every item a packed attempt answered (the head, `item_id`, first); null for an attempt of one item.
    pack_items: Mapped[list[int] | None] = mapped_column(JSONType, default=None)
    # An answer taken from the tenant's verdict store (jobs/verdicts.py), not an HTTP attempt: no status, no
    # latency, cost 0, the original request's `request_id`. Usage counts these apart from requests.
    reused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))


class Verdict(Base):
    """One finished upstream Decisions request's answers, kept for the later jobs of its tenant
    (checks/reuse.py: the key; jobs/verdicts.py: the one-read lookup and the insert). `key` is the
    SHA-256 of the endpoint, upstream, model, grounding mode and canonical body — never of a secret. An
    entry belongs to the job whose request it answered: it stops answering the moment that job is
    deleted, purged or past its retention (the lookup joins the job), and goes with the job's rows in
    the purge (or with its tenant, by cascade)."""

    __tablename__ = "verdicts"
    __table_args__ = (Index("ix_verdicts_job", "job_id"),)

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[bytes] = mapped_column(LargeBinary(32), primary_key=True)
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    endpoint: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(64))
    grounded: Mapped[bool] = mapped_column(Boolean)
    request_id: Mapped[str | None] = mapped_column(String(128), default=None)
    answered_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The validated answer as the client returned it: answers, search results, model, sanitized paths (the
    # client's contract, validated before it is stored; open here).
    answer: Mapped[dict[str, JsonValue]] = mapped_column(JSONType)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)


# The rows of a streamed submission, staged by COPY as they are validated (jobs/bulk_load.py), until its
# items are built from them (at intake for a small job, by `start_job` for a large one). No primary key and
# no foreign key: see migration 0009. A Core table, not a mapped class: only bulk_load reads and writes it.
intake_rows = Table(
    "intake_rows",
    Base.metadata,
    Column("job_id", Uuid, nullable=False),
    Column("row", Integer, nullable=False),
    Column("id", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("label", Boolean),
    Column("kind", Text),
    Column("source", Text),
    Column("in_query", Boolean),
    Index("ix_intake_rows_job", "job_id"),
)
