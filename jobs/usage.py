"""Usage and cost of a job, summed from its `api_calls` rows (one row per HTTP attempt)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from jobs.items import NO_USAGE, ItemUsage
from models import ApiCall


def usage_totals(session: Session, job_id: uuid.UUID) -> dict[str, Any]:
    """Calls, tokens, searches and cost by endpoint and in total."""
    rows = session.execute(
        select(
            ApiCall.endpoint,
            func.count(),
            func.coalesce(func.sum(ApiCall.input_tokens), 0),
            func.coalesce(func.sum(ApiCall.output_tokens), 0),
            func.coalesce(func.sum(ApiCall.searches), 0),
            func.coalesce(func.sum(ApiCall.cost_usd), 0.0),
            func.count().filter(ApiCall.status_code == 429),
        )
        .where(ApiCall.job_id == job_id)
        .group_by(ApiCall.endpoint)
    ).all()
    by_endpoint: dict[str, dict[str, Any]] = {}
    for endpoint, calls, tin, tout, searches, cost, throttled in rows:
        by_endpoint[endpoint] = {
            "http_attempts": int(calls),
            "input_tokens": int(tin),
            "output_tokens": int(tout),
            "searches": int(searches),
            "throttled": int(throttled),
            "cost_usd": round(float(cost), 6),
        }
    return {
        "http_attempts": sum(v["http_attempts"] for v in by_endpoint.values()),
        "input_tokens": sum(v["input_tokens"] for v in by_endpoint.values()),
        "output_tokens": sum(v["output_tokens"] for v in by_endpoint.values()),
        "searches": sum(v["searches"] for v in by_endpoint.values()),
        "throttled": sum(v["throttled"] for v in by_endpoint.values()),
        "cost_usd": round(sum(v["cost_usd"] for v in by_endpoint.values()), 6),
        "by_endpoint": by_endpoint,
    }


def usage_of_outputs(outputs: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """The summed `usage` of settled items (each item's output holds its own, see jobs/items.py)."""
    total = NO_USAGE
    for output in outputs:
        usage = (output or {}).get("usage")
        if isinstance(usage, Mapping):
            total = total.plus(
                ItemUsage(
                    attempts=int(usage.get("attempts") or 0),
                    searches=int(usage.get("searches") or 0),
                    input_tokens=int(usage.get("input_tokens") or 0),
                    output_tokens=int(usage.get("output_tokens") or 0),
                    cost_usd=float(usage.get("cost_usd") or 0.0),
                    upstream_latency_s=float(usage.get("upstream_latency_s") or 0.0),
                    queue_wait_s=float(usage.get("queue_wait_s") or 0.0),
                )
            )
    return total.as_dict()


def spent_usd(session: Session, job_id: uuid.UUID) -> float:
    """Money this job has spent so far (the budget check's source of truth)."""
    return float(
        session.scalar(select(func.coalesce(func.sum(ApiCall.cost_usd), 0.0)).where(ApiCall.job_id == job_id))
        or 0.0
    )
