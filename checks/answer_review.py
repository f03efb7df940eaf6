"""After labelling (docs/spec.md §3): which sentences go back to the Agent API, what each investigation
decided, the final answer the report shows, and the job summary.

These functions work on plain records so that jobs/ can rebuild them from stored items at any time: a
finished job, or one whose investigation failed, which still gets a report of everything completed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from checks.answer_labels import LABELS, Label

__all__ = [
    "FLAGGED_LABELS",
    "MAX_INVESTIGATIONS",
    "NOT_CONFIRMED",
    "NOT_REVIEWED",
    "REPLACED",
    "AnswerSummary",
    "FinalAnswer",
    "FinalSentence",
    "Outcome",
    "Review",
    "Scored",
    "final_answer",
    "review_may_start",
    "review_outcome",
    "select_for_review",
    "summarize",
]

FLAGGED_LABELS: Final[frozenset[Label]] = frozenset({"weak", "unsupported", "contradicted", "uncited"})
MAX_INVESTIGATIONS: Final = 4  # caps the extra Agent API calls per answer

Outcome = Literal["replaced", "not confirmed", "not reviewed"]
REPLACED: Final = "replaced"
NOT_CONFIRMED: Final = "not confirmed"
NOT_REVIEWED: Final = "not reviewed"


def select_for_review(labels: Sequence[str], limit: int = MAX_INVESTIGATIONS) -> tuple[list[int], list[int]]:
    """Positions of the flagged sentences to investigate (the first `limit`) and of those past the limit,
    which are marked "not reviewed"."""
    if limit < 0:
        raise ValueError("the investigation limit cannot be negative")
    flagged = [i for i, label in enumerate(labels) if label in FLAGGED_LABELS]
    return flagged[:limit], flagged[limit:]


def review_may_start(labels: Sequence[str | None]) -> bool:
    """Whether the investigations may start: only once every sentence of the answer has a label.

    A sentence whose scoring failed (or was skipped) has no label, and then the review does not start at
    all. The reference recipe stops at the first failed request, so its recorded outcomes never include a
    review over part of an answer; with one sentence unlabelled it is not even known which flagged
    sentences are the first MAX_INVESTIGATIONS; and the Agent calls would be spent on a question that is
    reported incomplete anyway. Retrying the failed sentence lets the review start.
    """
    return all(label is not None for label in labels)


def review_outcome(rewrite_labels: Iterable[str]) -> Outcome:
    """Any supported rewrite sentence replaces the original; otherwise the original stays."""
    return REPLACED if any(label == "supported" for label in rewrite_labels) else NOT_CONFIRMED


@dataclass(frozen=True)
class Scored:
    """One scored sentence, original or rewrite: the fields the final answer and the summary need."""

    claim: str
    paragraph: int
    label: Label
    urls: tuple[str, ...] = ()  # URLs of the passages it was scored against, in citation order
    input_tokens: int = 0  # of its Decisions request; 0 for a copy that reused another's request


@dataclass(frozen=True)
class Review:
    """What happened to one flagged sentence. Use `Review.of(rewrite)` or `Review.not_reviewed()`."""

    outcome: Outcome
    rewrite: tuple[Scored, ...] = ()

    def __post_init__(self) -> None:
        if self.outcome == NOT_REVIEWED:
            if self.rewrite:
                raise ValueError("a sentence that was not reviewed has no rewrite")
        elif self.outcome != review_outcome(s.label for s in self.rewrite):
            raise ValueError(f"outcome {self.outcome!r} does not match the rewrite's labels")

    @classmethod
    def of(cls, rewrite: Sequence[Scored]) -> Review:
        return cls(review_outcome(s.label for s in rewrite), tuple(rewrite))

    @classmethod
    def not_reviewed(cls) -> Review:
        return cls(NOT_REVIEWED)

    @property
    def kept(self) -> tuple[Scored, ...]:
        """The rewrite sentences that go into the final answer."""
        if self.outcome != REPLACED:
            return ()
        return tuple(s for s in self.rewrite if s.label == "supported")


@dataclass(frozen=True)
class FinalSentence:
    claim: str
    paragraph: int  # the original sentence's paragraph, also for rewrite sentences that replace it
    label: Label
    citations: tuple[int, ...]  # numbers into FinalAnswer.sources
    origin: int  # position of the original sentence this comes from
    replaced: bool  # a rewrite sentence standing in for the original
    outcome: Outcome | None  # the badge on an original that stayed after being flagged


@dataclass(frozen=True)
class FinalAnswer:
    sentences: tuple[FinalSentence, ...]
    sources: tuple[str, ...]  # citation number k is sources[k - 1]

    def paragraphs(self) -> list[list[FinalSentence]]:
        grouped: dict[int, list[FinalSentence]] = {}
        for sentence in self.sentences:
            grouped.setdefault(sentence.paragraph, []).append(sentence)
        return list(grouped.values())


def final_answer(originals: Sequence[Scored], reviews: Mapping[int, Review]) -> FinalAnswer:
    """The answer after review. A replaced sentence becomes its supported rewrite sentences (the rest of
    the rewrite is dropped); any other sentence stays with its label and, if flagged, its outcome.

    Rewrites come from separate searches whose result numbers overlap, so citations are renumbered by URL
    in order of first appearance. `reviews` is keyed by position in `originals`; a flagged sentence with
    no review (its investigation failed or has not run) stays as it is.
    """
    _check_positions(originals, reviews)
    numbers: dict[str, int] = {}

    def cite(urls: Iterable[str]) -> tuple[int, ...]:
        return tuple(numbers.setdefault(url, len(numbers) + 1) for url in dict.fromkeys(urls) if url)

    sentences: list[FinalSentence] = []
    for position, original in enumerate(originals):
        review = reviews.get(position)
        replaced = review is not None and review.outcome == REPLACED
        # A replaced sentence gives way to its kept rewrite sentences; any other stays, with its badge.
        stand_ins = review.kept if review is not None and replaced else (original,)
        outcome = review.outcome if review is not None and not replaced else None
        sentences += [
            FinalSentence(
                claim=s.claim,
                paragraph=original.paragraph,
                label=s.label,
                citations=cite(s.urls),
                origin=position,
                replaced=replaced,
                outcome=outcome,
            )
            for s in stand_ins
        ]
    return FinalAnswer(tuple(sentences), tuple(numbers))


@dataclass(frozen=True)
class AnswerSummary:
    sentences: int
    investigated: int
    replaced: int
    decisions_requests: int
    decisions_input_tokens: int
    seconds: float
    before: dict[str, int] = field(default_factory=dict)  # label counts of the first pass
    after: dict[str, int] = field(default_factory=dict)  # label counts of the final answer

    def as_dict(self) -> dict[str, object]:
        return {
            "sentences": self.sentences,
            "investigated": self.investigated,
            "replaced": self.replaced,
            "decisions_requests": self.decisions_requests,
            "decisions_input_tokens": self.decisions_input_tokens,
            "seconds": round(self.seconds, 1),
            "before": dict(self.before),
            "after": dict(self.after),
        }


def summarize(originals: Sequence[Scored], reviews: Mapping[int, Review], seconds: float) -> AnswerSummary:
    """Totals for the job row and the report. Every scored sentence, rewrites included, is one Decisions
    request; label counts list only labels that occur, in `LABELS` order."""
    _check_positions(originals, reviews)
    rewrites = [s for review in reviews.values() for s in review.rewrite]
    return AnswerSummary(
        sentences=len(originals),
        investigated=sum(1 for r in reviews.values() if r.outcome != NOT_REVIEWED),
        replaced=sum(1 for r in reviews.values() if r.outcome == REPLACED),
        decisions_requests=len(originals) + len(rewrites),
        decisions_input_tokens=sum(s.input_tokens for s in [*originals, *rewrites]),
        seconds=seconds,
        before=_label_counts(s.label for s in originals),
        after=_label_counts(s.label for s in final_answer(originals, reviews).sentences),
    )


def _label_counts(labels: Iterable[Label]) -> dict[str, int]:
    counts = Counter(labels)
    return {label: counts[label] for label in LABELS if counts[label]}


def _check_positions(originals: Sequence[Scored], reviews: Mapping[int, Review]) -> None:
    stray = sorted(p for p in reviews if not 0 <= p < len(originals))
    if stray:
        raise ValueError(f"reviews for sentence positions {stray} but only {len(originals)} sentences")
