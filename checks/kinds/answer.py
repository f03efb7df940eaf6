"""The `answer` recipe (docs/spec.md §3): ask the Agent API, score every sentence against its sources with
Decisions requests, investigate and rewrite the weak ones, report the checked answer.

Three stages: `question` (one Agent call) → `sentence` (one Decisions request each) → `investigation` (one
Agent call plus a Decisions request per rewritten sentence).
"""

from __future__ import annotations

from typing import Literal

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
    "final_answer",
    "request_ids",
    "incomplete_steps",
    "partial_answer",
    "model_note",
)


class AnswerResult(QuestionLine):
    """A results line of an answer job. `final_answer` only when every step ran (outcome `done`); an
    incomplete question's sentences so far are in `partial_answer`."""

    final_answer: str | None = Field(
        default=None, description="The answer after review, citations renumbered by URL."
    )
    partial_answer: str | None = None


class AnswerSummary(QuestionsSummary):
    kind: Literal["answer"] = "answer"
    before: dict[str, int] = Field(default_factory=dict, description="Sentence labels before review.")
    after: dict[str, int] = Field(default_factory=dict, description="Sentence labels after review.")


RECIPE = register(
    Recipe(
        name="answer",
        title="Answer check",
        order=2,
        stages=(
            StageSpec("question", "agent"),
            StageSpec("sentence", "decisions"),
            StageSpec("investigation", "agent"),
        ),
        parse_options=parse_questions_options,
        rows_from_lines=rows_from_lines,
        rows_from_items=rows_from_items,
        result_line=AnswerResult,
        report=ReportHead,
        summary=AnswerSummary,
        csv_columns=CSV_COLUMNS,
        row_schema=QUESTION_ROW,
        options_schema=QUESTIONS_OPTIONS,
        schema_names=("QuestionRow", "QuestionsOptions"),
    )
)
