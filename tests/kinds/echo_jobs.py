"""`echo`, the state-changing part (jobs/kinds/): an item per row; summary and result lines from them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobs.intake import UnitSpec
from jobs.keyset import Cursor, page_rows
from jobs.kinds import JobKind, register
from models import Item, Job
from tests.kinds.echo_checks import EchoOptions, EchoResult, EchoRow, EchoSummary


def units(rows: Sequence[EchoRow], options: EchoOptions) -> tuple[list[UnitSpec], list[str]]:
    return [UnitSpec(stage="echo", custom_id=r.id, mode="", input={"text": r.text}) for r in rows], []


def _line(custom_id: str, status: str, input_: dict[str, Any], output: dict[str, Any] | None) -> EchoResult:
    return EchoResult(
        custom_id=custom_id, status=status, text=input_["text"], echoed=(output or {}).get("echoed")
    )


def results_page(session: Session, job: Job, after: Cursor, limit: int) -> list[tuple[Cursor, EchoResult]]:
    """The result lines after the keyset cursor, a chunk at a time (web/exports.py reads them)."""
    columns = (Item.position, Item.id, Item.custom_id, Item.status, Item.input, Item.output)
    rows = page_rows(session, job.id, columns, after=after, limit=limit)
    return [
        ((pos, item_id), _line(cid, status, input_, output))
        for pos, item_id, cid, status, input_, output in rows
    ]


def summarize(session: Session, job: Job) -> EchoSummary:
    rows = session.execute(
        select(Item.custom_id, Item.status, Item.input, Item.output).where(Item.job_id == job.id)
    ).all()
    lines = [_line(*row) for row in rows]
    return EchoSummary(rows=len(lines), echoed=sum(1 for line in lines if line.echoed is not None))


KIND = register(JobKind("echo", units=units, summarize=summarize, results_page=results_page))
