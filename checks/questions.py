"""Input rows of `answer` and `quote` jobs: one question per row, `{"id": "q1", "question": "..."}`.

Validated all or nothing, like claims (docs/spec.md §2's rule carries over): every bad row is named by its
line (NDJSON) or item (JSON array) and a batch with any bad row stores nothing. Problems are `RowError`s in a
`QuestionsValidationError`, a `ClaimsValidationError`, so the intake API reports them the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from checks.claims import ClaimsValidationError
from checks.ndjson import (
    MAX_ERRORS_KEPT,
    Appender,
    RowCollector,
    RowLine,
    Unit,
    feed_ndjson,
)

__all__ = [
    "ALLOWED_FIELDS",
    "DEFAULT_MAX_QUESTIONS",
    "MAX_ERRORS_KEPT",
    "MAX_QUESTION_BYTES",
    "MAX_QUESTION_ID_CHARS",
    "QuestionRow",
    "QuestionsValidationError",
    "parse_question_lines",
    "stream_question_rows",
    "validate_question_rows",
]

ALLOWED_FIELDS: Final = ("id", "question")
MAX_QUESTION_BYTES: Final = 2_000
# Child items get ids like "<id>:s12" or "<id>:compare" in a 200-character column; 160 leaves room.
MAX_QUESTION_ID_CHARS: Final = 160
DEFAULT_MAX_QUESTIONS: Final = 10_000


class QuestionRow(NamedTuple):
    id: str
    question: str


class QuestionsValidationError(ClaimsValidationError):
    """The batch of questions is rejected whole; `errors` name each bad row."""


class _Checker(RowCollector[QuestionRow]):
    """Validates question rows one at a time."""

    def __init__(self, *, max_rows: int, unit: Unit, rows: Appender[QuestionRow] | None = None) -> None:
        super().__init__(
            max_rows=max_rows, unit=unit, noun="questions", refusal=QuestionsValidationError, rows=rows
        )

    def check(self, line: int, obj: object) -> None:
        ok = self.known_fields(line, obj, ALLOWED_FIELDS)
        if not isinstance(obj, dict):
            return
        row_id = self.new_id(line, obj.get("id"), MAX_QUESTION_ID_CHARS)
        question = self.text(
            line, "question", obj.get("question"), required=True, max_bytes=MAX_QUESTION_BYTES
        )
        if ok and not self.errors and row_id is not None and question is not None:
            self.rows.append(QuestionRow(row_id, question))


def parse_question_lines(
    lines: Iterable[RowLine], *, max_rows: int = DEFAULT_MAX_QUESTIONS
) -> list[QuestionRow]:
    """Validate an NDJSON batch of questions, all or nothing (1-based lines; blank lines skipped but
    counted; a byte-order mark on line 1 ignored). Raises QuestionsValidationError."""
    checker = _Checker(max_rows=max_rows, unit="line")
    feed_ndjson(lines, checker)
    return checker.result()


def stream_question_rows(
    lines: Iterable[RowLine],
    rows: Appender[QuestionRow],
    *,
    max_rows: int = DEFAULT_MAX_QUESTIONS,
) -> int:
    """Validate an NDJSON batch of questions line by line (a CSV one through `checks/csv_rows.py`),
    handing valid rows to `rows` as they are read (until the first problem). Returns the number of rows;
    raises QuestionsValidationError."""
    checker = _Checker(max_rows=max_rows, unit="line", rows=rows)
    feed_ndjson(lines, checker)
    checker.result()
    return checker.count


def validate_question_rows(
    objs: Sequence[object], *, max_rows: int = DEFAULT_MAX_QUESTIONS, unit: Unit = "item"
) -> list[QuestionRow]:
    """Validate already-parsed rows (a JSON array), all or nothing; errors name `item N` (1-based)."""
    checker = _Checker(max_rows=max_rows, unit=unit)
    checker.check_items(objs)
    return checker.result()
