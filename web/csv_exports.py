"""CSV downloads of `answer` and `quote` results: one row per question, flat columns.

The NDJSON download holds the whole report; the CSV is the spreadsheet view of the outcome. Rows are
built from `jobs.flows.question_results_page` lines and streamed like web/exports.py's claims CSV.

An incomplete question says so in its row: `outcome` is `incomplete`, `incomplete_steps` names every step
that did not run to the end, and the answer so far goes to `partial_answer`, never to `final_answer` (the
columns added for this come last, so existing readers of the first columns are unaffected).

Every CSV download ends with a row `#end,<N>`: N data rows are above it. A spreadsheet shows it as an
ordinary last row, a script drops the row whose first cell is `#end`; a file that does not end with it
was cut short (a count in a response header could not say that: the body is sent before it is counted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from web.csv_safety import SafeCsv

ANSWER_COLUMNS = (
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
QUOTE_COLUMNS = (
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


def _steps(value: object) -> str:
    """The missing steps of an incomplete question, one `message` each, in flow order."""
    if not isinstance(value, list):
        return ""
    return "; ".join(str(step.get("message") or step.get("step")) for step in value if isinstance(step, dict))


def _answer_row(line: dict[str, Any]) -> Sequence[object]:
    return (
        line.get("custom_id", ""),
        line.get("question") or "",
        line.get("status") or "",
        line.get("outcome") or "",
        line.get("final_answer") or "",
        _ids(line.get("request_ids")),
        _steps(line.get("incomplete_steps")),
        line.get("partial_answer") or "",
        line.get("model_note") or "",
    )


def _quote_row(line: dict[str, Any]) -> Sequence[object]:
    quote = line.get("quote") or {}
    closest = line.get("closest") or {}
    return (
        line.get("custom_id", ""),
        line.get("question") or "",
        line.get("status") or "",
        line.get("outcome") or "",
        quote.get("text") or "",
        quote.get("title") or "",
        quote.get("url") or "",
        quote.get("date") or "",
        _num(quote.get("p_answers")),
        _num(quote.get("has_answer")),
        closest.get("text") or "",
        _num(closest.get("p_answers")),
        _ids(line.get("request_ids")),
        _steps(line.get("incomplete_steps")),
        line.get("model_note") or "",
    )


def _csv(
    columns: Sequence[str], row: Callable[[dict[str, Any]], Sequence[object]]
) -> Callable[[Iterator[dict[str, Any]]], Iterator[str]]:
    def render(records: Iterator[dict[str, Any]]) -> Iterator[str]:
        out = CsvTally(SafeCsv())
        out.header(columns)
        for record in records:
            out.row(row(record))
            yield out.take()
        yield out.end()

    return render


answers_csv = _csv(ANSWER_COLUMNS, _answer_row)
quotes_csv = _csv(QUOTE_COLUMNS, _quote_row)
