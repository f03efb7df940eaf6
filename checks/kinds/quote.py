"""The `quote` recipe (docs/spec.md §4): search once, rank each result's sentences, compare the candidates,
quote the one that answers (or say that none does).

Three stages: `question` (one Search call) → `result` (one rank request each) → `compare` (one request).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field

from checks.contracts import ItemStatusName, reused_in
from checks.kinds._questions import (
    QUESTION_RECIPE_PARTS,
    QuestionLine,
    QuestionsSummary,
    as_report,
    reported_line,
)
from checks.recipes import Recipe, StageSpec, register

CSV_COLUMNS = (
    "custom_id",
    "question",
    "status",
    "outcome",
    "quote",
    "title",
    "url",
    "date",
    "p_answers",
    "has_answer",
    "closest",
    "closest_p_answers",
    "request_ids",
    "incomplete_steps",
    "model_note",
    "reused_from",
)


class QuoteResult(QuestionLine):
    """A results line of a quote job: the quote (outcome `quoted`) or the closest candidate (`no_answer`)."""

    quote: dict[str, Any] | None = Field(default=None, description="The quoted sentence and its source.")
    closest: dict[str, Any] | None = Field(
        default=None, description="The closest candidate when no result answers."
    )


class QuoteSummary(QuestionsSummary):
    kind: Literal["quote"] = "quote"


# --- job summary and results lines (pure: over stored reports) ------------------------------------------

SUMMARY_TOTALS = (
    "decisions_requests",
    "reused_requests",
    "failed_requests",
    "search_requests",
    "input_tokens",
    "seconds",
)
OUTCOMES = ("quoted", "no_answer", "failed", "skipped", "incomplete")


def summarize_job(reports: Iterable[tuple[str | None, Mapping[str, Any] | None]]) -> QuoteSummary:
    """Totals over every question: (report status, report summary) pairs.

    `incomplete_steps` counts the steps that did not run to the end, by step name, over every incomplete
    question.
    """
    outcomes = dict.fromkeys(OUTCOMES, 0)
    totals: dict[str, float] = dict.fromkeys(SUMMARY_TOTALS, 0)
    steps: dict[str, int] = {}
    questions = 0
    for status, summary in reports:
        questions += 1
        if status is not None:
            outcomes[status] = outcomes.get(status, 0) + 1
        for name in SUMMARY_TOTALS:
            totals[name] += (summary or {}).get(name) or 0
        for step, n in ((summary or {}).get("incomplete_steps") or {}).items():
            steps[step] = steps.get(step, 0) + int(n)
    return QuoteSummary(
        questions=questions,
        outcomes=outcomes,
        incomplete_steps=steps,
        totals={k: (round(float(v), 1) if k == "seconds" else int(v)) for k, v in totals.items()},
    )


def result_line(
    custom_id: str, question: str, status: ItemStatusName, report: Mapping[str, Any] | None
) -> QuoteResult:
    """One results-export line: the quote (or, with no answer, the closest candidate) with its source, and
    the report. An incomplete question has neither, and names its missing steps."""
    head = as_report(report)
    if report is None or head is None:
        return QuoteResult(custom_id=custom_id, question=question, status=status)
    return QuoteResult(
        **reported_line(custom_id, question, status, head),
        quote=report.get("quote") if head.status == "quoted" else None,
        closest=report.get("closest") if head.status == "no_answer" else None,
        reused_from=reused_in([*(report.get("results") or []), report.get("compare")]),
    )


RECIPE = register(
    Recipe(
        name="quote",
        title="Quote finder",
        order=3,
        stages=(
            StageSpec("question", "search"),
            StageSpec("result", "decisions"),
            StageSpec("compare", "decisions"),
        ),
        result_line=QuoteResult,
        summary=QuoteSummary,
        csv_columns=CSV_COLUMNS,
        **QUESTION_RECIPE_PARTS,
        description="find a quoted source for each question",
    )
)
