"""The claim item handler: one Decisions request for one claim in one mode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from checks import claims as claim_rules
from checks.packing import pack_claims, split_count
from clients.results import Decision
from jobs.records import ClaimedItem
from workers.context import WorkerContext
from workers.outcomes import AskAlone, Done, Failed, Member, Outcome, PackAnswered, PackOutcome, Transient
from workers.steps import Calls, StepError, ask_packed, model_of


def _verdict(p: float, opts: Mapping[str, Any]) -> str:
    return claim_rules.verdict(
        p, float(opts.get("supported_min", 0.8)), float(opts.get("contradicted_max", 0.2))
    )


def handle_claim_pack(ctx: WorkerContext, items: Sequence[ClaimedItem], calls: Calls) -> PackOutcome:
    """One ungrounded Decisions request for several claims (docs/spec.md §9.3): each claim's p, verdict
    and request ids on its own item, with its share of the tokens."""
    model = model_of(items[0])
    try:
        packed = pack_claims([str(i.input["claim"]) for i in items], model)
    except ValueError as exc:
        return Failed(f"cannot check these claims: {exc}")
    asked = ask_packed(calls, packed.body, model)
    if isinstance(asked, Failed | Transient):
        return asked
    decision, answers = asked
    rec = decision.record
    tokens_in = split_count(decision.input_tokens, len(items))
    tokens_out = split_count(decision.output_tokens, len(items))
    members: list[Member] = []
    for i, p in enumerate(packed.answers_of(answers)):
        if p is None:
            members.append(AskAlone("the packed answer left out this claim's question"))
            continue
        output: dict[str, Any] = {
            "p": p,
            "verdict": _verdict(p, items[i].options),
            "request_id": rec.request_id,
            "request_ids": rec.request_ids,
            "sanitized": list(rec.sanitized),
            "input_tokens": tokens_in[i],
            "output_tokens": tokens_out[i],
            "model": decision.model,
            "n_search_results": 0,
            "sources": [],
        }
        members.append(Done(output))
    return PackAnswered(members, calls.rows)


def handle_claim(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Ask whether the claim is true; store p, verdict, request ids and sources.

    What the item cost (attempts of every try, tokens, searches, latency and queue wait) is added by
    jobs/ when the result is stored (`usage`), from the `api_calls` rows.
    """
    opts = item.options
    model = model_of(item)
    body = claim_rules.request_body(item.input["claim"], model=model, mode=cast(claim_rules.Mode, item.mode))
    try:
        decision: Decision = calls.decide(body, model)
    except StepError as exc:
        return calls.failed(exc)
    rec = decision.record
    p = decision.answers[claim_rules.QUESTION_NAME].noul
    assert p is not None  # validated by the client
    output: dict[str, Any] = {
        "p": p,
        "verdict": _verdict(p, opts),
        "request_id": rec.request_id,
        "request_ids": rec.request_ids,
        "sanitized": list(rec.sanitized),
        "input_tokens": decision.input_tokens,
        "output_tokens": decision.output_tokens,
        "model": decision.model,
        "n_search_results": len(decision.search_results),
        "sources": [
            {"title": r.title, "url": r.url, "date": r.date, "snippet": r.snippet}
            for r in decision.search_results
        ],
    }
    return Done(output, calls.rows)
