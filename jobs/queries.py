"""Tenant-scoped reads: a job, a page of jobs, a request id. Another tenant's rows are invisible."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, TypedDict

from pydantic import JsonValue
from sqlalchemy import bindparam, select, tuple_
from sqlalchemy.orm import Session, defer

from jobs.keyset import page_rows
from jobs.source_lists import SourceLists
from models import ApiCall, Item, Job


def parse_job_id(raw: str) -> uuid.UUID | None:
    """A job id from a URL, or None when it is not a UUID (treated as not found)."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


# Built once (every job request reads it: the status poll many times a second). A deleted job is gone for
# its tenant at once, though the purge removes its rows later (jobs/purge.py).
_TENANTS_JOB = select(Job).where(
    Job.id == bindparam("job_id"), Job.tenant_id == bindparam("tenant_id"), Job.deleted_at.is_(None)
)


def get_job(session: Session, tenant_id: uuid.UUID, job_id: uuid.UUID | str) -> Job | None:
    """The tenant's job, or None (also for another tenant's job: that is a 404, not a 403)."""
    jid = job_id if isinstance(job_id, uuid.UUID) else parse_job_id(job_id)
    if jid is None:
        return None
    return session.scalar(_TENANTS_JOB, {"job_id": jid, "tenant_id": tenant_id})


def list_jobs(
    session: Session,
    tenant_id: uuid.UUID,
    *,
    limit: int = 50,
    kind: str | None = None,
    status: str | None = None,
    with_summary: bool = True,
) -> list[Job]:
    """The tenant's newest jobs first. Without `with_summary` the (possibly large) stored report summary is
    not loaded: the jobs page shows counts, cost and times, never the summary."""
    stmt = select(Job).where(Job.tenant_id == tenant_id, Job.deleted_at.is_(None))
    if not with_summary:
        stmt = stmt.options(defer(Job.summary, raiseload=True))
    if kind:
        stmt = stmt.where(Job.kind == kind)
    if status:
        stmt = stmt.where(Job.status == status)
    return list(session.scalars(stmt.order_by(Job.created_at.desc()).limit(max(1, min(limit, 500)))))


class CallView(TypedDict):
    """One `api_calls` row as the request lookup shows it (`GET /v1/requests/{id}`, the lookup page)."""

    request_id: str | None
    endpoint: str
    model: str | None
    attempt: int
    status_code: int | None
    latency_ms: float
    input_tokens: int
    output_tokens: int
    searches: int
    search_results: int
    cost_usd: float
    error: str | None
    created_at: str
    # The answer was taken from the verdict store: this job reused the request of the first row (the one
    # that was sent), at no cost.
    reused: bool


class ItemView(TypedDict):
    """An item a looked-up call answered. Its input and output are the kind's own JSON, as stored (validated
    by the kind's contracts when written)."""

    id: int
    custom_id: str
    mode: str
    stage: str
    status: str
    input: dict[str, JsonValue]
    output: dict[str, JsonValue] | None
    error: str | None


@dataclass(frozen=True)
class RequestLookup:
    """What support needs for one upstream request id: the call, its item and its job."""

    call: CallView
    job_id: uuid.UUID
    job_kind: str
    job_status: str
    item: ItemView | None
    # Every item the call answered: the item alone, or each item of a packed request (docs/spec.md §9).
    items: list[ItemView]


def lookup_request(session: Session, tenant_id: uuid.UUID, request_id: str) -> list[RequestLookup]:
    """Every call of this tenant with that upstream `x-request-id` (normally one; then one `reused` row per
    later job answered from it, in the order they happened)."""
    rows = session.execute(
        select(ApiCall, Job.kind, Job.status)
        .join(Job, Job.id == ApiCall.job_id)
        .where(ApiCall.request_id == request_id, ApiCall.tenant_id == tenant_id, Job.deleted_at.is_(None))
        .order_by(ApiCall.id)
    ).all()
    out: list[RequestLookup] = []
    for call, kind, status in rows:
        item = session.get(Item, call.item_id) if call.item_id is not None else None
        packed: list[Item] = []
        if call.pack_items:
            packed = list(
                session.scalars(
                    select(Item)
                    .where(Item.job_id == call.job_id, Item.id.in_([int(i) for i in call.pack_items]))
                    .order_by(Item.id)
                )
            )
        answered = packed or ([item] if item is not None else [])
        out.append(
            RequestLookup(
                call={
                    "request_id": call.request_id,
                    "endpoint": call.endpoint,
                    "model": call.model,
                    "attempt": call.attempt,
                    "status_code": call.status_code,
                    "latency_ms": round(call.latency_ms, 1),
                    "input_tokens": call.input_tokens,
                    "output_tokens": call.output_tokens,
                    "searches": call.searches,
                    "search_results": call.search_results,
                    "cost_usd": call.cost_usd,
                    "error": call.error,
                    "created_at": call.created_at.isoformat(),
                    "reused": bool(call.reused),
                },
                job_id=call.job_id,
                job_kind=kind,
                job_status=status,
                item=None if item is None else _item_view(session, item),
                items=[_item_view(session, i) for i in answered],
            )
        )
    return out


def _item_view(session: Session, item: Item) -> ItemView:
    return {
        "id": item.id,
        "custom_id": item.custom_id,
        "mode": item.mode,
        "stage": item.stage,
        "status": item.status,
        "input": item.input,
        # A claim's sources back in place (jobs/source_lists.py), by its own job's id.
        "output": SourceLists(session, item.job_id).joined(item.output),
        "error": item.error,
    }


class UnsuccessfulItem(TypedDict):
    """A failed or skipped item as the errors export lists it (`GET /v1/jobs/{id}/errors`, a line each)."""

    custom_id: str
    mode: str
    stage: str
    position: int
    status: str
    error: str | None
    attempts: int
    request_ids: list[str]


@dataclass(frozen=True)
class QuestionPage:
    """One page of an answer or quote job's questions (entries as jobs.stages.iter_question_reports gives
    them) and the keyset cursor of the next page, "<position>:<item id>" of its last question, or None."""

    entries: list[dict[str, Any]]
    next_after: str | None


def parse_question_cursor(raw: str | None) -> tuple[int, int] | None:
    """`after=<position>:<item id>` from a page link, or None for the first page (and for junk)."""
    pos, sep, item_id = (raw or "").partition(":")
    if not sep or not pos.lstrip("-").isdigit() or not item_id.isdigit():
        return None
    return int(pos), int(item_id)


def question_page(session: Session, job: Job, *, after: tuple[int, int] | None, limit: int) -> QuestionPage:
    """The `limit` questions after the cursor, in input order: keyset on (position, id) through the
    (job_id, position) index, so page N reads what page 1 reads, never the reports before it."""
    stmt = select(
        Item.id, Item.custom_id, Item.input, Item.status, Item.output["report"], Item.position
    ).where(Item.job_id == job.id, Item.parent_id.is_(None))
    if after is not None:
        stmt = stmt.where(tuple_(Item.position, Item.id) > tuple_(after[0], after[1]))
    rows = session.execute(stmt.order_by(Item.position, Item.id).limit(limit + 1)).all()
    entries = [
        {
            "custom_id": cid,
            "question": (input_ or {}).get("question"),
            "item_id": int(item_id),
            "status": status,
            "report": report,
        }
        for item_id, cid, input_, status, report, _pos in rows[:limit]
    ]
    next_after = None
    if len(rows) > limit:
        last = rows[limit - 1]
        next_after = f"{int(last[5])}:{int(last[0])}"
    return QuestionPage(entries=entries, next_after=next_after)


def unsuccessful_items_page(
    session: Session, job: Job, after: tuple[int, int], limit: int
) -> list[tuple[tuple[int, int], UnsuccessfulItem]]:
    """Failed and skipped items in input order after the keyset cursor `after` (position, id), at most
    `limit` items, each with its cursor: one short query, for exports read in chunks (web/exports.py). The
    caller has already resolved `job` through `get_job`, which scopes it to the tenant."""
    columns = (
        Item.position,
        Item.id,
        Item.custom_id,
        Item.mode,
        Item.stage,
        Item.status,
        Item.attempts,
        Item.error,
        Item.output,
    )
    rows = page_rows(
        session, job.id, columns, after=after, limit=limit, where=(Item.status.in_(("failed", "skipped")),)
    )
    page: list[tuple[tuple[int, int], UnsuccessfulItem]] = []
    for position, item_id, custom_id, mode, stage, status, attempts, error, output in rows:
        o = output or {}
        request_ids = o.get("request_ids") or ([o["request_id"]] if o.get("request_id") else [])
        line: UnsuccessfulItem = {
            "custom_id": custom_id,
            "mode": mode,
            "stage": stage,
            "position": position,
            "status": status,
            "error": error,
            "attempts": attempts,
            "request_ids": request_ids,
        }
        page.append(((position, item_id), line))
    return page


def result_cursor(session: Session, job: Job, custom_id: str) -> tuple[int, int] | None:
    """The keyset cursor just past the submitted row `custom_id` (its last top-level item), or None when
    the job has no such row: how an export resumes with `?after=<id>`."""
    row = session.execute(
        select(Item.position, Item.id)
        .where(Item.job_id == job.id, Item.custom_id == custom_id, Item.parent_id.is_(None))
        .order_by(Item.position.desc(), Item.id.desc())
        .limit(1)
    ).first()
    return None if row is None else (int(row[0]), int(row[1]))
