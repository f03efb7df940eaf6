"""The `claims` job kind's application side: items from rows, the summary, result lines.

Each claim becomes one item per request mode. Whether the complete claim is inside its grounding
query is computed here, before anything is sent, and stored on the item (docs/spec.md §2).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from checks import claims as claim_rules
from checks.kinds.claims import ClaimResult, ClaimsSummary
from checks.options import ClaimsOptions, check_cutoffs
from checks.pricing import DEFAULT_MODEL
from jobs.intake import UnitSpec, dedupe_key
from models import Item, Job


def claim_units(
    rows: Sequence[claim_rules.ClaimRow], options: ClaimsOptions
) -> tuple[list[UnitSpec], list[str]]:
    """One unit per claim per mode, plus the intake warnings (claims outside their query)."""
    units: list[UnitSpec] = []
    outside: list[str] = []
    grounded = "grounded" in options.modes
    for row in rows:
        in_query = True
        if grounded:
            in_query = not claim_rules.claim_outside_query(row.claim)
            if not in_query:
                outside.append(row.id)
        for mode in options.modes:
            units.append(
                UnitSpec(
                    stage="claim",
                    custom_id=row.id,
                    mode=mode,
                    input={
                        "claim": row.claim,
                        "label": row.label,
                        "kind": row.kind,
                        "source": row.source,
                        "in_query": in_query,
                    },
                    dedupe_key=dedupe_key(options.model, mode, row.claim),
                )
            )
    warnings: list[str] = []
    if outside:
        shown = ", ".join(outside[:10]) + (" …" if len(outside) > 10 else "")
        warnings.append(
            f"{len(outside)} claim(s) are not entirely inside their web-grounding search query, so the "
            f"search may look for something else: {shown}. Put the claim first and keep it under ~237 bytes."
        )
    return units, warnings


def item_usage_of(output: dict[str, Any] | None) -> dict[str, Any]:
    """What an item cost over all its tries (jobs/items.py writes `usage` when it settles); zeros for an
    item that never settled with a record of its calls (skipped, or stored before usage existed)."""
    o = output or {}
    usage = o.get("usage")
    if isinstance(usage, dict):
        return usage
    return {"attempts": int(o.get("attempts") or 0), "upstream_latency_s": float(o.get("latency_s") or 0.0)}


def _outcomes(session: Session, job_id: uuid.UUID, mode: str) -> list[claim_rules.Outcome]:
    rows = session.execute(
        select(Item.custom_id, Item.input, Item.output, Item.status, Item.error)
        .where(Item.job_id == job_id, Item.mode == mode)
        .order_by(Item.position)
        .execution_options(yield_per=5_000)
    )
    out: list[claim_rules.Outcome] = []
    for custom_id, input_, output, status, error in rows:
        o = output or {}
        usage = item_usage_of(output)
        p = o.get("p") if status == "done" else None
        out.append(
            claim_rules.Outcome(
                id=custom_id,
                label=input_.get("label"),
                p=p,
                input_tokens=int(usage.get("input_tokens", o.get("input_tokens")) or 0),
                latency_s=float(usage.get("upstream_latency_s") or 0.0),
                queue_wait_s=float(usage.get("queue_wait_s") or 0.0),
                attempts=int(usage.get("attempts") or 0),
                search_results=int(o.get("n_search_results") or 0),
                error=None if status == "done" else (error or status),
            )
        )
    return out


def claims_summary(
    session: Session, job: Job, *, supported_min: float | None = None, contradicted_max: float | None = None
) -> ClaimsSummary:
    """Scorecards per mode (with acceptance), flips between modes, and claims outside their query.

    Replayed from stored probabilities: other cutoffs need no upstream request.
    """
    opts = job.options
    smin = float(opts.get("supported_min", 0.8) if supported_min is None else supported_min)
    cmax = float(opts.get("contradicted_max", 0.2) if contradicted_max is None else contradicted_max)
    check_cutoffs(smin, cmax)
    modes = claim_rules.modes_for(opts.get("mode", "grounded"))
    scorecards: dict[str, Any] = {}
    outcomes = {mode: _outcomes(session, job.id, mode) for mode in modes}
    probs: dict[str, dict[str, float]] = {
        mode: {o.id: o.p for o in rows if o.p is not None} for mode, rows in outcomes.items()
    }
    outside = 0
    for mode in modes:
        other = [m for m in modes if m != mode]
        card = claim_rules.scorecard(
            outcomes[mode],
            mode=mode,
            model=opts.get("model") or DEFAULT_MODEL,
            supported_min=smin,
            contradicted_max=cmax,
            baseline=probs[other[0]] if other else None,
        )
        scorecards[mode] = card.as_dict()
    if "grounded" in modes:
        outside = sum(
            1
            for (inp,) in session.execute(
                select(Item.input).where(Item.job_id == job.id, Item.mode == "grounded")
            )
            if not inp.get("in_query", True)
        )
    flips: list[dict[str, Any]] = []
    if len(modes) == 2:
        flips = [
            f.as_dict()
            for f in claim_rules.flips(
                probs["ungrounded"], probs["grounded"], supported_min=smin, contradicted_max=cmax
            )
        ]
    return ClaimsSummary.model_validate(
        {
            "cutoffs": {"supported_min": smin, "contradicted_max": cmax},
            "modes": list(modes),
            "scorecards": scorecards,
            "flips": flips,
            "outside_query": outside,
        }
    )


def iter_claim_results(session: Session, job: Job) -> Iterator[ClaimResult]:
    """One result per claim (all modes merged), in input order, streamed in constant memory."""
    smin = float(job.options.get("supported_min", 0.8))
    cmax = float(job.options.get("contradicted_max", 0.2))
    rows = session.execute(
        select(Item.position, Item.custom_id, Item.mode, Item.input, Item.output, Item.status, Item.error)
        .where(Item.job_id == job.id)
        .order_by(Item.position)  # a claim's modes have consecutive positions
        .execution_options(yield_per=2_000)
    )
    # Closed explicitly: a client that stops reading closes this generator mid-way, and a server-side
    # cursor dropped without close() leaks until the connection is reset.
    try:
        current: dict[str, Any] | None = None
        for _pos, custom_id, mode, input_, output, status, error in rows:
            if current is None or current["custom_id"] != custom_id:
                if current is not None:
                    yield ClaimResult.model_validate(current)
                current = {
                    "custom_id": custom_id,
                    "claim": input_.get("claim"),
                    "label": input_.get("label"),
                    "results": {},
                }
            o = output or {}
            p = o.get("p")
            usage = item_usage_of(output)
            current["results"][mode] = {
                "status": status,
                "p": p,
                "verdict": claim_rules.verdict(p, smin, cmax) if p is not None and status == "done" else None,
                "request_id": o.get("request_id"),
                "request_ids": o.get("request_ids", []),
                "attempts": int(usage.get("attempts") or 0),
                "input_tokens": o.get("input_tokens"),
                "usage": usage,
                "in_query": input_.get("in_query"),
                "sources": o.get("sources", []),
                "error": error if status != "done" else None,
            }
        if current is not None:
            yield ClaimResult.model_validate(current)
    finally:
        rows.close()
