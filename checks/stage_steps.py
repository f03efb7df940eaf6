"""What the reports of every staged kind (`answer`, `quote`, `citations`) share: the entries of
`incomplete_steps`, their counts by step, and the seconds a question took.

One helper builds every `IncompleteStep`, so the three kinds name a step, its place and its outcome alike
(docs/spec.md §6.3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TypedDict, Unpack

from checks.contracts import IncompleteStep
from checks.pricing import DEFAULT_MODEL

__all__ = ["StepPlace", "incomplete_step", "job_model", "seconds_since", "step_counts", "why"]


class StepPlace(TypedDict, total=False):
    """Where in the question a step sits: a sentence, the flagged sentences, or a search result."""

    sentence: int
    sentences: list[int]
    result: int


def incomplete_step(
    step: str,
    status: str,
    message: str,
    *,
    error: str | None = None,
    request_ids: Iterable[str | None] = (),
    detail: bool = True,
    **place: Unpack[StepPlace],
) -> IncompleteStep:
    """One step that did not run to the end. With `detail` (the answer and quote kinds) the entry also says
    its error and the request ids it made; a citations report's entries name only the step and its place."""
    if not detail:
        return IncompleteStep(step=step, **place, status=status, message=message)
    ids = [i for i in request_ids if i]
    return IncompleteStep(step=step, **place, status=status, error=error, request_ids=ids, message=message)


def why(status: str, error: str | None) -> str:
    """`status: error`, or the status alone: the parenthesis of a step's message."""
    return f"{status}: {error}" if error else status


def step_counts(steps: Iterable[IncompleteStep]) -> dict[str, int]:
    """The entries by step name, in the order the steps first appear (a summary's `incomplete_steps`)."""
    counts: dict[str, int] = {}
    for entry in steps:
        counts[entry.step] = counts.get(entry.step, 0) + 1
    return counts


def seconds_since(started_at: object, now: datetime) -> float:
    """Seconds from a stored ISO `started_at` to `now`; 0.0 when it is missing or unreadable."""
    if not isinstance(started_at, str):
        return 0.0
    try:
        return max(0.0, (now - datetime.fromisoformat(started_at)).total_seconds())
    except ValueError:
        return 0.0


def job_model(options: Mapping[str, object] | None) -> str:
    """A job's Decisions model as the workers read it: DEFAULT_MODEL for a job stored without one (intake
    always stores one)."""
    return str((options or {}).get("model") or DEFAULT_MODEL)
