"""The CI gate: `--fail-under NAME=X` / `--fail-over NAME=X` over a finished job's figures (docs/cli.md).

Each kind names the figures a gate may read, all from its job summary (the contracts in checks/kinds/):

- `citations`: the job's citation metrics (checks/citation_verdicts.py), rates from 0 to 1.
- `claims`: each mode's scorecard — the rates of supported, contradicted, review and errored claims over
  the claims, the Brier score, and the counts of missed failures and false contradictions. A bare name
  gates every mode the job ran; `grounded.NAME` one mode.
- `answer`: the rates of each label over the checkable sentences of the answers after review.

A figure with no value (no checkable sentence, no labelled claim) misses every gate: a gate that cannot be
checked must not pass. Pure; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["METRICS", "Gate", "figures", "misses", "parse_gate", "valid_names"]

Direction = Literal["under", "over"]

CITATION_METRICS: Final = (
    "citation_recall",
    "citation_precision",
    "supported_share",
    "uncited_rate",
    "misattributed_rate",
    "contradicted_rate",
)
CLAIM_METRICS: Final = (
    "supported_rate",
    "contradicted_rate",
    "review_rate",
    "error_rate",
    "brier",
    "missed_failures",
    "false_contradictions",
)
ANSWER_METRICS: Final = (
    "supported_share",
    "weak_rate",
    "unsupported_rate",
    "contradicted_rate",
    "uncited_rate",
)
METRICS: Final[Mapping[str, tuple[str, ...]]] = {
    "citations": CITATION_METRICS,
    "claims": CLAIM_METRICS,
    "answer": ANSWER_METRICS,
}
CLAIM_MODES: Final = ("ungrounded", "grounded")


@dataclass(frozen=True)
class Gate:
    """One bound: `under` fails a figure below `bound`, `over` one above it."""

    name: str
    bound: float
    direction: Direction

    @property
    def option(self) -> str:
        return f"--fail-{self.direction} {self.name}={self.bound:g}"


def valid_names(kind: str) -> tuple[str, ...]:
    """Every name a gate of `kind` may use (claims: bare, and per mode)."""
    names = METRICS.get(kind, ())
    if kind == "claims":
        return (*names, *(f"{mode}.{n}" for mode in CLAIM_MODES for n in names))
    return names


def parse_gate(text: str, direction: Direction, kind: str) -> Gate:
    """`NAME=X` as a gate of `kind`; raises ValueError naming the problem (and the valid names)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name or not raw.strip():
        raise ValueError(f"{text!r} is not NAME=NUMBER (for example citation_recall=0.8)")
    if name not in valid_names(kind):
        raise ValueError(
            f"unknown metric {name!r} for a {kind} job (valid: {', '.join(METRICS.get(kind, ()))})"
            + (" — prefix grounded. or ungrounded. for one mode" if kind == "claims" else "")
        )
    try:
        bound = float(raw)
    except ValueError:
        raise ValueError(f"{raw.strip()!r} is not a number (in {text!r})") from None
    if not math.isfinite(bound):
        raise ValueError(f"{raw.strip()!r} is not a finite number (in {text!r})")
    return Gate(name, bound, direction)


def _rate(numerator: object, denominator: object) -> float | None:
    if not isinstance(numerator, int | float) or not isinstance(denominator, int | float) or not denominator:
        return None
    return round(float(numerator) / float(denominator), 4)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def figures(kind: str, summary: Mapping[str, object]) -> dict[str, float | None]:
    """The job's figures by gate name (claims: `mode.name` for each mode the job ran)."""
    if kind == "citations":
        metrics = summary.get("metrics")
        m = metrics if isinstance(metrics, Mapping) else {}
        return {name: _number(m.get(name)) for name in CITATION_METRICS}
    if kind == "claims":
        found: dict[str, float | None] = {}
        cards = summary.get("scorecards")
        for mode, card in (cards if isinstance(cards, Mapping) else {}).items():
            if not isinstance(card, Mapping):
                continue
            n = card.get("n")
            found[f"{mode}.supported_rate"] = _rate(card.get("supported"), n)
            found[f"{mode}.contradicted_rate"] = _rate(card.get("contradicted"), n)
            found[f"{mode}.review_rate"] = _rate(card.get("review"), n)
            found[f"{mode}.error_rate"] = _rate(card.get("errors"), n)
            found[f"{mode}.brier"] = _number(card.get("brier"))
            found[f"{mode}.missed_failures"] = _number(card.get("missed_failures"))
            found[f"{mode}.false_contradictions"] = _number(card.get("false_contradictions"))
        return found
    if kind == "answer":
        after = summary.get("after")
        labels = {str(k): v for k, v in (after if isinstance(after, Mapping) else {}).items()}
        checkable = sum(v for k, v in labels.items() if isinstance(v, int) and k != "not_checkable")
        return {
            "supported_share": _rate(labels.get("supported", 0), checkable),
            "weak_rate": _rate(labels.get("weak", 0), checkable),
            "unsupported_rate": _rate(labels.get("unsupported", 0), checkable),
            "contradicted_rate": _rate(labels.get("contradicted", 0), checkable),
            "uncited_rate": _rate(labels.get("uncited", 0), checkable),
        }
    return {}


def misses(gates: Sequence[Gate], found: Mapping[str, float | None]) -> list[str]:
    """One line per figure that missed its gate (empty: every gate is met). A bare claims name is checked
    for every mode the job ran."""
    lines: list[str] = []
    for gate in gates:
        names = [gate.name] if gate.name in found else sorted(k for k in found if k.endswith(f".{gate.name}"))
        if not names:
            names = [gate.name]
        for name in names:
            value = found.get(name)
            if value is None:
                lines.append(f"{name} has no value in this job, so it cannot meet {gate.option}")
            elif gate.direction == "under" and value < gate.bound:
                lines.append(f"{name} {value:g} is under {gate.bound:g} ({gate.option})")
            elif gate.direction == "over" and value > gate.bound:
                lines.append(f"{name} {value:g} is over {gate.bound:g} ({gate.option})")
    return lines
