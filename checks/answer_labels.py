"""The answer gate's label policy (docs/spec.md §3): our code, not the model, turns one sentence's
probabilities into a label. The cutoffs are starting points from the reference recipe, not tuned production
values.

Rules, first match wins; comparisons use the unrounded probabilities, rule texts print three decimals
(so 0.6999 prints as 0.700 and is still `weak`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Final, Literal, get_args

from checks.answer_requests import CHECKABLE_QUESTION, contradicts_question, supports_question

__all__ = [
    "CHECKABLE_MIN",
    "CONTRADICTED_MIN",
    "DEFAULT_CUTOFFS",
    "LABELS",
    "SUPPORTED_MIN",
    "WEAK_MIN",
    "Label",
    "LabelCutoffs",
    "LabelResult",
    "label_sentence",
]

CHECKABLE_MIN: Final = 0.5  # checkable below this -> not_checkable
CONTRADICTED_MIN: Final = 0.6  # any contradicts at or above this -> contradicted
SUPPORTED_MIN: Final = 0.7  # best supports at or above this -> supported
WEAK_MIN: Final = 0.4  # best supports at or above this (and below SUPPORTED_MIN) -> weak

Label = Literal["supported", "weak", "unsupported", "contradicted", "uncited", "not_checkable"]
LABELS: Final[tuple[Label, ...]] = get_args(Label)  # display order, also the order of label counts


@dataclass(frozen=True)
class LabelCutoffs:
    """The four cutoffs of the policy. The answer kind always uses `DEFAULT_CUTOFFS` (its recorded outcomes
    were measured with them); the citations kind takes them as options and replays others."""

    supported_min: float = SUPPORTED_MIN
    weak_min: float = WEAK_MIN
    contradicted_min: float = CONTRADICTED_MIN
    checkable_min: float = CHECKABLE_MIN


DEFAULT_CUTOFFS: Final = LabelCutoffs()
MISSING_RESULT: Final = "no search result has that number"


@dataclass(frozen=True)
class LabelResult:
    """The label, the rule that fired, and the numbers it compared (None where there was no passage)."""

    label: Label
    rule: str
    checkable: float
    best_support: float | None
    best_passage: str | None  # the passage with the highest support; the first one on ties
    max_contradiction: float | None
    contradicting_passage: str | None  # the passage with the highest contradiction; first on ties

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def label_sentence(
    answers: Mapping[str, float],
    passage_ids: Iterable[str | int],
    missing_ids: Sequence[int | str] = (),
    *,
    cutoffs: LabelCutoffs = DEFAULT_CUTOFFS,
    missing_note: str = MISSING_RESULT,
) -> LabelResult:
    """Label one sentence from its Decisions answers (question name -> probability of yes).

    `passage_ids` are the passages the request cited; none means no usable citation. `missing_ids`
    (markers pointing at no search result) don't change the label but are named in the rule text, followed
    by `missing_note` (what a marker names that does not exist: a search result, a source).
    """
    c = cutoffs
    checkable = _probability(answers, CHECKABLE_QUESTION)
    ids = [str(n) for n in passage_ids]
    supports = {n: _probability(answers, supports_question(n)) for n in ids}
    contradicts = {n: _probability(answers, contradicts_question(n)) for n in ids}
    best_passage = max(supports, key=supports.__getitem__) if supports else None
    worst_passage = max(contradicts, key=contradicts.__getitem__) if contradicts else None
    best = supports[best_passage] if best_passage is not None else None
    worst = contradicts[worst_passage] if worst_passage is not None else None

    label: Label
    if checkable < c.checkable_min:
        label, rule = "not_checkable", f"checkable {checkable:.3f} < {c.checkable_min}"
    elif worst is not None and worst >= c.contradicted_min:
        rule = f"passage {worst_passage} contradicts {worst:.3f} ≥ {c.contradicted_min}"
        label = "contradicted"
    elif best is None:
        label, rule = "uncited", f"checkable {checkable:.3f}, no usable citation"
    elif best >= c.supported_min:
        label, rule = "supported", f"passage {best_passage} supports {best:.3f} ≥ {c.supported_min}"
    elif best >= c.weak_min:
        label, rule = "weak", f"best support {best:.3f} (passage {best_passage}) < {c.supported_min}"
    else:
        label, rule = "unsupported", f"best support {best:.3f} (passage {best_passage}) < {c.weak_min}"
    if missing_ids:
        cited = ", ".join(f"[{n}]" for n in missing_ids)
        rule += f"; cites {cited} but {missing_note}"
    return LabelResult(label, rule, checkable, best, best_passage, worst, worst_passage)


def _probability(answers: Mapping[str, float], question: str) -> float:
    """A probability we can compare: a real number in [0, 1]. NaN would silently fail every cutoff."""
    if question not in answers:
        raise ValueError(f"no answer to {question!r}")
    value = answers[question]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"answer to {question!r} is not a number: {value!r}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"answer to {question!r} is not a probability: {value!r}")
    return float(value)
