"""`echo`, the web part (web/kinds/): a CSV row per row; its report page is the job overview alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from models import Job
from tests.kinds.echo_checks import RECIPE, EchoResult
from web.csv_exports import csv_renderer
from web.kinds import WebKind, register


def row(record: EchoResult) -> tuple[str, str, str]:
    return (record.custom_id, record.status, record.echoed or "")


csv = csv_renderer(RECIPE.csv_columns, row)  # header first, the `#end,<N>` row last


def report(session: Session, job: Job, args: Mapping[str, str], interactive: bool) -> dict[str, Any] | None:
    return None


KIND = register(WebKind("echo", csv=csv, report=report))
