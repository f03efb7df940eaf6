"""The `quote` kind's pages and downloads: a CSV row per question with its quote, the quote report."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.orm import Session

from models import Job
from web.csv_exports import quotes_csv
from web.kinds import WebKind, register
from web.pages_questions import QUOTE_STATUSES, questions_report_context


def report(session: Session, job: Job, args: Mapping[str, str], interactive: bool) -> dict[str, object]:
    return questions_report_context(
        session, job, args, interactive, template="report_quote.html", statuses=QUOTE_STATUSES
    )


KIND = register(WebKind("quote", csv=quotes_csv, report=report))
