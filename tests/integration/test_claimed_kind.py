"""Claiming an item gives the worker its job's kind (`ClaimedItem.kind`, jobs/items.py), so the handler of a
stage several kinds share is the job's kind's."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.orm import Session

from jobs.items import claim_item
from jobs.records import ClaimedItem
from jobs.tenancy import get_or_create_tenant
from models import Item, Job
from workers.kinds import handler_for
from workers.quotes import handle_quote_question

pytestmark = pytest.mark.integration


def test_a_claimed_question_carries_its_jobs_kind(db: Session) -> None:
    tenant = get_or_create_tenant(db, f"t-{uuid.uuid4().hex[:10]}")
    job = Job(tenant_id=tenant.id, kind="quote", status="in_progress", options={}, total_items=1)
    db.add(job)
    db.flush()
    # The input names another kind: the job's decides.
    item = Item(
        job_id=job.id, stage="question", position=0, custom_id="q1", mode="", endpoint="search",
        input={"kind": "answer", "question": "How many bones?"}, status="pending", attempts=0,
    )  # fmt: skip
    db.add(item)
    db.flush()
    claimed = claim_item(db, item.id, 300)
    assert isinstance(claimed, ClaimedItem)
    assert claimed.kind == "quote"
    assert handler_for(claimed) is handle_quote_question
