"""Which report a job gets and what its template receives, per kind.

The job page and the downloadable report file render the same report templates; `interactive`
says whether links back into the app (filters, pages, request lookup, the cutoff explorer) may be
drawn. The file has none: it must read the same wherever it is opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from models import Job
from web.pages_claims import PAGE_SIZE, SHOW_CHOICES, claims_report
from web.pages_questions import (
    ANSWER_LABELS,
    ANSWER_STATUSES,
    QUESTIONS_PAGE_SIZE,
    QUOTE_STATUSES,
    question_reports,
)


def report_context(
    session: Session, job: Job, args: Mapping[str, str], *, interactive: bool
) -> dict[str, Any] | None:
    """The report template and its data, or None for a kind without a report."""
    if job.kind == "claims":
        claims = claims_report(session, job, args, page_size=PAGE_SIZE if interactive else None)
        return {
            "template": "report_claims.html",
            "claims": claims,
            "show_choices": SHOW_CHOICES,
            "interactive": interactive,
            "input_error": claims.explorer.error,
        }
    if job.kind in ("answer", "quote"):
        questions = question_reports(
            session, job, args, page_size=QUESTIONS_PAGE_SIZE if interactive else None
        )
        return {
            "template": f"report_{job.kind}.html",
            "questions": questions,
            "summary": job.summary or {},
            "statuses": ANSWER_STATUSES if job.kind == "answer" else QUOTE_STATUSES,
            "labels": ANSWER_LABELS,
            "interactive": interactive,
            "input_error": None,
        }
    return None
