"""The typed JSON of the `citations` kind: its rows, what each stage stores, its report and result line.

Every shape that crosses a layer (a row into intake, an entry item's input, a sentence item's input and
output, the report stored on the entry item, the results line, the job summary) is a pydantic contract
here (checks/contracts.py says why pydantic), so jobs/ builds them, workers/ fills them, web/ and cli/
read their attributes, and web/openapi.py publishes their schemas. Stored JSON is read back with
`Contract.read`, which ignores fields a newer version added.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from checks.answer_labels import Label
from checks.contracts import Contract, ItemStatusName, ReportHead, ReusedFrom, StoredContract, Usage
from checks.packing_audit import PackingAudit

__all__ = [
    "CitationCutoffs",
    "CitationEntry",
    "CitationMetrics",
    "CitationPassage",
    "CitationReport",
    "CitationReview",
    "CitationSentence",
    "CitationSource",
    "CitationsResult",
    "CitationsSummary",
    "PassageRole",
    "PassageScore",
    "SentencePlan",
    "SentenceScore",
]

PassageRole = Literal["cited", "other"]


class CitationSource(Contract):
    """One source of a row as stored: its id (given, or its 1-based position), text, title and URL."""

    id: str
    text: str
    title: str | None = None
    url: str | None = None


class CitationCutoffs(Contract):
    """The label cutoffs of a citations job (docs/spec.md §3.4's policy, here options)."""

    supported_min: float = 0.7
    weak_min: float = 0.4
    contradicted_min: float = 0.6
    checkable_min: float = 0.5


class CitationEntry(Contract):
    """The input of an entry item: one answer with its sources, as validated at intake."""

    kind: Literal["citations"] = "citations"
    answer: str
    question: str | None = None
    sources: list[CitationSource]
    unmarked: bool = Field(
        default=False,
        description="A RAGAS or DeepEval row whose answer has no [n] markers: each sentence is checked "
        "against every source, as faithfulness is (factgate's own rows never are: their unmarked sentences "
        "are uncited).",
    )


class CitationPassage(Contract):
    """One passage of one sentence's Decisions request: key `n` of `passage n` in the request, the source
    and the chunk of it (1-based, of `chunks`), cited by the sentence or another source of the row (asked
    for support only: misattribution), and its text exactly as sent."""

    key: str
    source: str
    chunk: int
    chunks: int
    role: PassageRole
    text: str


class SentencePlan(Contract):
    """One sentence to score: the input of a `cited_sentence` item."""

    kind: Literal["citations"] = "citations"
    number: int
    text: str = Field(description="The sentence as written, one bracket per cited id.")
    claim: str = Field(description="The sentence without markers: what the Decisions API scores.")
    paragraph: int
    cited: list[str] = Field(description="Source ids the sentence cites, in order, once each.")
    missing: list[str] = Field(description="Ids its markers name that no source of the row has.")
    passages: list[CitationPassage]
    unchecked: list[str] = Field(
        default_factory=list,
        description="Other sources not asked about (past the 128-question cap): not checked for "
        "misattribution.",
    )
    unmarked: bool = Field(
        default=False, description="The answer has no markers: `cited` is every source of the row."
    )


class SentenceScore(Contract):
    """What a `cited_sentence` item stores: every probability by passage key, and its request ids. The
    label is not stored here: the report derives it from these at the job's cutoffs (and replays others)."""

    checkable: float
    supports: dict[str, float]
    contradicts: dict[str, float]
    request_id: str | None = None
    request_ids: list[str] = Field(default_factory=list)
    attempts: int = 0
    latency_s: float = 0.0
    sanitized: list[str] = Field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    # Answered from the tenant's verdict store (docs/spec.md, "Verdict reuse"): the original request's id and
    # time. Absent when the request was sent.
    reused_from: ReusedFrom | None = Field(default=None, exclude_if=lambda v: v is None)


class PassageScore(CitationPassage):
    """A passage of the evidence: as sent, with its probabilities (`contradicts` only for cited ones)."""

    title: str | None = None
    url: str | None = None
    supports: float | None = None
    contradicts: float | None = None
    best: bool = Field(default=False, description="The chunk of its source with the highest support.")


class CitationReview(Contract):
    """The Agent review of one flagged sentence (option `review: agent`): its outcome and the suggested
    rewrite, the rewrite sentences its fresh sources support."""

    outcome: str | None = Field(description="replaced, not confirmed, not reviewed; null while unfinished.")
    status: ItemStatusName | None = None
    suggestion: str | None = None
    rewrite: str | None = Field(default=None, description="The rewrite as the Agent API returned it.")
    sentences: list[dict[str, object]] = Field(default_factory=list)
    request_ids: list[str] = Field(default_factory=list)
    error: str | None = None


class CitationSentence(Contract):
    """One sentence of the report: its label at the report's cutoffs, the rule, and the evidence."""

    number: int
    text: str
    claim: str
    paragraph: int
    status: ItemStatusName
    error: str | None = None
    cited: list[str]
    missing: list[str]
    unchecked: list[str] = Field(default_factory=list)
    unmarked: bool = Field(
        default=False,
        description="Checked against every source of the row (its answer has no markers): `cited` lists "
        "them all, and the citation metrics (recall, precision, uncited) leave it out.",
    )
    label: Label | None = None
    rule: str | None = None
    checkable: float | None = None
    supported_by: list[str] = Field(
        default_factory=list, description="Cited sources whose best chunk supports the sentence."
    )
    misattributed: list[str] = Field(
        default_factory=list,
        description="Sources the sentence does not cite that support it, when its own citations do not.",
    )
    passages: list[PassageScore] = Field(default_factory=list)
    request_id: str | None = None
    request_ids: list[str] = Field(default_factory=list)
    input_tokens: int | None = None
    review: CitationReview | None = None
    reused_from: ReusedFrom | None = Field(default=None, exclude_if=lambda v: v is None)


class CitationMetrics(Contract):
    """Citation quality over the checkable sentences (docs/spec.md §8: the definitions, next
    to ALCE's). Rates are null when their denominator is 0."""

    sentences: int = 0
    scored: int = 0
    checkable: int = 0
    labels: dict[str, int] = Field(default_factory=dict)
    citations: int = 0
    supporting_citations: int = 0
    supported_by_citations: int = Field(default=0, description="Checkable sentences a cited source supports.")
    citation_recall: float | None = None
    citation_precision: float | None = None
    uncited: int = 0
    uncited_rate: float | None = None
    misattributed: int = 0
    misattributed_rate: float | None = None
    contradicted: int = 0
    contradicted_rate: float | None = None
    supported_by_sources: int = 0
    supported_share: float | None = None
    unmarked: int = Field(
        default=0,
        description="Checkable sentences of answers without markers, checked against every source: in "
        "supported share and contradicted rate, not in recall, precision or uncited rate.",
    )


class CitationReport(ReportHead):
    """The report of one answer, stored on its entry item (shape: docs/spec.md §8.7)."""

    kind: str = "citations"
    built_at: str | None = None
    model: str | None = None
    cutoffs_model: str | None = None
    cutoffs: CitationCutoffs = Field(default_factory=CitationCutoffs)
    misattribution: bool = True
    review: str = "none"
    answer: str | None = None
    sources: list[CitationSource] = Field(default_factory=list)
    sentences: list[CitationSentence] = Field(default_factory=list)
    metrics: CitationMetrics = Field(default_factory=CitationMetrics)
    errors: list[str] = Field(default_factory=list)


class CitationsResult(Contract):
    """One NDJSON line of GET /v1/jobs/{job_id}/results for a citations job: one answer."""

    custom_id: str
    question: str | None = None
    status: ItemStatusName = Field(description="The answer item's status.")
    outcome: str | None = Field(default=None, description="The report's status: done, failed, incomplete.")
    incomplete_steps: list[dict[str, object]] = Field(default_factory=list)
    model_note: str | None = None
    metrics: CitationMetrics | None = None
    request_ids: list[str] = Field(
        default_factory=list, description="Every upstream request id of the answer."
    )
    usage: Usage | None = None
    report: CitationReport | None = None


class CitationsSummary(StoredContract):
    """Totals over a citations job: outcomes, label counts and the job's citation metrics (micro-averaged:
    sums of every answer's numerators over sums of their denominators)."""

    kind: Literal["citations"] = "citations"
    questions: int = Field(description="Answers in the job (named like the other staged kinds' summaries).")
    outcomes: dict[str, int]
    incomplete_steps: dict[str, int] = Field(default_factory=dict)
    totals: dict[str, float]
    metrics: CitationMetrics
    cutoffs: CitationCutoffs
    request_counts: dict[str, int] | None = None
    packing_audit: PackingAudit | None = Field(
        default=None,
        description="Packed sentences asked again one per request, compared (docs/spec.md §9.4); null when "
        "the job packed nothing or audited nothing.",
    )
