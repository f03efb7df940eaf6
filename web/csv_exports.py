"""CSV downloads of `answer` and `quote` results: one row per question, flat columns.

The NDJSON download holds the whole report; the CSV is the spreadsheet view of the outcome. Rows are
built from the kind's `results_page` lines (`AnswerResult` / `QuoteResult`, read by attribute) and streamed
like web/exports.py's claims CSV, ending with the `#end,<N>` row.

An incomplete question says so in its row: `outcome` is `incomplete`, `incomplete_steps` names every step
that did not run to the end, and the answer so far goes to `partial_answer`, never to `final_answer` (the
columns added for this come last, so existing readers of the first columns are unaffected).

Every CSV download ends with a row `#end,<N>`: N data rows are above it. A spreadsheet shows it as an
ordinary last row, a script drops the row whose first cell is `#end`; a file that does not end with it
was cut short (a count in a response header could not say that: the body is sent before it is counted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from checks.kinds import answer as answer_kind
from checks.kinds import quote as quote_kind
from checks.kinds._questions import QuestionLine
from checks.kinds.answer import AnswerResult
from checks.kinds.quote import QuoteResult
from web.csv_safety import SafeCsv

ANSWER_COLUMNS = answer_kind.CSV_COLUMNS
QUOTE_COLUMNS = quote_kind.CSV_COLUMNS


END_CELL = "#end"


class CsvTally:
    """A `SafeCsv` that counts its data rows and ends the file with the `#end,<N>` trailer row."""

    def __init__(self, out: SafeCsv) -> None:
        self._out = out
        self.rows = 0

    def header(self, columns: Sequence[str]) -> None:
        self._out.row(columns)

    def row(self, cells: Sequence[object]) -> None:
        self._out.row(cells)
        self.rows += 1

    def take(self) -> str:
        return self._out.take()

    def end(self) -> str:
        """The rest of the file: whatever is buffered, then the trailer row."""
        self._out.row((END_CELL, str(self.rows)))
        return self._out.take()


def _num(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    return repr(float(value))


def _ids(value: object) -> str:
    if isinstance(value, dict):
        value = [i for ids in value.values() if isinstance(ids, list) for i in ids]
    return " ".join(str(i) for i in value) if isinstance(value, list) else ""


def _steps(steps: Sequence[Mapping[str, object]]) -> str:
    """The missing steps of an incomplete question, one `message` each, in flow order."""
    return "; ".join(str(step.get("message") or step.get("step")) for step in steps)


def _reused(line: QuestionLine) -> str:
    """The original request ids of the question's requests answered from the verdict store."""
    return " ".join(r.request_id or "" for r in line.reused_from)


def _answer_row(line: AnswerResult) -> Sequence[object]:
    return (
        line.custom_id,
        line.question or "",
        line.status or "",
        line.outcome or "",
        line.final_answer or "",
        _ids(line.request_ids),
        _steps(line.incomplete_steps),
        line.partial_answer or "",
        line.model_note or "",
        _reused(line),
    )


def _quote_row(line: QuoteResult) -> Sequence[object]:
    quote = line.quote or {}
    closest = line.closest or {}
    return (
        line.custom_id,
        line.question or "",
        line.status or "",
        line.outcome or "",
        quote.get("text") or "",
        quote.get("title") or "",
        quote.get("url") or "",
        quote.get("date") or "",
        _num(quote.get("p_answers")),
        _num(quote.get("has_answer")),
        closest.get("text") or "",
        _num(closest.get("p_answers")),
        _ids(line.request_ids),
        _steps(line.incomplete_steps),
        line.model_note or "",
        _reused(line),
    )


def csv_renderer(
    columns: Sequence[str], row: Callable[[Any], Sequence[object]]
) -> Callable[[Iterator[Any]], Iterator[str]]:
    """A renderer of one kind's result lines (its recipe's `result_line` contract), header first, the
    `#end` row last."""

    def render(records: Iterator[Any]) -> Iterator[str]:
        out = CsvTally(SafeCsv())
        out.header(columns)
        for record in records:
            out.row(row(record))
            yield out.take()
        yield out.end()

    return render


answers_csv = csv_renderer(ANSWER_COLUMNS, _answer_row)
quotes_csv = csv_renderer(QUOTE_COLUMNS, _quote_row)
