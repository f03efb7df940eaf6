"""Job progress from item counts (the job row is not rewritten per item: it would be a hot row)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import Item


@dataclass(frozen=True)
class RequestCounts:
    """Counts by item status; `completed` means done."""

    total: int
    completed: int
    failed: int
    skipped: int
    pending: int
    running: int

    @property
    def terminal(self) -> int:
        return self.completed + self.failed + self.skipped

    @property
    def all_terminal(self) -> bool:
        return self.pending == 0 and self.running == 0

    def as_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "completed": self.completed,
            "failed": self.failed,
            "skipped": self.skipped,
            "pending": self.pending,
            "running": self.running,
        }


def request_counts(session: Session, job_id: uuid.UUID) -> RequestCounts:
    """Count the job's items by status through the (job_id, status) index."""
    rows = session.execute(
        select(Item.status, func.count()).where(Item.job_id == job_id).group_by(Item.status)
    ).all()
    by = {status: int(n) for status, n in rows}
    return RequestCounts(
        total=sum(by.values()),
        completed=by.get("done", 0),
        failed=by.get("failed", 0),
        skipped=by.get("skipped", 0),
        pending=by.get("pending", 0),
        running=by.get("running", 0),
    )
