"""The entry stage the `answer` and `quote` kinds share: one upstream call for the job's question.

Both take the question from the item (`QuestionInput`), build the request with checks/ (a question it
cannot ask fails the item with the reason), and send it through `Calls.run`; a call that does not answer
keeps the kind's bare output (its `kind` and `started_at`) beside the error. What the kinds read from the
response differs, so that stays in workers/answers.py and workers/quotes.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

from checks.contracts import QuestionInput, StageRecord
from jobs.records import ClaimedItem
from workers.outcomes import Failed, Outcome
from workers.steps import Calls, StepError

B = TypeVar("B")
R = TypeVar("R")


@dataclass(frozen=True)
class Answered(Generic[R]):
    """The question's call answered: when the item took the question up, and the response."""

    started_at: str
    response: R


def ask_question(
    item: ClaimedItem,
    calls: Calls,
    request: Callable[[str], B],
    send: Callable[[B], R],
    unanswered: Callable[[str], StageRecord],
) -> Answered[R] | Outcome:
    """Build the question's request (`request`: a `ValueError` fails the item) and `send` it; the outcome
    when it cannot be asked or was not answered, keeping `unanswered(started_at)` as its output."""
    started = datetime.now(UTC).isoformat()
    try:
        body = request(QuestionInput.read(item.input).question)
    except ValueError as exc:
        return Failed(str(exc))
    try:
        response: R = calls.run(lambda: send(body))
    except StepError as exc:
        return calls.failed(exc, unanswered(started).dump())
    return Answered(started, response)
