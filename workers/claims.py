"""The claim item handler: one Decisions request for one claim in one mode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, cast

from checks import claims as claim_rules
from checks.packing import pack_claims
from clients.results import Decision
from jobs.records import ClaimedItem
from workers.context import WorkerContext
from workers.outcomes import Done, Outcome, PackOutcome
from workers.packed import answer_pack
from workers.steps import Calls, StepError, model_of


class ClaimSource(TypedDict):
    """A search result a grounded claim's answer was based on, as its output stores it."""

    title: str
    url: str
    date: str | None
    snippet: str


class ClaimOutput(TypedDict):
    """A claim item's output (jobs/claims.py reads it back into result lines), in its stored key order."""

    p: float
    verdict: str
    request_id: str | None
    request_ids: list[str]
    sanitized: list[str]
    input_tokens: int
    output_tokens: int
    model: str | None
    n_search_results: int
    sources: list[ClaimSource]


def _verdict(p: float, opts: Mapping[str, Any]) -> str:
    return claim_rules.verdict(
        p, float(opts.get("supported_min", 0.8)), float(opts.get("contradicted_max", 0.2))
    )


def claim_output(
    p: float,
    options: Mapping[str, Any],
    decision: Decision,
    tokens: tuple[int, int],
    sources: list[ClaimSource],
) -> ClaimOutput:
    """A claim's output, packed or not: its p and verdict, the request's ids, its tokens (a packed claim's
    share), the search results behind it (none when packed: a packed request is ungrounded)."""
    record = decision.record
    return ClaimOutput(
        p=p,
        verdict=_verdict(p, options),
        request_id=record.request_id,
        request_ids=record.request_ids,
        sanitized=list(record.sanitized),
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        model=decision.model,
        n_search_results=len(sources),
        sources=sources,
    )


def handle_claim_pack(ctx: WorkerContext, items: Sequence[ClaimedItem], calls: Calls) -> PackOutcome:
    """One ungrounded Decisions request for several claims (docs/spec.md §9.3): each claim's p, verdict
    and request ids on its own item, with its share of the tokens."""
    model = model_of(items[0])
    return answer_pack(
        calls,
        model,
        lambda: pack_claims([str(i.input["claim"]) for i in items], model),
        lambda decision, share: Done(
            dict(
                claim_output(
                    share.answers,
                    items[share.index].options,
                    decision,
                    (share.input_tokens, share.output_tokens),
                    [],
                )
            )
        ),
        cannot="cannot check these claims",
        left_out="the packed answer left out this claim's question",
    )


def handle_claim(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Ask whether the claim is true; store p, verdict, request ids and sources.

    What the item cost (attempts of every try, tokens, searches, latency and queue wait) is added by
    jobs/ when the result is stored (`usage`), from the `api_calls` rows.
    """
    model = model_of(item)
    body = claim_rules.request_body(item.input["claim"], model=model, mode=cast(claim_rules.Mode, item.mode))
    try:
        decision: Decision = calls.decide(body, model)
    except StepError as exc:
        return calls.failed(exc)
    p = decision.answers[claim_rules.QUESTION_NAME].noul
    assert p is not None  # validated by the client
    sources = [
        ClaimSource(title=r.title, url=r.url, date=r.date, snippet=r.snippet) for r in decision.search_results
    ]
    tokens = (decision.input_tokens, decision.output_tokens)
    return Done(dict(claim_output(p, item.options, decision, tokens, sources)), calls.rows)
