"""The JSON shapes of the quote finder's run record (`checks.quotes`: each record's `as_dict`).

jobs/quotes.py stores the run record in the report, where `checks.quote_contracts.QuoteRun` reads it back;
these types say what each `as_dict` writes, key by key, in the order it writes them.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from pydantic import JsonValue

__all__ = [
    "CandidateJson",
    "ClosestBy",
    "CompareAttemptJson",
    "CutoffsJson",
    "OutcomeJson",
    "RankAttemptJson",
    "RunJson",
    "RunTotalsJson",
    "SearchJson",
    "SourceResultJson",
]

ClosestBy = Literal["answers", "has_answer"]
AttemptStatus = Literal["failed", "done"]
# A Decisions response's answers by question name, kept as they came when they could not be read.
RawAnswersJson = dict[str, JsonValue]


class SourceResultJson(TypedDict):
    index: int
    title: str
    url: str
    date: str | None
    snippet: str
    sentence_count: int
    sentences: list[str]


class CandidateJson(TypedDict):
    result_index: int
    title: str
    url: str
    date: str | None
    sentence_number: int
    sentence: str
    p_best: float
    confidence: float
    has_answer: float
    probabilities: dict[str, float]
    request_id: str | None
    answers: float | None


class CutoffsJson(TypedDict):
    compare_min: float
    quote_min: float


class OutcomeJson(TypedDict):
    status: Literal["quoted", "no_answer"]
    answer: CandidateJson | None
    closest: CandidateJson | None
    closest_by: ClosestBy | None
    compared: bool
    ordering: list[CandidateJson]
    cutoffs: CutoffsJson


class RankAttemptJson(TypedDict):
    """A rank attempt; the chosen sentence's fields only when it has a candidate, `answers` only when
    the answer could not be read."""

    result_index: int
    status: AttemptStatus
    request_id: str | None
    input_tokens: int | None
    error: str | None
    choice: NotRequired[str]
    sentence: NotRequired[str]
    p_best: NotRequired[float]
    confidence: NotRequired[float]
    has_answer: NotRequired[float]
    probabilities: NotRequired[dict[str, float]]
    answers: NotRequired[RawAnswersJson]


class CompareAttemptJson(TypedDict):
    """A compare attempt: `answers` holds each candidate's probability by question name once read, the raw
    answers when they could not be read, and null when nothing came back."""

    status: AttemptStatus
    request_id: str | None
    input_tokens: int | None
    candidates: dict[str, int]
    answers: dict[str, float] | RawAnswersJson | None
    error: str | None


class SearchJson(TypedDict):
    request_id: str | None
    error: str | None
    results: list[SourceResultJson] | None


class RunTotalsJson(TypedDict):
    decisions_requests: int
    failed_requests: int
    input_tokens: int
    request_ids: list[str]


class RunJson(TypedDict):
    question: str
    model: str
    search: SearchJson
    rank: list[RankAttemptJson]
    compare: list[CompareAttemptJson]
    outcome: OutcomeJson | None
    errors: list[str]
    totals: RunTotalsJson
