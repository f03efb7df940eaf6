"""The typed JSON of the `answer` kind: what each stage stores and the report built from them.

The stages (docs/spec.md §3): `question` (one Agent call: its answer split into sentences), `sentence`
(one Decisions request per sentence), `investigation` (another Agent call for a flagged sentence, then a
Decisions request per rewrite sentence). workers/answers.py fills these records, jobs/answers.py reads
them back to plan the next items and build `AnswerReport`; the citations kind's `rewrite` stage is the
same investigation. Every record dumps the fields it was given (`StageRecord`), so what is stored is what
was stored before these records existed, and old rows load.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from checks.answer_labels import Label
from checks.contracts import CallFacts, IncompleteStep, ReusedFrom, StageRecord, Usage
from checks.packing_audit import AuditPart

__all__ = [
    "AgentFacts",
    "AgentResult",
    "AgentView",
    "AnswerQuestionOutput",
    "AnswerReport",
    "AnswerReportSummary",
    "AnswerRequestIds",
    "EvidencePassage",
    "EvidenceRow",
    "FinalAnswerView",
    "FinalSentenceView",
    "FinalSource",
    "InvestigationInput",
    "InvestigationOutput",
    "InvestigationView",
    "RewritePack",
    "RewriteSentence",
    "SentenceScores",
    "SentenceSpec",
    "SentenceVerdict",
]


class AgentResult(StageRecord):
    """A search result an Agent answer's `[n]` marker can point at."""

    id: int
    url: str
    title: str = ""
    snippet: str = ""
    date: str | None = None


class AgentFacts(CallFacts):
    """One Agent call as stored: the call's request ids and timing, then its answer."""

    text: str | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    results: list[AgentResult] = Field(default_factory=list)


class SentenceSpec(StageRecord):
    """One sentence of an Agent answer with the passages its markers cite: the input of a `sentence` item,
    exactly what its Decisions request sends."""

    number: int
    text: str
    claim: str
    paragraph: int
    source_ids: list[int]
    passages: dict[str, str] = Field(description="Marker number → the cited result's snippet.")
    urls: dict[str, str]
    titles: dict[str, str] = Field(default_factory=dict)
    missing_ids: list[int]

    def cited_urls(self) -> tuple[str, ...]:
        """The URLs of the passages it was scored against, in citation order."""
        return tuple(self.urls[n] for n in self.passages if n in self.urls)


class AnswerQuestionOutput(StageRecord):
    """The output of an answer job's `question` item: the Agent answer and the sentences to score (none
    when the call or the split failed: then `error`)."""

    kind: Literal["answer"] = "answer"
    started_at: str | None = None
    agent: AgentFacts | None = None
    request_id: str | None = None
    request_ids: list[str] = Field(default_factory=list)
    sentences: list[SentenceSpec] = Field(default_factory=list)
    error: str | None = None


class SentenceScores(CallFacts):
    """A sentence's Decisions request as stored: the call, every probability, the label and its rule."""

    label: Label | None = None
    rule: str | None = None
    checkable: float | None = None
    supports: dict[str, float] = Field(default_factory=dict)
    contradicts: dict[str, float] = Field(default_factory=dict)
    best_support: float | None = None
    best_passage: str | None = None
    max_contradiction: float | None = None
    contradicting_passage: str | None = None
    answers: dict[str, float] = Field(default_factory=dict)
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None


class SentenceVerdict(SentenceScores):
    """The output of a `sentence` item: its scores and label, or (failed) its request ids and `error`;
    `reused_from` when its request was answered from the tenant's verdict store (docs/spec.md §10)."""

    error: str | None = None
    reused_from: ReusedFrom | None = None


class RewritePack(StageRecord):
    """Where a rewrite sentence was scored when its job packs (docs/spec.md §9): the number of the pack's
    first sentence, the pack's size and the sentence's 0-based position in it."""

    first: int
    size: int
    position: int


class RewriteSentence(SentenceScores, SentenceSpec):
    """One sentence of an investigation's rewrite: as split and cited, then as scored (`done`), or the
    request that failed (`failed`, `error`); `pack` when it was scored in a packed request."""

    status: str = "failed"
    error: str | None = None
    pack: RewritePack | None = None


class InvestigationInput(StageRecord):
    """The input of an `investigation` item (and of a citations job's `rewrite` item)."""

    question: str
    answer_text: str
    sentence_number: int
    claim: str
    label: str | None


class InvestigationOutput(StageRecord):
    """The output of an investigation: the Agent's rewrite and every rewrite sentence scored so far (kept
    when it failed part-way, with `error`), its outcome when every sentence was scored."""

    sentence_number: int | None = None
    agent: AgentFacts | None = None
    sentences: list[RewriteSentence] = Field(default_factory=list)
    outcome: str | None = None
    request_id: str | None = None
    request_ids: list[str] = Field(default_factory=list)
    error: str | None = None
    # Its Decisions requests answered from the verdict store (docs/spec.md §10): one entry, or a list when
    # several were; a rewrite sentence's is the entry whose request id is its own.
    reused_from: ReusedFrom | list[ReusedFrom] | None = None

    def reused(self) -> dict[str, ReusedFrom]:
        """The entries by their original request id."""
        found = self.reused_from if isinstance(self.reused_from, list) else [self.reused_from]
        return {r.request_id: r for r in found if r is not None and r.request_id}


# --- the report (docs/spec.md §6) ----------------------------------------------------------------------


class AgentView(StageRecord):
    text: str | None
    request_id: str | None
    request_ids: list[str]
    input_tokens: int | None
    results: list[AgentResult]


class FinalSentenceView(StageRecord):
    text: str
    paragraph: int
    label: Label | None
    citations: list[int]
    origin: int
    replaced: bool
    outcome: str | None
    investigation_error: str | None


class FinalSource(StageRecord):
    number: int
    url: str
    title: str


class FinalAnswerView(StageRecord):
    """The answer after review: sentences, paragraphs as lists of sentence indexes, sources by number."""

    sentences: list[FinalSentenceView]
    paragraphs: list[list[int]]
    sources: list[FinalSource]


class EvidencePassage(StageRecord):
    id: str
    text: str
    url: str
    title: str
    supports: float | None
    contradicts: float | None


class InvestigationView(StageRecord):
    status: str
    custom_id: str
    text: str | None
    request_id: str | None
    request_ids: list[str]
    error: str | None


class EvidenceRow(StageRecord):
    """One scored sentence of the report: an original (with its review outcome and investigation) or a
    rewrite sentence (with whether the final answer uses it)."""

    role: Literal["original", "rewrite"]
    number: int
    rewrite_number: int | None
    custom_id: str
    text: str | None
    claim: str | None
    paragraph: int | None
    status: str
    label: Label | None
    rule: str | None
    checkable: float | None
    passages: list[EvidencePassage]
    missing_ids: list[int]
    request_id: str | None
    request_ids: list[str]
    input_tokens: int | None
    error: str | None
    outcome: str | None = None
    investigation: InvestigationView | None = None
    used: bool = False
    reused_from: ReusedFrom | None = None  # given only when answered from the verdict store (spec §10)


class AnswerReportSummary(StageRecord):
    sentences: int = 0
    investigated: int = 0
    replaced: int = 0
    not_confirmed: int = 0
    not_reviewed: int = 0
    decisions_requests: int = 0  # sent upstream (a pack once)
    reused_requests: int = 0  # answered from the tenant's verdict store instead (docs/spec.md §10)
    decisions_input_tokens: int = 0
    agent_calls: int = 0
    seconds: float = 0.0
    before: dict[str, int] = Field(default_factory=dict)
    after: dict[str, int] = Field(default_factory=dict)
    failed_sentences: int = 0
    failed_investigations: int = 0
    incomplete_steps: dict[str, int] = Field(default_factory=dict)
    # This question's part of the job's packing audit (docs/spec.md §9.6), when it was audited.
    packing_audit: AuditPart | None = None

    @classmethod
    def empty(cls) -> AnswerReportSummary:
        """Every total at zero, each field given (so each is stored), no audit."""
        return cls.model_construct(_fields_set=set(cls.model_fields) - {"packing_audit"})


class AnswerRequestIds(StageRecord):
    agent: list[str]
    decisions: list[str]


class AnswerReport(StageRecord):
    """The report of one question of an answer job, stored on its question item (docs/spec.md §6)."""

    kind: Literal["answer"] = "answer"
    question: str | None = None
    built_at: str | None = None
    model: str | None = None
    cutoffs_model: str | None = None
    model_note: str | None = None
    agent: AgentView | None = None
    errors: list[str] = Field(default_factory=list)
    incomplete_steps: list[IncompleteStep] = Field(default_factory=list)
    status: Literal["done", "failed", "skipped", "incomplete"] | None = None
    error: str | None = None
    final: FinalAnswerView | None = None
    evidence: list[EvidenceRow] = Field(default_factory=list)
    summary: AnswerReportSummary = Field(default_factory=AnswerReportSummary)
    request_ids: AnswerRequestIds | None = None
    usage: Usage | None = None
