"""The tenant's verdict store: finished Decisions requests kept for its later jobs (docs/spec.md, "Verdict
reuse"), one named query per operation.

`find_verdict` is the lookup a worker makes before a request is sent: one read through the primary key
(tenant, key), joined to the job whose request the entry answered and to the tenant, so an entry of a job
deleted or purged, or of a tenant whose reuse is off or that is removed, is not found from the commit that
did it on; the job's retention (the purge's rule, jobs/retention.py) and the reader's age limit are applied
to the one row (checks/reuse.py:usable). `keep_verdict` inserts an answer after it came back, unless the
tenant's reuse is off, and never replaces an entry (`ON CONFLICT DO NOTHING`: the first answer stays the
one later jobs see). `delete_verdicts` is the purge's batch. Every statement names the tenant or the job,
which the caller took from the item it holds.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, case, delete, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from checks.reuse import ReusePolicy, usable
from jobs.retention import Retention
from models import Job, JobStatus, Tenant, Verdict, utcnow
from models.base import UTCDateTime

Executor = Session | Connection


@dataclass(frozen=True)
class StoredVerdict:
    """An entry that may answer a request now: the original request's id and time, and its answer."""

    request_id: str | None
    answered_at: datetime
    model: str
    answer: dict[str, Any]
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class NewVerdict:
    """A finished request's answer, as the worker keeps it."""

    tenant_id: uuid.UUID
    job_id: uuid.UUID
    key: bytes
    endpoint: str
    model: str
    grounded: bool
    request_id: str | None
    answered_at: datetime
    answer: dict[str, Any]
    input_tokens: int
    output_tokens: int


_ENDED_AT = case(
    (Job.status == JobStatus.COMPLETED, Job.completed_at),
    (Job.status == JobStatus.CANCELLED, Job.cancelled_at),
    (Job.status == JobStatus.FAILED, Job.failed_at),
)
_FIND = (
    select(
        Verdict.request_id,
        Verdict.answered_at,
        Verdict.model,
        Verdict.answer,
        Verdict.input_tokens,
        Verdict.output_tokens,
        _ENDED_AT.label("ended_at"),
        Tenant.retention_days,
    )
    .join(Job, Job.id == Verdict.job_id)
    .join(Tenant, Tenant.id == Verdict.tenant_id)
    .where(
        Job.deleted_at.is_(None), Job.purged_at.is_(None), Tenant.reuse.is_(True), Tenant.deleted_at.is_(None)
    )
)


def find_verdict(
    session: Executor,
    tenant_id: uuid.UUID,
    key: bytes,
    *,
    policy: ReusePolicy,
    retention: Retention,
    now: datetime | None = None,
) -> StoredVerdict | None:
    """The tenant's entry for this request key that may answer it now, or None (send the request)."""
    if not policy.read:
        return None
    row = session.execute(_FIND.where(Verdict.tenant_id == tenant_id, Verdict.key == key)).one_or_none()
    if row is None:
        return None
    ended_at = UTCDateTime().process_result_value(row.ended_at, None) if row.ended_at is not None else None
    if not usable(
        policy,
        answered_at=row.answered_at,
        now=now or utcnow(),
        job_ended_at=ended_at,
        retention_days=retention.days_for(row.retention_days),
    ):
        return None
    return StoredVerdict(
        request_id=row.request_id,
        answered_at=row.answered_at,
        model=row.model,
        answer=dict(row.answer),
        input_tokens=int(row.input_tokens),
        output_tokens=int(row.output_tokens),
    )


def keep_verdict(session: Executor, verdict: NewVerdict) -> bool:
    """Store a finished request's answer for the tenant's later jobs, in one statement that also reads the
    tenant's switch; False when not stored (reuse off for the tenant, or an entry with this key exists)."""
    values = {
        "tenant_id": verdict.tenant_id,
        "key": verdict.key,
        "job_id": verdict.job_id,
        "endpoint": verdict.endpoint,
        "model": verdict.model,
        "grounded": verdict.grounded,
        "request_id": verdict.request_id,
        "answered_at": verdict.answered_at,
        "answer": verdict.answer,
        "input_tokens": verdict.input_tokens,
        "output_tokens": verdict.output_tokens,
    }
    columns = list(values)
    source = select(*[literal(values[c], Verdict.__table__.c[c].type) for c in columns]).where(
        Tenant.id == verdict.tenant_id, Tenant.reuse.is_(True), Tenant.deleted_at.is_(None)
    )
    dialect = session.get_bind().dialect.name if isinstance(session, Session) else session.dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(Verdict).from_select(columns, source).on_conflict_do_nothing()
    result = session.execute(statement)
    return bool(cast("CursorResult[Any]", result).rowcount)


def delete_verdicts(session: Executor, job_id: uuid.UUID, limit: int) -> int:
    """Up to `limit` of the entries a job's requests left (the purge's batch, through `ix_verdicts_job`)."""
    batch = select(Verdict.key).where(Verdict.job_id == job_id).limit(limit)
    result = session.execute(
        delete(Verdict).where(Verdict.job_id == job_id, Verdict.key.in_(batch.scalar_subquery()))
    )
    return int(cast("CursorResult[Any]", result).rowcount)
