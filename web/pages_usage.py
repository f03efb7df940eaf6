"""The usage page: a tenant's upstream requests and cost per UTC day, drawn and tabulated.

The figures come from jobs/usage.py (summed by the database), the range from checks/usage.py, the chart
from web/charts.py; this module only puts them together for templates/usage.html. The chart is an
inline SVG with presentation attributes (the CSP allows no inline style), and the per-day table under it
says the same in text.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date

from markupsafe import Markup
from sqlalchemy.orm import Session

from checks.usage import DEFAULT_DAYS, MAX_DAYS, RangeError, parse_day_range
from jobs.usage import TenantUsage, UsageFigures, tenant_usage
from web.charts import daily_bars_svg
from web.pages_format import number, usd


@dataclass(frozen=True)
class Metric:
    """What the chart can show: its name in the form, its title, how values are read and written."""

    name: str
    title: str
    value: Callable[[UsageFigures], float]
    label: Callable[[float], str]
    integer: bool


METRICS = {
    "cost": Metric("cost", "Cost per day (USD)", lambda f: f.cost_usd, usd, integer=False),
    "requests": Metric("requests", "Requests per day", lambda f: float(f.requests), number, integer=True),
}


@dataclass(frozen=True)
class UsagePage:
    """Everything templates/usage.html shows; `usage` is None when the parameters were refused."""

    from_value: str
    to_value: str
    metric: Metric
    usage: TenantUsage | None
    chart: Markup | None
    error: str | None
    error_field: str | None
    default_days: int = DEFAULT_DAYS
    max_days: int = MAX_DAYS


def usage_page(
    session: Session, tenant_id: uuid.UUID, args: Mapping[str, str], *, today: date
) -> tuple[UsagePage, int]:
    """The page for these query parameters, and its HTTP status (400 when a date is refused)."""
    raw_from = args.get("from") or ""
    raw_to = args.get("to") or ""
    metric = METRICS.get(args.get("metric") or "cost", METRICS["cost"])
    try:
        days = parse_day_range(raw_from, raw_to, today=today)
    except RangeError as exc:
        return UsagePage(raw_from, raw_to, metric, None, None, exc.message, exc.field), 400
    usage = tenant_usage(session, tenant_id, days)
    points = [(day, metric.value(figures.totals)) for day, figures in usage.days]
    svg = daily_bars_svg(
        points,
        label=metric.label,
        integer=metric.integer,
        title=f"{metric.title}, {days.start.isoformat()} to {days.end.isoformat()}",
        note="The table “Per day” below lists every day's figures.",
    )
    page = UsagePage(
        from_value=days.start.isoformat(),
        to_value=days.end.isoformat(),
        metric=metric,
        usage=usage,
        chart=Markup(svg),  # noqa: S704 - our own SVG; web.charts escapes every text in it
        error=None,
        error_field=None,
    )
    return page, 200
