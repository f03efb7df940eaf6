"""The claim item handler: one Decisions request for one claim in one mode."""

from __future__ import annotations

from typing import Any

from checks import claims as claim_rules
from checks import pricing
from clients.errors import UpstreamError
from jobs.records import ClaimedItem
from workers.budget import over_budget, spend
from workers.calls import call_rows
from workers.context import WorkerContext
from workers.limiter import LimiterTimeout
from workers.outcomes import Done, Failed, Outcome, Skipped, Transient


def handle_claim(ctx: WorkerContext, item: ClaimedItem) -> Outcome:
    """Ask whether the claim is true; store p, verdict, request ids and sources."""
    opts = item.options
    model = str(opts.get("model") or pricing.DEFAULT_MODEL)
    budget = opts.get("budget_usd")
    if budget is not None and over_budget(ctx, item.job_id, float(budget)):
        return Skipped(f"budget of ${float(budget):.4f} reached")
    body = claim_rules.request_body(item.input["claim"], model=model, mode=item.mode)  # type: ignore[arg-type]
    rate = pricing.input_rate_per_million(model)
    try:
        decision = ctx.client.decide(body)
    except LimiterTimeout as exc:
        # Upstream is paused for longer than we wait in one go (a long Retry-After): try later.
        return Transient(f"rate limiter: waited {exc.waited:.1f} s for a slot; retrying later")
    except UpstreamError as exc:
        rows = call_rows(exc.record, search_cost_usd=pricing.GROUNDED_SEARCH_USD, token_cost_per_m=rate)
        spend(ctx, item.job_id, sum(r.cost_usd for r in rows))
        if exc.retryable:
            return Transient(str(exc), rows)
        return Failed(str(exc), rows, {"request_ids": exc.record.request_ids})
    rec = decision.record
    rows = call_rows(rec, search_cost_usd=pricing.GROUNDED_SEARCH_USD, token_cost_per_m=rate)
    spend(ctx, item.job_id, sum(r.cost_usd for r in rows))
    p = decision.answers[claim_rules.QUESTION_NAME].noul
    assert p is not None  # validated by the client
    output: dict[str, Any] = {
        "p": p,
        "verdict": claim_rules.verdict(
            p, float(opts.get("supported_min", 0.8)), float(opts.get("contradicted_max", 0.2))
        ),
        "request_id": rec.request_id,
        "request_ids": rec.request_ids,
        "attempts": rec.attempt_count,
        "latency_s": round(rec.latency_s, 4),
        "input_tokens": decision.input_tokens,
        "output_tokens": decision.output_tokens,
        "model": decision.model,
        "n_search_results": len(decision.search_results),
        "sources": [
            {"title": r.title, "url": r.url, "date": r.date, "snippet": r.snippet}
            for r in decision.search_results
        ],
    }
    return Done(output, rows)
