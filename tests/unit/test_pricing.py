"""Prices and cost arithmetic (docs/spec.md §1, §2), checked against the reference run's recorded figures."""

from __future__ import annotations

import math

import pytest

from checks import pricing
from checks.pricing import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    CallUsage,
    agent_search_cost_usd,
    call_cost_usd,
    cost_per_1000_claims,
    decisions_cost_usd,
    input_rate_per_million,
    round_usd,
    search_api_cost_usd,
    search_cost_usd,
    sum_costs,
)

FLASH = "pplx-decider-flash-latest"


def test_the_five_models_and_their_rates() -> None:
    assert {
        "pplx-decider-v1.1-27b",
        "pplx-decider-latest",
        "pplx-decider-v1.2",
        "pplx-decider-flash-latest",
        "pplx-decider-flash-v1.2",
    } == KNOWN_MODELS
    assert DEFAULT_MODEL == "pplx-decider-latest"
    flash = {m for m in KNOWN_MODELS if "flash" in m}
    assert {input_rate_per_million(m) for m in flash} == {0.01}
    assert {input_rate_per_million(m) for m in KNOWN_MODELS - flash} == {0.02}


@pytest.mark.parametrize("model", ["gpt-4o", "", "PPLX-DECIDER-LATEST"])
def test_unknown_model_is_named(model: str) -> None:
    with pytest.raises(ValueError, match="unknown model") as info:
        decisions_cost_usd(10, model)
    assert repr(model) in str(info.value)


def test_unit_prices() -> None:
    assert decisions_cost_usd(1_000_000, DEFAULT_MODEL) == pytest.approx(0.02)
    assert decisions_cost_usd(1_000_000, FLASH) == pytest.approx(0.01)
    assert decisions_cost_usd(99, DEFAULT_MODEL) == pytest.approx(0.00000198)
    assert decisions_cost_usd(0, DEFAULT_MODEL) == 0
    assert search_cost_usd(1_000) == pytest.approx(1.00)  # $1 per 1,000 grounded searches
    assert agent_search_cost_usd(1, fast=False) == pytest.approx(0.0025)
    assert agent_search_cost_usd(1, fast=True) == pytest.approx(0.001)
    assert search_api_cost_usd(1_000) == pytest.approx(5.00)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "10", None])
def test_counts_must_be_whole_and_not_negative(bad: object) -> None:
    with pytest.raises(ValueError):
        decisions_cost_usd(bad, DEFAULT_MODEL)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        search_cost_usd(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        search_api_cost_usd(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mean_tokens", "attempts", "n", "printed"),
    [
        (1906, 24, 24, "1.0381"),  # eval, grounded: the figure docs/spec.md §7 records
        (99, 0, 24, "0.0020"),  # eval, ungrounded
        (1908, 24, 24, "1.0382"),  # check --grounded
        (915, 24, 24, "1.0183"),  # filler before the claim, grounded
        (1602, 24, 24, "1.0320"),  # filler after the claim, grounded
        (212, 0, 24, "0.0042"),  # padded, ungrounded
        (913, 1, 1, "1.0183"),  # one buried claim
    ],
)
def test_cost_per_1000_matches_the_recorded_runs(
    mean_tokens: int, attempts: int, n: int, printed: str
) -> None:
    cost = cost_per_1000_claims(mean_tokens, attempts, n, DEFAULT_MODEL)
    assert f"{cost:.4f}" == printed


def test_cost_per_1000_formula() -> None:
    # 1,000 claims x 250 tokens x $0.02/M = $0.005, plus 1,000 searches x $0.001 = $1.00
    assert cost_per_1000_claims(250, 4, 4, DEFAULT_MODEL) == pytest.approx(1.005)
    assert cost_per_1000_claims(50, 0, 4, DEFAULT_MODEL) == pytest.approx(1000 * 50 * 0.02 / 1e6)
    assert cost_per_1000_claims(50, 0, 4, FLASH) == pytest.approx(1000 * 50 * 0.01 / 1e6)
    assert cost_per_1000_claims(0, 6, 4, DEFAULT_MODEL) == pytest.approx(1.5)  # retries bill searches too


@pytest.mark.parametrize(
    ("mean_tokens", "attempts", "n"), [(10.0, 1, 0), (10.0, 1, -2), (math.nan, 1, 1), (-1.0, 0, 1)]
)
def test_cost_per_1000_rejects_nonsense(mean_tokens: float, attempts: int, n: int) -> None:
    with pytest.raises(ValueError):
        cost_per_1000_claims(mean_tokens, attempts, n, DEFAULT_MODEL)


def test_call_cost_per_endpoint() -> None:
    answered = CallUsage("decisions", DEFAULT_MODEL, input_tokens=1_906, searches=1)
    assert call_cost_usd(answered) == pytest.approx(0.001 + 1_906 * 0.02 / 1e6)
    failed = CallUsage("decisions", None, input_tokens=0, searches=1)  # a 5xx after its search ran
    assert call_cost_usd(failed) == pytest.approx(0.001)
    assert call_cost_usd(CallUsage("decisions", FLASH, input_tokens=1_000_000)) == pytest.approx(0.01)
    assert call_cost_usd(CallUsage("agent", searches=2)) == pytest.approx(0.005)
    assert call_cost_usd(CallUsage("agent", searches=2, fast=True)) == pytest.approx(0.002)
    assert call_cost_usd(CallUsage("search", searches=1)) == pytest.approx(0.005)
    with pytest.raises(ValueError, match="unknown model"):
        call_cost_usd(CallUsage("decisions", "nope", input_tokens=5))
    with pytest.raises(ValueError, match="endpoint"):
        call_cost_usd(CallUsage("responses", searches=1))  # type: ignore[arg-type]


def test_sum_costs_breaks_a_job_down_and_ignores_order() -> None:
    calls = [
        CallUsage("decisions", DEFAULT_MODEL, input_tokens=1_000, searches=1),
        CallUsage("decisions", DEFAULT_MODEL, input_tokens=0, searches=1),  # failed grounded attempt
        CallUsage("decisions", FLASH, input_tokens=2_000),
        CallUsage("agent", searches=3, fast=True),
        CallUsage("agent", searches=1),
        CallUsage("search", searches=1),
    ]
    total = sum_costs(calls)
    assert total.decisions_tokens_usd == pytest.approx(1_000 * 0.02 / 1e6 + 2_000 * 0.01 / 1e6)
    assert total.grounded_searches_usd == pytest.approx(0.002)
    assert total.agent_searches_usd == pytest.approx(3 * 0.001 + 0.0025)
    assert total.search_api_usd == pytest.approx(0.005)
    assert total.total_usd == pytest.approx(math.fsum(call_cost_usd(c) for c in calls))
    assert sum_costs(reversed(calls)) == total
    assert total.as_dict()["total_usd"] == total.total_usd
    assert sum_costs([]).total_usd == 0


def test_round_usd_is_for_presentation() -> None:
    assert round_usd(0.00000198) == 0.000002
    assert round_usd(1.0381234, 4) == 1.0381
    assert pricing.GROUNDED_SEARCH_USD == pytest.approx(0.001)
