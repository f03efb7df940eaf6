"""Item state changes: claim with a lease, finish, fail, release for a later retry, skip.

Every change is a conditional UPDATE, so a message delivered twice, a worker killed mid-task or a
sweeper re-driving an expired lease can never store two results for one item: only the holder of
the current lease token (`attempts`) may write, and only a `pending` item can be claimed.
Results, `api_calls` rows and the status change are written in one transaction by the caller's
session (the caller commits).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import exists, insert, select, update
from sqlalchemy.orm import Session

from jobs.records import CallRow, ClaimedItem
from models import ApiCall, Item, Job, utcnow

CANCELLED_ERROR = "job cancelled"


# Job id -> (tenant id, options). Both are fixed at intake, so a worker reads them once per job.
_JOB_STATIC: dict[uuid.UUID, tuple[uuid.UUID, dict[str, Any]]] = {}
_JOB_STATIC_MAX = 1_024
_LIVE_JOB = exists().where(Job.id == Item.job_id, Job.status.not_in(("cancelling", "cancelled")))


def _job_static(session: Session, job_id: uuid.UUID) -> tuple[uuid.UUID, dict[str, Any]]:
    hit = _JOB_STATIC.get(job_id)
    if hit is None:
        tenant_id, options = session.execute(select(Job.tenant_id, Job.options).where(Job.id == job_id)).one()
        if len(_JOB_STATIC) >= _JOB_STATIC_MAX:
            _JOB_STATIC.clear()
        hit = _JOB_STATIC[job_id] = (tenant_id, options)
    return hit


def claim_item(session: Session, item_id: int, lease_s: float) -> ClaimedItem | None:
    """Take a pending item for this worker, or None if it is not pending (already done, running, ...).

    One conditional UPDATE does the claim (this runs once per upstream request, so round trips count).
    An item of a job that is being cancelled is skipped instead of claimed.
    """
    now = utcnow()
    claimed = session.execute(
        update(Item)
        .where(Item.id == item_id, Item.status == "pending", _LIVE_JOB)
        .values(
            status="running",
            attempts=Item.attempts + 1,
            lease_until=now + timedelta(seconds=lease_s),
        )
        .returning(
            Item.job_id, Item.attempts, Item.stage, Item.mode, Item.custom_id, Item.input, Item.dedupe_key
        )
    ).first()
    if claimed is None:
        session.execute(
            update(Item)
            .where(Item.id == item_id, Item.status == "pending", ~_LIVE_JOB)
            .values(status="skipped", error=CANCELLED_ERROR, finished_at=now)
        )
        return None
    job_id, attempts, stage, mode, custom_id, input_, dedupe_key = claimed
    tenant_id, options = _job_static(session, job_id)
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
    )


def record_calls(session: Session, item: ClaimedItem, calls: Sequence[CallRow]) -> None:
    """Store one `api_calls` row per HTTP attempt (they happened, whatever becomes of the item)."""
    if not calls:
        return
    session.execute(
        insert(ApiCall),
        [
            {
                "tenant_id": item.tenant_id,
                "job_id": item.job_id,
                "item_id": item.id,
                "endpoint": c.endpoint,
                "model": c.model,
                "attempt": c.attempt,
                "status_code": c.status_code,
                "request_id": c.request_id,
                "latency_ms": c.latency_ms,
                "input_tokens": c.input_tokens,
                "output_tokens": c.output_tokens,
                "searches": c.searches,
                "search_results": c.search_results,
                "cost_usd": c.cost_usd,
                "error": c.error,
                "created_at": utcnow(),
            }
            for c in calls
        ],
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
    now = utcnow()
    result = session.execute(
        update(Item)
        .where(Item.id == item.id, Item.status == "running", Item.attempts == item.token)
        .values(status=status, output=output, error=error, lease_until=None, finished_at=now)
    )
    if not getattr(result, "rowcount", 0):
        return False  # our lease was taken over; the new holder writes the result
    if item.dedupe_key is not None:
        session.execute(
            update(Item)
            .where(
                Item.job_id == item.job_id,
                Item.dedupe_key == item.dedupe_key,
                Item.duplicate_of == item.id,
                Item.status == "pending",
            )
            .values(status=status, output=output, error=error, finished_at=now)
        )
    return True


def finish_item(
    session: Session, item: ClaimedItem, output: dict[str, Any], calls: Sequence[CallRow] = ()
) -> bool:
    """Store a result. False when the lease was lost (the result is discarded, the calls are kept)."""
    record_calls(session, item, calls)
    return _settle(session, item, status="done", output=output, error=None)


def fail_item(
    session: Session,
    item: ClaimedItem,
    error: str,
    calls: Sequence[CallRow] = (),
    output: dict[str, Any] | None = None,
) -> bool:
    """Record a final failure with its error (and any partial output)."""
    record_calls(session, item, calls)
    return _settle(session, item, status="failed", output=output, error=error)


def skip_item(session: Session, item: ClaimedItem, reason: str) -> bool:
    """Give up on an item without calling upstream (budget reached, job cancelled)."""
    return _settle(session, item, status="skipped", output=None, error=reason)


def release_item(session: Session, item: ClaimedItem, error: str, calls: Sequence[CallRow] = ()) -> bool:
    """Hand a held item back to `pending` for a later retry; the error stays visible meanwhile."""
    record_calls(session, item, calls)
    result = session.execute(
        update(Item)
        .where(Item.id == item.id, Item.status == "running", Item.attempts == item.token)
        .values(status="pending", lease_until=None, error=error, enqueued_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))
