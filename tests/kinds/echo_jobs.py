"""`echo`, the state-changing part (jobs/kinds/): an item per row; summary and result lines from them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobs.intake import UnitSpec
from jobs.kinds import JobKind, register
from models import Item, Job
from tests.kinds.echo_checks import EchoOptions, EchoResult, EchoRow, EchoSummary


def units(rows: Sequence[EchoRow], options: EchoOptions) -> tuple[list[UnitSpec], list[str]]:
    return [UnitSpec(stage="echo", custom_id=r.id, mode="", input={"text": r.text}) for r in rows], []


def results(session: Session, job: Job) -> Iterator[EchoResult]:
    rows = session.execute(
        select(Item.custom_id, Item.status, Item.input, Item.output)
        .where(Item.job_id == job.id)
        .order_by(Item.position)
    )
    for custom_id, status, input_, output in rows:
        yield EchoResult(
            custom_id=custom_id, status=status, text=input_["text"], echoed=(output or {}).get("echoed")
        )


def summarize(session: Session, job: Job) -> EchoSummary:
    lines = list(results(session, job))
    return EchoSummary(rows=len(lines), echoed=sum(1 for line in lines if line.echoed is not None))


KIND = register(JobKind("echo", units=units, summarize=summarize, results=results))
