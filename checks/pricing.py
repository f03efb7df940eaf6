"""Published Perplexity prices (docs/spec.md §1) and the arithmetic that turns usage into dollars.

Money is a `float` of US dollars everywhere in factgate (the per-call rows, the job totals, the budget
check), so these functions return floats too. Per-call amounts are tiny (99 tokens cost $0.00000198) and
a float carries about 16 significant digits, so nothing here rounds: sums use `math.fsum`, and rounding
is left to presentation (`round_usd`, six decimals, half-even as Python's `round`).

Only what is billed per unit we can count is priced: Decisions input tokens (output is free), grounded
searches, Agent API `web_search` calls and Search API requests. Agent API token prices are not in the
spec, so agent calls are priced by their searches only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Literal

__all__ = [
    "AGENT_WEB_SEARCH_FAST_USD",
    "AGENT_WEB_SEARCH_USD",
    "DEFAULT_MODEL",
    "GROUNDED_SEARCH_USD",
    "INPUT_USD_PER_MILLION",
    "KNOWN_MODELS",
    "SEARCH_API_REQUEST_USD",
    "CallUsage",
    "CostBreakdown",
    "Endpoint",
    "agent_search_cost_usd",
    "call_cost_usd",
    "cost_per_1000_claims",
    "decisions_cost_usd",
    "input_rate_per_million",
    "round_usd",
    "search_api_cost_usd",
    "search_cost_usd",
    "sum_costs",
]

DEFAULT_MODEL = "pplx-decider-latest"  # the reference recipe's model; selects pplx-decider-v1.2

# US dollars per million input tokens. Output tokens are free.
INPUT_USD_PER_MILLION: Mapping[str, float] = MappingProxyType(
    {
        "pplx-decider-v1.1-27b": 0.02,
        "pplx-decider-latest": 0.02,
        "pplx-decider-v1.2": 0.02,
        "pplx-decider-flash-latest": 0.01,
        "pplx-decider-flash-v1.2": 0.01,
    }
)
KNOWN_MODELS: frozenset[str] = frozenset(INPUT_USD_PER_MILLION)

# A grounded Decisions request bills its search when the search returns, even if the decision then fails,
# and the response does not say whether a search ran: every grounded attempt is priced as one search, an
# upper bound on what is billed.
GROUNDED_SEARCH_USD = 1.00 / 1_000
AGENT_WEB_SEARCH_USD = 0.0025  # per `web_search` tool call
AGENT_WEB_SEARCH_FAST_USD = 0.001  # per `web_search` call with the `fast` preset
SEARCH_API_REQUEST_USD = 5.00 / 1_000

Endpoint = Literal["decisions", "agent", "search"]


def _count(value: object, name: str) -> int:
    # bool is an int in Python; a True token count is a bug upstream of us, not a count.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number of 0 or more, got {value!r}")
    return value


def input_rate_per_million(model: str) -> float:
    """Dollars per million input tokens for `model`; ValueError naming an unknown model."""
    try:
        return INPUT_USD_PER_MILLION[model]
    except (KeyError, TypeError):
        known = ", ".join(sorted(KNOWN_MODELS))
        raise ValueError(f"unknown model {model!r}: no price for it (known: {known})") from None


def decisions_cost_usd(input_tokens: int, model: str) -> float:
    """What `input_tokens` Decisions input tokens cost on `model`."""
    return _count(input_tokens, "input_tokens") * input_rate_per_million(model) / 1_000_000


def search_cost_usd(grounded_attempts: int) -> float:
    """Upper bound on the search bill: one search per grounded attempt, retries included."""
    return _count(grounded_attempts, "grounded_attempts") * GROUNDED_SEARCH_USD


def agent_search_cost_usd(calls: int, *, fast: bool) -> float:
    """Agent API `web_search` tool calls; the `fast` preset has its own, lower price."""
    price = AGENT_WEB_SEARCH_FAST_USD if fast else AGENT_WEB_SEARCH_USD
    return _count(calls, "calls") * price


def search_api_cost_usd(requests: int) -> float:
    """Search API requests (each one billed, whatever it returns)."""
    return _count(requests, "requests") * SEARCH_API_REQUEST_USD


def cost_per_1000_claims(mean_input_tokens: float, grounded_attempts: int, n: int, model: str) -> float:
    """Cost of 1,000 claims at this run's usage: 1000 × (mean tokens × rate + $0.001 × attempts / n).

    The seed's recorded grounded run (mean 1,906 tokens, 24 attempts for 24 claims) gives $1.03812.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a whole number of claims above 0, got {n!r}")
    if isinstance(mean_input_tokens, bool) or not math.isfinite(mean_input_tokens) or mean_input_tokens < 0:
        raise ValueError(f"mean_input_tokens must be a finite number of 0 or more, got {mean_input_tokens!r}")
    per_claim = (
        mean_input_tokens * input_rate_per_million(model) / 1_000_000 + search_cost_usd(grounded_attempts) / n
    )
    return 1_000 * per_claim


def round_usd(amount: float, places: int = 6) -> float:
    """Round for display or storage of totals; the arithmetic above never rounds."""
    return round(amount, places)


@dataclass(frozen=True, slots=True)
class CallUsage:
    """What one upstream HTTP attempt used, as counted from its record.

    `searches` means: grounded attempts for `decisions` (0 or 1 per attempt), `web_search` tool calls for
    `agent`, requests for `search` (normally 1). `model` is needed for `decisions` token pricing only.
    """

    endpoint: Endpoint
    model: str | None = None
    input_tokens: int = 0
    searches: int = 0
    fast: bool = False  # agent only: the `fast` preset prices web_search lower


def call_cost_usd(usage: CallUsage) -> float:
    """Dollars for one attempt: tokens at the model's rate plus its searches at the endpoint's price."""
    if usage.endpoint == "decisions":
        # A failed attempt has no tokens and may have no model recorded; it can still have billed a search.
        tokens = decisions_cost_usd(usage.input_tokens, usage.model or "") if usage.input_tokens else 0.0
        return tokens + search_cost_usd(usage.searches)
    if usage.endpoint == "agent":
        return agent_search_cost_usd(usage.searches, fast=usage.fast)
    if usage.endpoint == "search":
        return search_api_cost_usd(usage.searches)
    raise ValueError(f"unknown endpoint {usage.endpoint!r}: expected decisions, agent or search")


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    """A job's cost by what was billed, in dollars, unrounded."""

    decisions_tokens_usd: float
    grounded_searches_usd: float
    agent_searches_usd: float
    search_api_usd: float

    @property
    def total_usd(self) -> float:
        return math.fsum(
            (
                self.decisions_tokens_usd,
                self.grounded_searches_usd,
                self.agent_searches_usd,
                self.search_api_usd,
            )
        )

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "total_usd": self.total_usd}


def sum_costs(calls: Iterable[CallUsage]) -> CostBreakdown:
    """Sum a job's per-attempt usage. Tokens and searches are summed as integers per model and endpoint
    first, so the total does not depend on the order of the calls."""
    tokens_by_model: dict[str, int] = {}
    grounded = agent = agent_fast = search_requests = 0
    for call in calls:
        if call.endpoint == "decisions":
            if call.input_tokens:
                model = call.model or ""
                input_rate_per_million(model)  # fail on an unknown model now, naming it
                tokens_by_model[model] = tokens_by_model.get(model, 0) + _count(
                    call.input_tokens, "input_tokens"
                )
            grounded += _count(call.searches, "searches")
        elif call.endpoint == "agent":
            if call.fast:
                agent_fast += _count(call.searches, "searches")
            else:
                agent += _count(call.searches, "searches")
        elif call.endpoint == "search":
            search_requests += _count(call.searches, "searches")
        else:
            raise ValueError(f"unknown endpoint {call.endpoint!r}: expected decisions, agent or search")
    return CostBreakdown(
        decisions_tokens_usd=math.fsum(decisions_cost_usd(t, m) for m, t in tokens_by_model.items()),
        grounded_searches_usd=search_cost_usd(grounded),
        agent_searches_usd=agent_search_cost_usd(agent, fast=False)
        + agent_search_cost_usd(agent_fast, fast=True),
        search_api_usd=search_api_cost_usd(search_requests),
    )
