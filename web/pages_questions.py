"""The `answer` and `quote` reports: one stored report per question (jobs.stages), shown a page at a time.

Pages are found by keyset (`after=<position>:<item id>` of the previous page's last question), so a page
reads only its own questions' reports however deep it is; the page number in the link is for the reader.

Reports are read exactly as stored (their shape: docs/spec.md §6, built by
jobs/answers.py and jobs/quotes.py); the templates only arrange them, and cope with missing parts —
a failed question has no final answer, a failed search has no results, an unfinished question has
no report at all. An incomplete question is never shown as checked or quoted: its page says which
steps did not run, and shows what was done so far under that heading.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from checks.kinds._questions import QuestionsSummary
from checks.options import CUTOFFS_MODEL, cutoffs_model_note
from checks.pricing import DEFAULT_MODEL
from jobs.queries import parse_question_cursor, question_page
from jobs.stages import iter_question_reports
from models import Job

QUESTIONS_PAGE_SIZE = 20

# Report statuses → (badge style, symbol, words); what the templates show for each.
ANSWER_STATUSES = {
    "done": ("b-ok", "✓", "checked"),
    "failed": ("b-bad", "✗", "failed"),
    "skipped": ("b-neutral", "–", "skipped"),
    "incomplete": ("b-warn", "◐", "incomplete"),
}
QUOTE_STATUSES = {
    "quoted": ("b-ok", "✓", "quoted"),
    "no_answer": ("b-neutral", "∅", "no answer"),
    "failed": ("b-bad", "✗", "failed"),
    "skipped": ("b-neutral", "–", "skipped"),
    "incomplete": ("b-warn", "◐", "incomplete"),
}
ANSWER_LABELS = ("supported", "weak", "unsupported", "contradicted", "uncited", "not_checkable")


@dataclass
class QuestionsReport:
    """A page of question entries (or, for the report file, all of them, streamed)."""

    total: int
    page: int
    pages: int
    page_size: int
    entries: list[dict[str, Any]] | Iterator[dict[str, Any]] = field(default_factory=list)
    model: str = CUTOFFS_MODEL  # the job's Decisions model
    model_note: str | None = None  # set when the job did not use the model the cutoffs were measured on
    # Keyset paging (jobs.queries.question_page): the next page's cursor, and whether this is the first page.
    next_after: str | None = None
    first: bool = True


def _question_count(job: Job) -> int:
    """From the finalized summary (its contract), else the items intake created."""
    if job.summary:
        try:
            return QuestionsSummary.model_validate(job.summary).questions
        except ValidationError:
            pass  # a summary of another shape (a failed finalize wrote none): count the items
    return int(job.total_items or 0)


def _job_model(job: Job) -> tuple[str, str | None]:
    """The job's model and, when it is not the one the cutoffs were measured on, the note saying so.

    Read from the job's options, so the note also shows before any report exists and on jobs whose
    reports predate it. A job stored without a model used what the workers fall back to, DEFAULT_MODEL
    (intake always stores one)."""
    model = str((job.options or {}).get("model") or DEFAULT_MODEL)
    return model, cutoffs_model_note(model)


def question_reports(
    session: Session, job: Job, args: Mapping[str, str], *, page_size: int | None = QUESTIONS_PAGE_SIZE
) -> QuestionsReport:
    """One page of `iter_question_reports`, or with `page_size` None all of them, lazily."""
    total = _question_count(job)
    model, model_note = _job_model(job)
    if page_size is None:
        return QuestionsReport(
            total=total,
            page=1,
            pages=1,
            page_size=total,
            entries=iter_question_reports(session, job),
            model=model,
            model_note=model_note,
        )
    pages = max(1, math.ceil(total / page_size))
    try:
        page = min(max(1, int(args.get("page", "1") or "1")), pages)
    except ValueError:
        page = 1
    cursor = parse_question_cursor(args.get("after"))
    if cursor is None:
        page = 1
    found = question_page(session, job, after=cursor, limit=page_size)
    return QuestionsReport(
        total=total,
        page=page,
        pages=pages,
        page_size=page_size,
        entries=found.entries,
        model=model,
        model_note=model_note,
        next_after=found.next_after,
        first=cursor is None,
    )


def questions_report_context(
    session: Session,
    job: Job,
    args: Mapping[str, str],
    interactive: bool,
    *,
    template: str,
    statuses: Mapping[str, tuple[str, str, str]],
) -> dict[str, object]:
    """The report page's context of a kind whose report is a page of questions (answer, quote): its
    `template` and the names of its questions' `statuses`; all of them at once when not `interactive`."""
    questions = question_reports(session, job, args, page_size=QUESTIONS_PAGE_SIZE if interactive else None)
    return {
        "template": template,
        "questions": questions,
        "summary": job.summary or {},
        "statuses": statuses,
        "labels": ANSWER_LABELS,
        "interactive": interactive,
        "input_error": None,
    }
