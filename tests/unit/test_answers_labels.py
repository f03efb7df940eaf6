"""The answer gate's label policy: order of the rules, inclusive cutoffs, unrounded comparisons."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks.answers import (
    CHECKABLE_MIN,
    CONTRADICTED_MIN,
    LABELS,
    SUPPORTED_MIN,
    WEAK_MIN,
    label_sentence,
)


def answers(checkable: float = 0.95, **per_passage: tuple[float, float]) -> dict[str, float]:
    """per_passage: p<n>=(supports, contradicts)."""
    out = {"checkable": checkable}
    for key, (support, contradiction) in per_passage.items():
        n = key.removeprefix("p")
        out[f"supports_{n}"] = support
        out[f"contradicts_{n}"] = contradiction
    return out


def test_cutoffs_are_the_contract_numbers() -> None:
    assert (CHECKABLE_MIN, CONTRADICTED_MIN, SUPPORTED_MIN, WEAK_MIN) == (0.5, 0.6, 0.7, 0.4)
    assert LABELS == ("supported", "weak", "unsupported", "contradicted", "uncited", "not_checkable")


@pytest.mark.parametrize(
    ("checkable", "support", "contradiction", "label"),
    [
        (0.4999, 0.99, 0.99, "not_checkable"),  # checkable first, even over contradiction
        (0.5, 0.99, 0.6, "contradicted"),  # both cutoffs inclusive
        (0.5, 0.99, 0.5999, "supported"),
        (0.9, 0.7, 0.0, "supported"),
        (0.9, 0.6999, 0.0, "weak"),  # prints 0.700, still weak
        (0.9, 0.4, 0.0, "weak"),
        (0.9, 0.3999, 0.0, "unsupported"),
        (0.9, 0.0, 0.0, "unsupported"),
    ],
)
def test_bands_and_boundaries(checkable: float, support: float, contradiction: float, label: str) -> None:
    assert label_sentence(answers(checkable, p1=(support, contradiction)), ["1"]).label == label


def test_unrounded_value_decides_but_rule_prints_three_decimals() -> None:
    result = label_sentence(answers(p2=(0.6999, 0.0)), ["2"])
    assert result.label == "weak"
    assert "0.700" in result.rule and "passage 2" in result.rule
    assert result.best_support == 0.6999


def test_any_contradicting_passage_beats_a_supporting_one() -> None:
    result = label_sentence(answers(p1=(0.95, 0.0), p4=(0.1, 0.72)), ["1", "4"])
    assert result.label == "contradicted"
    assert (result.max_contradiction, result.contradicting_passage) == (0.72, "4")
    assert (result.best_support, result.best_passage) == (0.95, "1")
    assert "passage 4" in result.rule and "0.720" in result.rule


def test_best_single_passage_decides_support() -> None:
    result = label_sentence(answers(p1=(0.3, 0.0), p2=(0.81, 0.1), p3=(0.81, 0.0)), [1, 2, 3])
    assert result.label == "supported"
    assert result.best_passage == "2"  # the first of equal bests
    assert result.best_support == 0.81


def test_uncited_when_no_passage_was_sent() -> None:
    result = label_sentence({"checkable": 0.999}, [])
    assert result.label == "uncited"
    assert result.best_support is None and result.max_contradiction is None and result.best_passage is None
    assert "0.999" in result.rule and "no usable citation" in result.rule


def test_not_checkable_beats_uncited() -> None:
    result = label_sentence({"checkable": 0.2}, [])
    assert result.label == "not_checkable"
    assert "0.200" in result.rule


def test_missing_ids_are_named_in_the_rule_without_changing_the_label() -> None:
    plain = label_sentence(answers(p1=(0.9, 0.0)), ["1"])
    noted = label_sentence(answers(p1=(0.9, 0.0)), ["1"], missing_ids=[9, 12])
    assert noted.label == plain.label == "supported"
    assert noted.rule.startswith(plain.rule)
    assert "[9], [12]" in noted.rule and "no search result" in noted.rule


def test_extra_answers_are_ignored_and_missing_ones_are_errors() -> None:
    assert label_sentence({**answers(p1=(0.9, 0.0)), "other": 0.0}, ["1"]).label == "supported"
    with pytest.raises(ValueError, match="supports_2"):
        label_sentence(answers(p1=(0.9, 0.0)), ["1", "2"])
    with pytest.raises(ValueError, match="checkable"):
        label_sentence({}, [])


@pytest.mark.parametrize("bad", [math.nan, 1.5, -0.1, math.inf, True, "0.9", None])
def test_values_that_are_not_probabilities_are_errors(bad: object) -> None:
    with pytest.raises(ValueError, match="checkable"):
        label_sentence({"checkable": bad}, [])


def test_as_dict_keeps_every_number() -> None:
    result = label_sentence(answers(p1=(0.5, 0.1)), ["1"])
    assert result.as_dict() == {
        "label": "weak",
        "rule": result.rule,
        "checkable": 0.95,
        "best_support": 0.5,
        "best_passage": "1",
        "max_contradiction": 0.1,
        "contradicting_passage": "1",
    }


probability = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=100, deadline=None)
@given(checkable=probability, pairs=st.lists(st.tuples(probability, probability), max_size=4))
def test_label_matches_the_rule_table(checkable: float, pairs: list[tuple[float, float]]) -> None:
    """An independent statement of docs/spec.md §3's table, first match wins."""
    values = {"checkable": checkable}
    for n, (support, contradiction) in enumerate(pairs, start=1):
        values[f"supports_{n}"] = support
        values[f"contradicts_{n}"] = contradiction
    got = label_sentence(values, [str(n) for n in range(1, len(pairs) + 1)]).label
    supports = [s for s, _ in pairs]
    contradicts = [c for _, c in pairs]
    if checkable < 0.5:
        expected = "not_checkable"
    elif any(c >= 0.6 for c in contradicts):
        expected = "contradicted"
    elif not pairs:
        expected = "uncited"
    elif max(supports) >= 0.7:
        expected = "supported"
    elif max(supports) >= 0.4:
        expected = "weak"
    else:
        expected = "unsupported"
    assert got == expected
