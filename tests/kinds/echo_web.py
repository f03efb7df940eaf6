"""`echo`, the web part (web/kinds/): a CSV row per row; its report page is the job overview alone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy.orm import Session

from models import Job
from tests.kinds.echo_checks import RECIPE, EchoResult
from web.csv_safety import SafeCsv
from web.kinds import WebKind, register


def csv(records: Iterator[EchoResult]) -> Iterator[str]:
    out = SafeCsv()
    out.row(RECIPE.csv_columns)
    for record in records:
        out.row((record.custom_id, record.status, record.echoed or ""))
        yield out.take()
    yield out.take()


def report(session: Session, job: Job, args: Mapping[str, str], interactive: bool) -> dict[str, Any] | None:
    return None


KIND = register(WebKind("echo", csv=csv, report=report))
