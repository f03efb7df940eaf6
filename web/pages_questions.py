"""The `answer` and `quote` reports: one stored report per question (jobs.flows), shown a page at a time.

Reports are read exactly as stored (their shape: docs/spec.md §6, built by
jobs/answers.py and jobs/quotes.py); the templates only arrange them, and cope with missing parts —
a failed question has no final answer, a failed search has no results, an unfinished question has
no report at all.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from jobs.flows import iter_question_reports
from models import Job

QUESTIONS_PAGE_SIZE = 20

# Report statuses → (badge style, symbol, words); what the templates show for each.
ANSWER_STATUSES = {
    "done": ("b-ok", "✓", "checked"),
    "failed": ("b-bad", "✗", "failed"),
    "skipped": ("b-neutral", "–", "skipped"),
    "incomplete": ("b-warn", "…", "incomplete"),
}
QUOTE_STATUSES = {
    "quoted": ("b-ok", "✓", "quoted"),
    "no_answer": ("b-neutral", "∅", "no answer"),
    "failed": ("b-bad", "✗", "failed"),
    "skipped": ("b-neutral", "–", "skipped"),
    "incomplete": ("b-warn", "…", "incomplete"),
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


def _question_count(job: Job) -> int:
    summary = job.summary or {}
    n = summary.get("questions")
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    return int(job.total_items or 0)


def question_reports(
    session: Session, job: Job, args: Mapping[str, str], *, page_size: int | None = QUESTIONS_PAGE_SIZE
) -> QuestionsReport:
    """One page of `iter_question_reports`, or with `page_size` None all of them, lazily."""
    total = _question_count(job)
    if page_size is None:
        return QuestionsReport(
            total=total, page=1, pages=1, page_size=total, entries=iter_question_reports(session, job)
        )
    pages = max(1, math.ceil(total / page_size))
    try:
        page = min(max(1, int(args.get("page", "1") or "1")), pages)
    except ValueError:
        page = 1
    stream = iter_question_reports(session, job)
    try:
        start = (page - 1) * page_size
        entries = list(itertools.islice(stream, start, start + page_size))
    finally:
        close = getattr(stream, "close", None)  # a generator: closing it closes its server-side cursor
        if close is not None:
            close()
    return QuestionsReport(total=total, page=page, pages=pages, page_size=page_size, entries=entries)
