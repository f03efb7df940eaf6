"""Labels, misattribution and citation metrics of the `citations` kind (docs/spec.md §8).

Our code, not the model, turns a sentence's probabilities into a label: the answer kind's policy (§3.4,
`checks/answer_labels.py:label_sentence`), with the job's cutoffs. A source's support is its best chunk's
(`max` over chunks); its contradiction likewise. Everything here is a function of stored probabilities, so
a report at other cutoffs is the same functions over the same numbers, with no upstream request.

Metrics, over the checkable sentences (scored, and not `not_checkable`) — ALCE's definitions next to ours:

- **citation recall** = checkable sentences some cited source supports (best chunk ≥ `supported_min`) /
  checkable sentences. ALCE asks whether the *concatenation* of a sentence's cited passages entails it
  (one NLI call over all of them); we ask each passage alone and take the best, so a sentence that needs
  two passages together counts as unsupported here.
- **citation precision** = citations whose source alone supports its sentence / all citations of checkable
  sentences (a marker naming a missing source is a citation that supports nothing). ALCE also keeps a
  citation that does not support alone but is needed with the others; with per-passage probabilities
  there is no joint judgement, so such a citation counts as imprecise here.
- **uncited rate** = checkable sentences labelled `uncited` / checkable sentences.
- **misattributed** = checkable sentences whose own citations do not support them but another source of the
  row does (flagged `misattributed: [k]`; the label still judges the citation).
- **contradicted** = checkable sentences labelled `contradicted` / checkable sentences.
- **supported share** = checkable sentences that some source of the row supports, cited or not (the
  answer's faithfulness to everything retrieved, as RAGAS faithfulness measures it) / checkable
  sentences. Without misattribution only cited sources are asked, so it equals the recall.

An **unmarked** sentence (a RAGAS or DeepEval answer without markers, checked against every source of its
row) has no citations to judge: it counts in supported share and the contradicted rate, and recall,
precision and the uncited rate are over the marked checkable sentences only (`unmarked` counts the rest).

A job's metrics sum every answer's numerators and denominators (micro average).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from checks.answer_labels import LABELS, LabelCutoffs, label_sentence
from checks.answer_requests import CHECKABLE_QUESTION, contradicts_question, supports_question
from checks.citation_contracts import (
    CitationCutoffs,
    CitationMetrics,
    CitationPassage,
    CitationSentence,
    CitationSource,
    PassageScore,
    SentencePlan,
    SentenceScore,
)

__all__ = [
    "FLAGGED",
    "MISSING_SOURCE",
    "UNMARKED_RULE",
    "add_metrics",
    "check_cutoffs",
    "judge",
    "metrics_of",
    "relabel",
]

MISSING_SOURCE: Final = "the row has no source with that id"
# How a sentence of an answer without markers says it was judged (its rule, in the report, CSV and pages).
UNMARKED_RULE: Final = "no markers, checked against every source"
# Labels whose own citations do not support the sentence: where another source's support is news.
FLAGGED: Final = frozenset({"weak", "unsupported", "contradicted", "uncited"})


def check_cutoffs(cutoffs: CitationCutoffs) -> str | None:
    """What is wrong with a set of cutoffs (None: usable). Each is a probability, and a sentence weak at
    one support must not be supported at a lower one."""
    for name, value in cutoffs.model_dump().items():
        if not 0.0 <= float(value) <= 1.0:
            return f"{name} must be between 0 and 1, got {value}"
    if cutoffs.weak_min > cutoffs.supported_min:
        return f"weak_min ({cutoffs.weak_min}) must not be above supported_min ({cutoffs.supported_min})"
    return None


def _policy(cutoffs: CitationCutoffs) -> LabelCutoffs:
    return LabelCutoffs(
        supported_min=cutoffs.supported_min,
        weak_min=cutoffs.weak_min,
        contradicted_min=cutoffs.contradicted_min,
        checkable_min=cutoffs.checkable_min,
    )


def _best_by_source(
    scores: Mapping[str, float], plan: SentencePlan, role: str
) -> dict[str, tuple[str, float]]:
    """source id -> (passage key, probability) of its highest-scoring passage of `role` (first on ties)."""
    best: dict[str, tuple[str, float]] = {}
    for p in plan.passages:
        if p.role != role or p.key not in scores:
            continue
        value = scores[p.key]
        if p.source not in best or value > best[p.source][1]:
            best[p.source] = (p.key, value)
    return best


def judge(
    plan: SentencePlan,
    score: SentenceScore,
    cutoffs: CitationCutoffs,
    sources: Sequence[CitationSource] = (),
) -> CitationSentence:
    """One scored sentence at `cutoffs`: its label and rule, the cited sources that support it, the other
    sources that do (misattributed, when the label says its citations do not), and the passages with their
    probabilities, each source's best chunk marked. Raises ValueError for an unusable probability."""
    support = _best_by_source(score.supports, plan, "cited")
    contradiction = _best_by_source(score.contradicts, plan, "cited")
    answers: dict[str, float] = {CHECKABLE_QUESTION: score.checkable}
    cited = [s for s in plan.cited if s in support]
    for source in cited:
        answers[supports_question(source)] = support[source][1]
        answers[contradicts_question(source)] = contradiction.get(source, ("", 0.0))[1]
    result = label_sentence(
        answers, cited, plan.missing, cutoffs=_policy(cutoffs), missing_note=MISSING_SOURCE
    )
    other = _best_by_source(score.supports, plan, "other")
    supported_by = [s for s in cited if support[s][1] >= cutoffs.supported_min]
    misattributed: list[str] = []
    if result.label in FLAGGED:
        misattributed = [s for s, (_, p) in other.items() if p >= cutoffs.supported_min]
    best_keys = {key for key, _ in support.values()} | {key for key, _ in other.values()}
    meta = {s.id: s for s in sources}
    passages = [
        PassageScore(
            key=p.key,
            source=p.source,
            chunk=p.chunk,
            chunks=p.chunks,
            role=p.role,
            text=p.text,
            title=meta[p.source].title if p.source in meta else None,
            url=meta[p.source].url if p.source in meta else None,
            supports=score.supports.get(p.key),
            contradicts=score.contradicts.get(p.key) if p.role == "cited" else None,
            best=p.key in best_keys and p.chunks > 1,
        )
        for p in plan.passages
    ]
    rule = result.rule
    if plan.unmarked:
        rule = f"{UNMARKED_RULE}: {rule}"
    if misattributed:
        rule += "; supported by uncited " + ", ".join(f"[{s}]" for s in misattributed)
    return CitationSentence(
        number=plan.number,
        text=plan.text,
        claim=plan.claim,
        paragraph=plan.paragraph,
        status="done",
        cited=list(plan.cited),
        missing=list(plan.missing),
        unchecked=list(plan.unchecked),
        unmarked=plan.unmarked,
        label=result.label,
        rule=rule,
        checkable=score.checkable,
        supported_by=supported_by,
        misattributed=misattributed,
        passages=passages,
        request_id=score.request_id,
        request_ids=list(score.request_ids),
        input_tokens=score.input_tokens,
        reused_from=score.reused_from,
    )


def relabel(
    sentence: CitationSentence, cutoffs: CitationCutoffs, sources: Sequence[CitationSource] = ()
) -> CitationSentence:
    """A stored report sentence at other cutoffs (the cutoff replay): rebuilt from its passages' stored
    probabilities; an unscored sentence is returned as it is."""
    if sentence.status != "done" or sentence.checkable is None:
        return sentence
    plan = SentencePlan(
        number=sentence.number,
        text=sentence.text,
        claim=sentence.claim,
        paragraph=sentence.paragraph,
        cited=sentence.cited,
        missing=sentence.missing,
        unchecked=sentence.unchecked,
        unmarked=sentence.unmarked,
        passages=[
            CitationPassage(
                key=p.key, source=p.source, chunk=p.chunk, chunks=p.chunks, role=p.role, text=p.text
            )
            for p in sentence.passages
        ],
    )
    score = SentenceScore(
        checkable=sentence.checkable,
        supports={p.key: p.supports for p in sentence.passages if p.supports is not None},
        contradicts={p.key: p.contradicts for p in sentence.passages if p.contradicts is not None},
        request_id=sentence.request_id,
        request_ids=sentence.request_ids,
        input_tokens=sentence.input_tokens or 0,
        reused_from=sentence.reused_from,
    )
    if not sources:
        sources = [CitationSource(id=p.source, text="", title=p.title, url=p.url) for p in sentence.passages]
    judged = judge(plan, score, cutoffs, sources)
    return judged.model_copy(update={"review": sentence.review})


def _rate(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 4) if denominator else None


@dataclass
class _Tally:
    """The counts behind the metrics; rates are computed once, from the sums."""

    sentences: int = 0
    scored: int = 0
    checkable: int = 0
    labels: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LABELS, 0))
    citations: int = 0
    supporting_citations: int = 0
    supported_by_citations: int = 0
    uncited: int = 0
    misattributed: int = 0
    contradicted: int = 0
    supported_by_sources: int = 0
    unmarked: int = 0

    def add(self, m: CitationMetrics) -> None:
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(m, name))
        for label, n in m.labels.items():
            self.labels[label] = self.labels.get(label, 0) + n

    def metrics(self) -> CitationMetrics:
        n = self.checkable
        marked = n - self.unmarked
        return CitationMetrics(
            sentences=self.sentences,
            scored=self.scored,
            checkable=n,
            labels={k: v for k, v in self.labels.items() if v},
            citations=self.citations,
            supporting_citations=self.supporting_citations,
            supported_by_citations=self.supported_by_citations,
            citation_recall=_rate(self.supported_by_citations, marked),
            citation_precision=_rate(self.supporting_citations, self.citations),
            uncited=self.uncited,
            uncited_rate=_rate(self.uncited, marked),
            misattributed=self.misattributed,
            misattributed_rate=_rate(self.misattributed, n),
            contradicted=self.contradicted,
            contradicted_rate=_rate(self.contradicted, n),
            supported_by_sources=self.supported_by_sources,
            supported_share=_rate(self.supported_by_sources, n),
            unmarked=self.unmarked,
        )


_COUNTS: Final = (
    "sentences",
    "scored",
    "checkable",
    "citations",
    "supporting_citations",
    "supported_by_citations",
    "uncited",
    "misattributed",
    "contradicted",
    "supported_by_sources",
    "unmarked",
)


def metrics_of(sentences: Iterable[CitationSentence]) -> CitationMetrics:
    """The metrics of one answer (see the module docstring)."""
    t = _Tally()
    for s in sentences:
        t.sentences += 1
        if s.status != "done" or s.label is None:
            continue
        t.scored += 1
        t.labels[s.label] += 1
        if s.label == "not_checkable":
            continue
        t.checkable += 1
        t.contradicted += 1 if s.label == "contradicted" else 0
        t.supported_by_sources += 1 if s.supported_by or s.misattributed else 0
        if s.unmarked:
            t.unmarked += 1
            continue
        t.citations += len(s.cited) + len(s.missing)
        t.supporting_citations += len(s.supported_by)
        t.supported_by_citations += 1 if s.supported_by else 0
        t.uncited += 1 if s.label == "uncited" else 0
        t.misattributed += 1 if s.misattributed else 0
    return t.metrics()


def add_metrics(parts: Iterable[CitationMetrics]) -> CitationMetrics:
    """A job's metrics from its answers' (micro average: counts summed, rates recomputed)."""
    t = _Tally()
    for m in parts:
        t.add(m)
    return t.metrics()
