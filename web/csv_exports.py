"""CSV downloads of `answer` and `quote` results: one row per question, flat columns.

The NDJSON download holds the whole report; the CSV is the spreadsheet view of the outcome. Rows are
built from `jobs.stages.iter_question_results` lines (`AnswerResult` / `QuoteResult`, read by attribute)
and streamed like web/exports.py's claims CSV.

An incomplete question says so in its row: `outcome` is `incomplete`, `incomplete_steps` names every step
that did not run to the end, and the answer so far goes to `partial_answer`, never to `final_answer` (the
columns added for this come last, so existing readers of the first columns are unaffected).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from checks.kinds import answer as answer_kind
from checks.kinds import quote as quote_kind
from checks.kinds.answer import AnswerResult
from checks.kinds.quote import QuoteResult
from web.csv_safety import SafeCsv

ANSWER_COLUMNS = answer_kind.CSV_COLUMNS
QUOTE_COLUMNS = quote_kind.CSV_COLUMNS


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
    )


def _csv(
    columns: Sequence[str], row: Callable[[Any], Sequence[object]]
) -> Callable[[Iterator[Any]], Iterator[str]]:
    """A renderer of one kind's result lines (its recipe's `result_line` contract), header first."""

    def render(records: Iterator[Any]) -> Iterator[str]:
        out = SafeCsv()
        out.row(columns)
        for record in records:
            out.row(row(record))
            yield out.take()
        tail = out.take()
        if tail:
            yield tail

    return render


answers_csv = _csv(ANSWER_COLUMNS, _answer_row)
quotes_csv = _csv(QUOTE_COLUMNS, _quote_row)
