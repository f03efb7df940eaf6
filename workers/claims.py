"""The claim item handler: one Decisions request for one claim in one mode."""

from __future__ import annotations

from typing import Any

from checks import claims as claim_rules
from clients.results import Decision
from jobs.records import ClaimedItem
from workers.context import WorkerContext
from workers.outcomes import Done, Outcome
from workers.steps import Calls, StepError, model_of


def handle_claim(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Ask whether the claim is true; store p, verdict, request ids and sources.

    What the item cost (attempts of every try, tokens, searches, latency and queue wait) is added by
    jobs/ when the result is stored (`usage`), from the `api_calls` rows.
    """
    opts = item.options
    model = model_of(item)
    body = claim_rules.request_body(item.input["claim"], model=model, mode=item.mode)  # type: ignore[arg-type]
    try:
        decision: Decision = calls.decide(body, model)
    except StepError as exc:
        return calls.failed(exc)
    rec = decision.record
    p = decision.answers[claim_rules.QUESTION_NAME].noul
    assert p is not None  # validated by the client
    output: dict[str, Any] = {
        "p": p,
        "verdict": claim_rules.verdict(
            p, float(opts.get("supported_min", 0.8)), float(opts.get("contradicted_max", 0.2))
        ),
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
