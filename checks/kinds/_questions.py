"""What the `answer` and `quote` recipes share: a row per question, the question options, the `question`
entry stage, and the common fields of their result lines and summaries. Not a kind itself (no `RECIPE`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict

from pydantic import Field, JsonValue

from checks import questions as rules
from checks.contracts import (
    Contract,
    ItemStatusName,
    ReportHead,
    RequestIds,
    ReusedFrom,
    StoredContract,
    Usage,
)
from checks.kinds._schemas import QUESTION_ROW, QUESTIONS_OPTIONS
from checks.ndjson import RowLine
from checks.options import QUESTIONS_OPTION_NAMES, parse_questions_options
from checks.recipes import KindOptions, RowLimits

ENTRY_STAGE = "question"


def rows_from_lines(lines: Iterable[RowLine], limits: RowLimits) -> Sequence[rules.QuestionRow]:
    return rules.parse_question_lines(lines, max_rows=limits.max_rows)


def rows_from_items(items: Sequence[object], limits: RowLimits) -> Sequence[rules.QuestionRow]:
    return rules.validate_question_rows(items, max_rows=limits.max_rows)


class QuestionRecipeParts(TypedDict):
    """The `Recipe` fields every question kind has alike, by their `Recipe` names and types."""

    parse_options: Callable[[Mapping[str, Any]], KindOptions]
    rows_from_lines: Callable[[Iterable[RowLine], RowLimits], Sequence[rules.QuestionRow]]
    rows_from_items: Callable[[Sequence[object], RowLimits], Sequence[rules.QuestionRow]]
    report: type[ReportHead]
    row_required: tuple[str, ...]
    row_fields: tuple[str, ...]
    option_names: frozenset[str]
    row_schema: Mapping[str, JsonValue]
    options_schema: Mapping[str, JsonValue]
    schema_names: tuple[str, str]


# The parts of a `Recipe` that every question kind has alike: rows, options, the report head and their
# schemas. Each question recipe spreads these and adds its own name, stages, contracts and CSV columns.
QUESTION_RECIPE_PARTS: QuestionRecipeParts = {
    "parse_options": parse_questions_options,
    "rows_from_lines": rows_from_lines,
    "rows_from_items": rows_from_items,
    "report": ReportHead,
    "row_required": ("id", "question"),
    "row_fields": rules.ALLOWED_FIELDS,
    "option_names": QUESTIONS_OPTION_NAMES,
    "row_schema": QUESTION_ROW,
    "options_schema": QUESTIONS_OPTIONS,
    "schema_names": ("QuestionRow", "QuestionsOptions"),
}


class QuestionLine(Contract):
    """One NDJSON line of GET /v1/jobs/{job_id}/results for a question kind: one question with its report
    (null until the question is finished)."""

    custom_id: str
    question: str | None = None
    status: ItemStatusName = Field(description="The question item's status (its first upstream call).")
    outcome: str | None = Field(default=None, description="The report's status.")
    incomplete_steps: list[dict[str, JsonValue]] = Field(
        default_factory=list, description="The report's `incomplete_steps`, as stored."
    )
    model_note: str | None = None
    request_ids: RequestIds = Field(default=None, description="Every upstream request id of the question.")
    usage: Usage | None = None
    report: ReportHead | None = Field(
        default=None,
        description="The full report: every scored sentence with its passages and probabilities (answer), "
        "every result, rank and compare probability and the run record (quote).",
    )
    reused_from: list[ReusedFrom] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="The question's Decisions requests answered from the tenant's verdict store instead of "
        "upstream (docs/spec.md §10), each original request once; absent when none was.",
    )


class QuestionsSummary(StoredContract):
    """Totals over a question job's reports."""

    kind: str
    questions: int
    outcomes: dict[str, int]
    incomplete_steps: dict[str, int] = Field(default_factory=dict)
    totals: dict[str, float]
    request_counts: dict[str, int] | None = None


def as_report(report: object) -> ReportHead | None:
    """A stored report as its contract (None when there is none yet)."""
    return ReportHead.model_validate(report) if isinstance(report, dict) else None


class ReportedLine(TypedDict):
    """The `QuestionLine` fields of a question whose report is stored, as keyword arguments."""

    custom_id: str
    question: str | None
    status: ItemStatusName
    outcome: str | None
    incomplete_steps: list[dict[str, JsonValue]]
    model_note: str | None
    request_ids: RequestIds
    usage: Usage | None
    report: ReportHead


def reported_line(
    custom_id: str, question: str | None, status: ItemStatusName, head: ReportHead
) -> ReportedLine:
    """What every question kind's results line takes from the report's head; each kind adds its own."""
    return {
        "custom_id": custom_id,
        "question": question,
        "status": status,
        "outcome": head.status,
        "incomplete_steps": [s.dump() for s in head.incomplete_steps],
        "model_note": head.model_note,
        "request_ids": head.request_ids,
        "usage": head.usage,
        "report": head,
    }
