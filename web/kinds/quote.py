"""The `quote` kind's pages and downloads: a CSV row per question with its quote, the quote report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from models import Job
from web.csv_exports import quotes_csv
from web.kinds import WebKind, register
from web.pages_questions import ANSWER_LABELS, QUESTIONS_PAGE_SIZE, QUOTE_STATUSES, question_reports


def report(session: Session, job: Job, args: Mapping[str, str], interactive: bool) -> dict[str, Any]:
    questions = question_reports(session, job, args, page_size=QUESTIONS_PAGE_SIZE if interactive else None)
    return {
        "template": "report_quote.html",
        "questions": questions,
        "summary": job.summary or {},
        "statuses": QUOTE_STATUSES,
        "labels": ANSWER_LABELS,
        "interactive": interactive,
        "input_error": None,
    }


KIND = register(WebKind("quote", csv=quotes_csv, report=report))
