"""What intake stores for a job's items, as rows that compare across two jobs (tests of the intake paths)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import aliased

from models import Item
from tests.integration.web_fixtures import WebEnv

# Positions in an `item_rows` row that tests read.
DEDUPE_KEY = 9
LEADER_ID = 10


def item_rows(web: WebEnv, job_id: str) -> list[tuple[Any, ...]]:
    """Every stored field of a job's items that intake sets, in position order; a repeat names its leader
    by (custom_id, mode), so two jobs compare though their item ids differ."""
    leader = aliased(Item)
    with web.sessions() as s:
        rows = s.execute(
            select(
                Item.stage,
                Item.position,
                Item.custom_id,
                Item.mode,
                Item.endpoint,
                Item.input,
                Item.status,
                Item.attempts,
                Item.tries,
                Item.dedupe_key,
                leader.custom_id,
                leader.mode,
                Item.parent_id,
                Item.enqueued_at,
            )
            .outerjoin(leader, leader.id == Item.duplicate_of)
            .where(Item.job_id == uuid.UUID(job_id))
            .order_by(Item.position)
        ).all()
    return [tuple(r) for r in rows]
