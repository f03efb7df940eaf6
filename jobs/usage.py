"""Usage and cost summed from `api_calls` rows (one row per HTTP attempt): a job's, and a tenant's by day.

A tenant's figures also add the `usage_days` roll-up of calls the purge removed (jobs/purge.py): a row is
moved from one to the other in one statement, so the sum of both is the same before and after a purge."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, TypedDict

from sqlalchemy import ColumnElement, Date, cast, func, select
from sqlalchemy.orm import Session

from checks.usage import DayRange
from jobs.items import CALL_SUMS, NO_USAGE, ItemUsage, UsageJson
from models import ApiCall, UsageDay
from models.jobs import EndpointTotals, UsageTotals


def usage_totals(session: Session, job_id: uuid.UUID) -> UsageTotals:
    """Calls, tokens, searches and cost by endpoint and in total."""
    return usage_totals_of(session, [job_id])[job_id]


def usage_totals_of(session: Session, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, UsageTotals]:
    """`usage_totals` of several jobs in one grouped query (a list of live jobs)."""
    rows = session.execute(
        select(
            ApiCall.job_id,
            ApiCall.endpoint,
            *CALL_SUMS,
            func.count().filter(ApiCall.reused.is_(True)),
            func.count().filter(ApiCall.status_code == 429),
        )
        .where(ApiCall.job_id.in_(list(job_ids)))
        .group_by(ApiCall.job_id, ApiCall.endpoint)
    ).all()
    by_job: dict[uuid.UUID, dict[str, EndpointTotals]] = {jid: {} for jid in job_ids}
    for job_id, endpoint, calls, searches, tin, tout, cost, reused, throttled in rows:
        by_job[job_id][endpoint] = {
            "http_attempts": int(calls),
            "reused": int(reused),
            "input_tokens": int(tin),
            "output_tokens": int(tout),
            "searches": int(searches),
            "throttled": int(throttled),
            "cost_usd": round(float(cost), 6),
        }
    return {jid: _totals(by_endpoint) for jid, by_endpoint in by_job.items()}


def _totals(by_endpoint: dict[str, EndpointTotals]) -> UsageTotals:
    ends = by_endpoint.values()
    return {
        "http_attempts": sum(v["http_attempts"] for v in ends),
        # Answers taken from the tenant's verdict store: no HTTP attempt, no cost (docs/spec.md).
        "reused": sum(v["reused"] for v in ends),
        "input_tokens": sum(v["input_tokens"] for v in ends),
        "output_tokens": sum(v["output_tokens"] for v in ends),
        "searches": sum(v["searches"] for v in ends),
        "throttled": sum(v["throttled"] for v in ends),
        "cost_usd": round(sum(v["cost_usd"] for v in ends), 6),
        "by_endpoint": by_endpoint,
    }


def usage_of_outputs(outputs: Iterable[Mapping[str, Any] | None]) -> UsageJson:
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


# --- a tenant's usage by day -------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageFigures:
    """What a set of `api_calls` rows adds up to. `requests` counts HTTP attempts, failed ones too;
    `reused` the answers taken from the verdict store instead (no request, no cost)."""

    requests: int = 0
    searches: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    reused: int = 0

    def plus(self, other: UsageFigures) -> UsageFigures:
        return UsageFigures(
            self.requests + other.requests,
            self.searches + other.searches,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
            self.reused + other.reused,
        )

    def as_dict(self) -> FiguresJson:
        return {
            "requests": self.requests,
            "reused": self.reused,
            "searches": self.searches,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
        }


class FiguresJson(TypedDict):
    """`UsageFigures` in `/v1/usage` (docs/spec.md): totals, and each day's."""

    requests: int
    reused: int
    searches: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


class EndpointFiguresJson(FiguresJson):
    endpoint: str


class ModelFiguresJson(FiguresJson):
    model: str | None


class BreakdownJson(FiguresJson):
    by_endpoint: list[EndpointFiguresJson]
    by_model: list[ModelFiguresJson]


class DayJson(BreakdownJson):
    date: str


# The body of `GET /v1/usage`: "from" is a keyword, hence the functional form.
TenantUsageJson = TypedDict(
    "TenantUsageJson",
    {
        "object": str,
        "from": str,
        "to": str,
        "days": int,
        "timezone": str,
        "totals": BreakdownJson,
        "daily": list[DayJson],
    },
)


NO_FIGURES = UsageFigures()


@dataclass(frozen=True)
class UsageBreakdown:
    """Figures in total, by endpoint and by model (None: calls that recorded no model)."""

    totals: UsageFigures = NO_FIGURES
    by_endpoint: dict[str, UsageFigures] = field(default_factory=dict)
    by_model: dict[str | None, UsageFigures] = field(default_factory=dict)

    def add(self, endpoint: str, model: str | None, figures: UsageFigures) -> UsageBreakdown:
        by_endpoint = dict(self.by_endpoint)
        by_endpoint[endpoint] = by_endpoint.get(endpoint, NO_FIGURES).plus(figures)
        by_model = dict(self.by_model)
        by_model[model] = by_model.get(model, NO_FIGURES).plus(figures)
        return UsageBreakdown(self.totals.plus(figures), by_endpoint, by_model)

    def ranked_endpoints(self) -> list[tuple[str, UsageFigures]]:
        """Endpoints, most expensive first (then most requests, then by name)."""
        return sorted(self.by_endpoint.items(), key=_rank)

    def ranked_models(self) -> list[tuple[str | None, UsageFigures]]:
        """Models, most expensive first; None is the calls that recorded no model."""
        return sorted(self.by_model.items(), key=_rank)

    def as_dict(self) -> BreakdownJson:
        """Totals and the two breakdowns as ranked lists (a model may be null)."""
        return {
            **self.totals.as_dict(),
            "by_endpoint": [{"endpoint": name, **f.as_dict()} for name, f in self.ranked_endpoints()],
            "by_model": [{"model": name, **f.as_dict()} for name, f in self.ranked_models()],
        }


def _rank(item: tuple[str | None, UsageFigures]) -> tuple[float, int, str]:
    return (-item[1].cost_usd, -item[1].requests, item[0] or "")


@dataclass(frozen=True)
class TenantUsage:
    """A tenant's usage over a range of UTC days: every day (empty ones too), and the whole range."""

    period: DayRange
    total: UsageBreakdown
    days: list[tuple[date, UsageBreakdown]]

    def as_dict(self) -> TenantUsageJson:
        return {
            "object": "usage",
            "from": self.period.start.isoformat(),
            "to": self.period.end.isoformat(),
            "days": self.period.days,
            "timezone": "UTC",
            "totals": self.total.as_dict(),
            "daily": [{"date": day.isoformat(), **usage.as_dict()} for day, usage in self.days],
        }


def _utc_day(dialect: str) -> ColumnElement[Any]:
    """The UTC calendar day of a call: Postgres converts the timestamptz explicitly (the connection's
    time zone must not matter); SQLite stores UTC text, whose first ten characters are the day."""
    if dialect == "postgresql":
        return cast(func.timezone("UTC", ApiCall.created_at), Date)
    return func.date(ApiCall.created_at)


def tenant_usage(session: Session, tenant_id: uuid.UUID, days: DayRange) -> TenantUsage:
    """Sums over the tenant's `api_calls` in the range, by day, endpoint and model, computed by the
    database (through `ix_api_calls_tenant_created`); only those few grouped rows come back."""
    start = datetime.combine(days.start, time.min, tzinfo=UTC)
    end = datetime.combine(days.end + timedelta(days=1), time.min, tzinfo=UTC)
    day = _utc_day(session.get_bind().dialect.name).label("day")
    rows = session.execute(
        select(
            day,
            ApiCall.endpoint,
            ApiCall.model,
            *CALL_SUMS,
            func.count().filter(ApiCall.reused.is_(True)),
        )
        .where(ApiCall.tenant_id == tenant_id, ApiCall.created_at >= start, ApiCall.created_at < end)
        .group_by(day, ApiCall.endpoint, ApiCall.model)
    ).all()
    # What the purge moved out of `api_calls` (jobs/purge.py): each purged row is in exactly one of the two.
    rolled = session.execute(
        select(
            UsageDay.day,
            UsageDay.endpoint,
            UsageDay.model,
            UsageDay.requests,
            UsageDay.searches,
            UsageDay.input_tokens,
            UsageDay.output_tokens,
            UsageDay.cost_usd,
            UsageDay.reused,
        ).where(UsageDay.tenant_id == tenant_id, UsageDay.day >= days.start, UsageDay.day <= days.end)
    ).all()
    per_day: dict[date, UsageBreakdown] = {d: UsageBreakdown() for d in days.dates()}
    total = UsageBreakdown()
    for raw_day, endpoint, raw_model, calls, searches, tokens_in, tokens_out, cost, reused in [
        *rows,
        *rolled,
    ]:
        model = raw_model or None  # the roll-up keeps "" for calls that recorded no model
        when = raw_day if isinstance(raw_day, date) else date.fromisoformat(str(raw_day))
        figures = UsageFigures(
            int(calls), int(searches), int(tokens_in), int(tokens_out), float(cost), int(reused)
        )
        per_day[when] = per_day.get(when, UsageBreakdown()).add(endpoint, model, figures)
        total = total.add(endpoint, model, figures)
    return TenantUsage(period=days, total=total, days=sorted(per_day.items()))
