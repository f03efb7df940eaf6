"""The typed JSON of the `quote` kind: what each stage stores and the report built from them.

The stages (docs/spec.md §4): `question` (one Search call: every result with its quotable sentences),
`result` (one rank request over one result's sentences), `compare` (one request over the candidates).
workers/quotes.py fills these records; jobs/quotes.py reads them back, replays them into a
`checks.quotes.QuoteRunRecord` and builds `QuoteReport`. Every record dumps the fields it was given
(`StageRecord`), so what is stored is what was stored before these records existed, and old rows load.
Upstream answers are kept in the API's own JSON (`JsonValue`), exactly as they came.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from checks import quotes
from checks.contracts import CallFacts, IncompleteStep, ReusedFrom, StageRecord, Usage

__all__ = [
    "CandidateRecord",
    "CompareInput",
    "CompareOutput",
    "CompareRow",
    "CompareTable",
    "QuoteCutoffs",
    "QuoteQuestionOutput",
    "QuoteReport",
    "QuoteReportSummary",
    "QuoteRun",
    "QuoteRunTotals",
    "QuoteStatus",
    "QuoteView",
    "RankOutput",
    "RawResult",
    "ResultInput",
    "ResultRow",
    "SearchFacts",
    "SearchView",
    "SentenceChoice",
    "SourceRecord",
]

QuoteStatus = Literal["quoted", "no_answer", "failed", "skipped", "incomplete"]
# The answers of one Decisions response by question name, in the API's JSON shape (workers/steps.py).
RawAnswers = dict[str, dict[str, JsonValue]]


class RawResult(StageRecord):
    """A Search API result as returned."""

    title: str
    url: str
    snippet: str
    date: str | None = None


class SourceRecord(StageRecord):
    """A search result as the quote finder uses it (`checks.quotes.SourceResult`), with its sentences."""

    index: int
    title: str
    url: str
    date: str | None = None
    snippet: str
    sentence_count: int
    sentences: list[str]

    @classmethod
    def of(cls, source: quotes.SourceResult) -> SourceRecord:
        return cls.model_validate(source.as_dict())

    def value(self) -> quotes.SourceResult:
        return quotes.SourceResult.from_dict(self.model_dump())


class SearchFacts(CallFacts):
    """The Search call as stored: its request ids and timing, its raw results, the prepared ones."""

    id: str | None = None
    raw_results: list[RawResult] = Field(default_factory=list)
    results: list[SourceRecord] = Field(default_factory=list)


class QuoteQuestionOutput(StageRecord):
    """The output of a quote job's `question` item (with `error` when the search failed or its results
    could not be prepared)."""

    kind: Literal["quote"] = "quote"
    started_at: str | None = None
    search: SearchFacts | None = None
    request_id: str | None = None
    request_ids: list[str] = Field(default_factory=list)
    error: str | None = None


class CandidateRecord(StageRecord):
    """One result's chosen sentence and the numbers behind it (`checks.quotes.Candidate`)."""

    result_index: int
    title: str
    url: str
    date: str | None = None
    sentence_number: int
    sentence: str
    p_best: float
    confidence: float
    has_answer: float
    probabilities: dict[str, float] = Field(default_factory=dict)
    request_id: str | None = None
    answers: float | None = None

    @classmethod
    def of(cls, candidate: quotes.Candidate) -> CandidateRecord:
        return cls.model_validate(candidate.as_dict())

    def value(self) -> quotes.Candidate:
        return quotes.Candidate.from_dict(self.model_dump())


class ResultInput(StageRecord):
    """The input of a `result` item: the question and the one result to rank."""

    question: str
    result: SourceRecord


class _DecisionFacts(CallFacts):
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None
    answers: RawAnswers = Field(default_factory=dict)
    # Answered from the tenant's verdict store (docs/spec.md §10): the original request; absent when sent.
    reused_from: ReusedFrom | None = None


class RankOutput(_DecisionFacts):
    """The output of a `result` item: the rank request and the candidate read from it (or `error`)."""

    result_index: int | None = None
    candidate: CandidateRecord | None = None
    error: str | None = None


class CompareInput(StageRecord):
    """The input of the `compare` item: the question and the candidates, in the order asked."""

    question: str
    candidates: list[CandidateRecord]


class CompareOutput(_DecisionFacts):
    """The output of the `compare` item: one probability per candidate, in their order (or `error`)."""

    probabilities: list[float] | None = None
    error: str | None = None


# --- the report (docs/spec.md §6) ----------------------------------------------------------------------


class QuoteCutoffs(StageRecord):
    compare_min: float
    quote_min: float


class SearchView(StageRecord):
    request_id: str | None
    request_ids: list[str]
    error: str | None


class QuoteView(StageRecord):
    """The quoted sentence (or the closest candidate) with its source and probabilities."""

    text: str
    title: str
    url: str
    date: str | None
    result_index: int
    p_answers: float | None
    has_answer: float
    p_best: float
    confidence: float
    rank_request_id: str | None
    compare_request_id: str | None


class SentenceChoice(StageRecord):
    number: int
    text: str


class ResultRow(StageRecord):
    """One search result of the report: its sentences, its rank (or why it has none), compared or not."""

    index: int
    title: str
    url: str
    date: str | None
    sentence_count: int
    sentences: list[str]
    status: str
    best: SentenceChoice | None
    has_answer: float | None
    p_best: float | None
    confidence: float | None
    probabilities: dict[str, float]
    request_id: str | None
    request_ids: list[str]
    input_tokens: int | None
    error: str | None
    compared: bool
    reused_from: ReusedFrom | None = None  # given only when its rank request was answered from the store


class CompareRow(StageRecord):
    number: int
    result_index: int
    title: str | None
    url: str | None
    sentence: str | None
    has_answer: float | None
    p_answers: float | None
    rank: int | None


class CompareTable(StageRecord):
    status: str
    request_id: str | None
    request_ids: list[str]
    input_tokens: int | None
    error: str | None
    candidates: list[CompareRow]
    reused_from: ReusedFrom | None = None  # given only when the compare request was answered from the store


class QuoteRunTotals(StageRecord):
    decisions_requests: int
    failed_requests: int
    input_tokens: int
    request_ids: list[str]


class QuoteRun(StageRecord):
    """The run record (`checks.quotes.QuoteRunRecord.as_dict`): every request of the run and its outcome."""

    question: str
    model: str
    search: dict[str, JsonValue]
    rank: list[dict[str, JsonValue]]
    compare: list[dict[str, JsonValue]]
    outcome: dict[str, JsonValue] | None
    errors: list[str]
    totals: QuoteRunTotals


class QuoteReportSummary(StageRecord):
    decisions_requests: int = 0  # sent upstream (a pack once)
    reused_requests: int = 0  # answered from the tenant's verdict store instead (docs/spec.md §10)
    failed_requests: int = 0
    search_requests: int = 0
    input_tokens: int = 0
    seconds: float = 0.0
    incomplete_steps: dict[str, int] = Field(default_factory=dict)

    @classmethod
    def empty(cls) -> QuoteReportSummary:
        """Every total at zero, each field given (so each is stored)."""
        return cls.model_construct(_fields_set=set(cls.model_fields))


class QuoteReport(StageRecord):
    """The report of one question of a quote job, stored on its question item (docs/spec.md §6)."""

    kind: Literal["quote"] = "quote"
    question: str | None = None
    built_at: str | None = None
    model: str | None = None
    cutoffs_model: str | None = None
    model_note: str | None = None
    cutoffs: QuoteCutoffs | None = None
    search: SearchView | None = None
    errors: list[str] = Field(default_factory=list)
    incomplete_steps: list[IncompleteStep] = Field(default_factory=list)
    quote: QuoteView | None = None
    closest: QuoteView | None = None
    closest_by: str | None = None
    compare: CompareTable | None = None
    results: list[ResultRow] = Field(default_factory=list)
    status: QuoteStatus | None = None
    error: str | None = None
    run: QuoteRun | None = None
    summary: QuoteReportSummary = Field(default_factory=QuoteReportSummary)
    request_ids: list[str] = Field(default_factory=list)
    usage: Usage | None = None
