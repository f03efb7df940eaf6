"""The packing audit: do packed verdicts agree with the same sentences asked one per request?

A packed job asks a sample of its packed sentences again, each in a request of its own (the unpacked
shape), and compares: the label each gets at the job's cutoffs, and every probability both requests
returned (`checkable`, each `supports_k`, each `contradicts_k`). Which answers are sampled is fixed by their
position (`audited`), so a re-run samples the same ones. Parts from each answer add up to the job's
`packing_audit`; a warning is raised when packing moved labels or probabilities more than a team should
accept without looking (docs/operations.md, "Is packing safe for my model and data?").

Pure: the report builder (jobs/citations.py) hands in the pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pydantic import Field

from checks.contracts import StoredContract

if TYPE_CHECKING:  # the contracts import this module's models
    from checks.citation_contracts import SentenceScore

__all__ = [
    "LABEL_AGREEMENT_MIN",
    "MEAN_ABS_DELTA_MAX",
    "AuditPair",
    "AuditPart",
    "PackingAudit",
    "PositionAgreement",
    "audit_part",
    "audited",
    "combine",
]

LABEL_AGREEMENT_MIN: Final = 0.99
MEAN_ABS_DELTA_MAX: Final = 0.02


def audited(position: int, share: float) -> bool:
    """Whether the answer at row `position` (0-based) is audited: every `round(1 / share)`-th answer from
    the first, so a job of any size audits at least one answer and about `share` of them."""
    if share <= 0:
        return False
    step = max(1, round(1 / share))
    return position % step == 0


@dataclass(frozen=True)
class AuditPair:
    """One sentence asked in its pack (at `position` of a pack of `size`) and again alone."""

    position: int
    packed: SentenceScore
    solo: SentenceScore
    packed_label: str | None
    solo_label: str | None


def _deltas(a: SentenceScore, b: SentenceScore) -> list[float]:
    out = [abs(a.checkable - b.checkable)]
    out += [abs(p - b.supports[k]) for k, p in a.supports.items() if k in b.supports]
    out += [abs(p - b.contradicts[k]) for k, p in a.contradicts.items() if k in b.contradicts]
    return out


class PositionAgreement(StoredContract):
    sentences: int = 0
    agree: int = 0


class AuditPart(StoredContract):
    """What one answer's audit adds to the job's (stored in its report summary): sums, so parts add up."""

    sentences: int = 0
    agree: int = 0
    deltas: int = 0
    delta_sum: float = 0.0
    max_abs_delta: float = 0.0
    by_position: dict[str, PositionAgreement] = Field(default_factory=dict)


def audit_part(pairs: Sequence[AuditPair]) -> AuditPart:
    by_position: dict[str, PositionAgreement] = {}
    agree = 0
    deltas: list[float] = []
    for pair in pairs:
        same = pair.packed_label == pair.solo_label
        agree += same
        deltas += _deltas(pair.packed, pair.solo)
        key = str(pair.position + 1)
        seen = by_position.get(key, PositionAgreement())
        by_position[key] = PositionAgreement(sentences=seen.sentences + 1, agree=seen.agree + same)
    return AuditPart(
        sentences=len(pairs),
        agree=agree,
        deltas=len(deltas),
        delta_sum=round(sum(deltas), 6),
        max_abs_delta=round(max(deltas, default=0.0), 4),
        by_position=by_position,
    )


class PositionFigures(StoredContract):
    sentences: int
    label_agreement: float


class PackingAudit(StoredContract):
    """The job's packing audit (docs/spec.md §9.4)."""

    sentences: int = Field(description="Packed sentences asked again one per request.")
    label_agreement: float | None = Field(description="Share whose label was the same both ways.")
    mean_abs_delta: float | None = Field(description="Mean |Δp| over every probability both returned.")
    max_abs_delta: float | None = None
    by_position: dict[str, PositionFigures] = Field(
        default_factory=dict,
        description="Label agreement by the sentence's position in its pack (1 = first).",
    )
    warning: str | None = None


def combine(parts: Iterable[AuditPart]) -> PackingAudit | None:
    """The job's audit from its answers' parts; None when nothing was audited."""
    sentences = agree = deltas = 0
    delta_sum = max_delta = 0.0
    positions: dict[str, list[int]] = {}
    for part in parts:
        sentences += part.sentences
        agree += part.agree
        deltas += part.deltas
        delta_sum += part.delta_sum
        max_delta = max(max_delta, part.max_abs_delta)
        for key, figures in part.by_position.items():
            seen = positions.setdefault(key, [0, 0])
            seen[0] += figures.sentences
            seen[1] += figures.agree
    if not sentences:
        return None
    agreement = agree / sentences
    mean = delta_sum / deltas if deltas else 0.0
    warning = None
    if agreement < LABEL_AGREEMENT_MIN or mean > MEAN_ABS_DELTA_MAX:
        warning = (
            f"packed verdicts differ from unpacked ones: label agreement {agreement:.3f} "
            f"(want ≥ {LABEL_AGREEMENT_MIN}), mean |Δp| {mean:.4f} (want ≤ {MEAN_ABS_DELTA_MAX}); "
            "consider a smaller pack_size for this model and data"
        )
    return PackingAudit(
        sentences=sentences,
        label_agreement=round(agreement, 4),
        mean_abs_delta=round(mean, 4),
        max_abs_delta=round(max_delta, 4),
        by_position={
            k: PositionFigures(sentences=v[0], label_agreement=round(v[1] / v[0], 4))
            for k, v in sorted(positions.items(), key=lambda kv: int(kv[0]))
        },
        warning=warning,
    )
