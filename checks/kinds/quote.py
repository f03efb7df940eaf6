"""The `quote` recipe (docs/spec.md §4): search once, rank each result's sentences, compare the candidates,
quote the one that answers (or say that none does).

Three stages: `question` (one Search call) → `result` (one rank request each) → `compare` (one request).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from checks.contracts import ReportHead
from checks.kinds._questions import QuestionLine, QuestionsSummary, rows_from_items, rows_from_lines
from checks.kinds._schemas import QUESTION_ROW, QUESTIONS_OPTIONS
from checks.options import parse_questions_options
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
)


class QuoteResult(QuestionLine):
    """A results line of a quote job: the quote (outcome `quoted`) or the closest candidate (`no_answer`)."""

    quote: dict[str, Any] | None = Field(default=None, description="The quoted sentence and its source.")
    closest: dict[str, Any] | None = Field(
        default=None, description="The closest candidate when no result answers."
    )


class QuoteSummary(QuestionsSummary):
    kind: Literal["quote"] = "quote"


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
        parse_options=parse_questions_options,
        rows_from_lines=rows_from_lines,
        rows_from_items=rows_from_items,
        result_line=QuoteResult,
        report=ReportHead,
        summary=QuoteSummary,
        csv_columns=CSV_COLUMNS,
        row_schema=QUESTION_ROW,
        options_schema=QUESTIONS_OPTIONS,
        schema_names=("QuestionRow", "QuestionsOptions"),
    )
)
