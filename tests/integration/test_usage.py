"""GET /v1/usage and the usage page on real Postgres (and the same query on SQLite): per-day figures equal
the sums over the inserted `api_calls` rows, days are UTC days whatever the connection's time zone,
another tenant's calls never appear, and bad parameters are 400s that name the parameter."""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from checks.usage import DayRange
from jobs.intake import UnitSpec, create_job
from jobs.purge import roll_up_calls
from jobs.quotas import spend_since
from jobs.tenancy import get_or_create_tenant
from jobs.usage import tenant_usage
from models import ApiCall, make_engine, make_session_factory, session_scope
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    other_caller,
    web,
    web_settings,
)
from web.security import CSP

pytestmark = pytest.mark.integration

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
FIGURES = ("requests", "searches", "input_tokens", "output_tokens", "cost_usd")


def at(day: str, clock: str = "12:00:00", tz: timezone = UTC) -> datetime:
    return datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=tz)


# One tenant's calls: (created_at, endpoint, model, searches, input tokens, output tokens, cost).
CALLS: list[tuple[datetime, str, str | None, int, int, int, float]] = [
    (at("2025-03-01", "00:00:00"), "decisions", "pplx-decider-latest", 1, 120, 1, 0.005012),  # first instant
    (at("2025-03-01", "09:15:00"), "decisions", "pplx-decider-latest", 0, 80, 1, 0.000008),
    (at("2025-03-01", "09:15:01"), "decisions", None, 0, 0, 0, 0.0),  # a failed attempt: no model
    (at("2025-03-01", "23:59:59.999999"), "search", None, 1, 0, 0, 0.005),
    (at("2025-03-03", "10:00:00"), "agent", "sonar-pro", 2, 900, 300, 0.0213),
    (at("2025-03-03", "10:00:05"), "decisions", "pplx-decider-v1.1-27b", 1, 200, 1, 0.00502),
    # 01:30 at UTC+05:00 is 20:30 UTC the day before.
    (
        at("2025-03-05", "01:30:00", timezone(timedelta(hours=5))),
        "decisions",
        "pplx-decider-latest",
        1,
        50,
        1,
        0.005005,
    ),
    (at("2025-03-05", "23:59:59"), "search", None, 1, 0, 0, 0.005),  # last instant of `to`
]
OUTSIDE: list[tuple[datetime, str, str | None, int, int, int, float]] = [
    (at("2025-02-28", "23:59:59.999999"), "decisions", "pplx-decider-latest", 1, 10, 1, 1.0),
    (at("2025-03-06", "00:00:00"), "decisions", "pplx-decider-latest", 1, 10, 1, 1.0),
]
FROM, TO = "2025-03-01", "2025-03-05"


def add_calls(sessions: Any, tenant_id: uuid.UUID, job_id: uuid.UUID, calls: list[Any]) -> None:
    with session_scope(sessions) as session:
        for created, endpoint, model, searches, tin, tout, cost in calls:
            session.add(
                ApiCall(
                    tenant_id=tenant_id,
                    job_id=job_id,
                    endpoint=endpoint,
                    model=model,
                    status_code=200 if model else 500,
                    searches=searches,
                    input_tokens=tin,
                    output_tokens=tout,
                    cost_usd=cost,
                    created_at=created,
                )
            )


def expected(calls: list[Any]) -> dict[str, Any]:
    """The sums the report must show, computed here from the rows themselves."""
    days: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(FIGURES, 0))
    by_day_endpoint: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: dict.fromkeys(FIGURES, 0))
    by_model: dict[str | None, dict[str, float]] = defaultdict(lambda: dict.fromkeys(FIGURES, 0))
    for created, endpoint, model, searches, tin, tout, cost in calls:
        day = created.astimezone(UTC).date().isoformat()
        for bucket in (days[day], by_day_endpoint[(day, endpoint)], by_model[model]):
            bucket["requests"] += 1
            bucket["searches"] += searches
            bucket["input_tokens"] += tin
            bucket["output_tokens"] += tout
            bucket["cost_usd"] += cost
    return {"days": days, "by_day_endpoint": by_day_endpoint, "by_model": by_model}


def assert_figures(got: dict[str, Any], want: dict[str, float]) -> None:
    for name in FIGURES:
        if name == "cost_usd":
            assert got[name] == pytest.approx(want[name], abs=1e-6), name
        else:
            assert got[name] == want[name], name


def caller_job(web: WebEnv, who: Caller) -> uuid.UUID:
    return uuid.UUID(web.submit(who)["id"])


def usage(web: WebEnv, who: Caller, query: str = f"from={FROM}&to={TO}") -> dict[str, Any]:
    resp = web.client.get(f"/v1/usage?{query}", headers=who.headers)
    assert resp.status_code == 200, resp.get_data(as_text=True)[:500]
    body: dict[str, Any] = resp.get_json()
    return body


# --- the API ---------------------------------------------------------------------------------------------


def test_per_day_figures_are_the_sums_of_the_calls(web: WebEnv, caller: Caller) -> None:
    add_calls(web.sessions, caller.tenant_id, caller_job(web, caller), CALLS + OUTSIDE)
    body = usage(web, caller)
    assert (body["object"], body["from"], body["to"], body["days"], body["timezone"]) == (
        "usage",
        FROM,
        TO,
        5,
        "UTC",
    )
    want = expected(CALLS)
    assert [d["date"] for d in body["daily"]] == [f"2025-03-0{n}" for n in range(1, 6)]
    for entry in body["daily"]:
        assert_figures(entry, want["days"].get(entry["date"], dict.fromkeys(FIGURES, 0)))
        endpoints = {e["endpoint"]: e for e in entry["by_endpoint"]}
        assert set(endpoints) == {ep for (day, ep) in want["by_day_endpoint"] if day == entry["date"]}
        for name, figures in endpoints.items():
            assert_figures(figures, want["by_day_endpoint"][(entry["date"], name)])
        assert sum(m["requests"] for m in entry["by_model"]) == entry["requests"]
    assert [d["requests"] for d in body["daily"]] == [4, 0, 2, 1, 1]  # 03-04 holds the +05:00 call
    totals = body["totals"]
    assert_figures(totals, {k: sum(d[k] for d in want["days"].values()) for k in FIGURES})
    assert totals["requests"] == len(CALLS)  # neither outside call counts
    models = {m["model"]: m for m in totals["by_model"]}
    assert set(models) == set(want["by_model"])
    assert None in models  # calls without a model are listed as null
    for name, figures in models.items():
        assert_figures(figures, want["by_model"][name])
    costs = [e["cost_usd"] for e in totals["by_endpoint"]]
    assert costs == sorted(costs, reverse=True)


def test_another_tenants_calls_never_appear(web: WebEnv, caller: Caller, other_caller: Caller) -> None:
    add_calls(web.sessions, caller.tenant_id, caller_job(web, caller), CALLS)
    theirs = [(created, "agent", "their-model", 5, 5_000, 5_000, 9.5) for created, *_ in CALLS]
    add_calls(web.sessions, other_caller.tenant_id, caller_job(web, other_caller), theirs)
    mine = usage(web, caller)
    assert mine["totals"]["requests"] == len(CALLS)
    assert mine["totals"]["cost_usd"] == pytest.approx(sum(c[-1] for c in CALLS), abs=1e-6)
    assert "their-model" not in str(mine)
    other = usage(web, other_caller)
    assert other["totals"]["requests"] == len(theirs)
    assert [m["model"] for m in other["totals"]["by_model"]] == ["their-model"]


def test_defaults_are_the_last_30_days(web: WebEnv, caller: Caller) -> None:
    now = datetime.now(UTC)
    job = caller_job(web, caller)
    add_calls(
        web.sessions,
        caller.tenant_id,
        job,
        [
            (now, "decisions", "pplx-decider-latest", 0, 10, 1, 0.25),
            (now - timedelta(days=29), "decisions", "pplx-decider-latest", 0, 10, 1, 0.5),
            (now - timedelta(days=31), "decisions", "pplx-decider-latest", 0, 10, 1, 4.0),
        ],
    )
    body = usage(web, caller, "")
    today = now.date()
    assert body["to"] == today.isoformat()
    assert body["from"] == (today - timedelta(days=29)).isoformat()
    assert len(body["daily"]) == body["days"] == 30
    assert body["totals"]["cost_usd"] == pytest.approx(0.75)
    only_from = usage(web, caller, f"from={(today - timedelta(days=2)).isoformat()}")
    assert only_from["to"] == today.isoformat() and only_from["days"] == 3
    only_to = usage(web, caller, "to=2025-03-05")
    assert (only_to["from"], only_to["days"]) == ("2025-02-04", 30)


def test_a_range_of_366_days_is_the_most(web: WebEnv, caller: Caller) -> None:
    body = usage(web, caller, "from=2024-01-01&to=2024-12-31")  # a leap year
    assert body["days"] == 366 and len(body["daily"]) == 366
    assert body["totals"]["requests"] == 0 and body["totals"]["by_endpoint"] == []


@pytest.mark.parametrize(
    ("query", "field", "needle"),
    [
        ("from=2025-13-01", "from", "not a calendar date"),
        ("from=2025-02-30&to=2025-03-01", "from", "not a calendar date"),
        ("to=2025/03/01", "to", "YYYY-MM-DD"),
        ("from=20250301", "from", "YYYY-MM-DD"),
        ("from=yesterday", "from", "YYYY-MM-DD"),
        ("from=2025-03-05&to=2025-03-01", "from", "is after to"),
        ("from=2024-01-01&to=2025-01-01", "from", "at most 366"),
        # The ends of the calendar: the query reads the day after `to`, the default `from` is 30 days before.
        ("from=9999-12-30&to=9999-12-31", "from", "from 1970-01-01 to 9998-12-31"),
        ("to=0001-01-05", "to", "from 1970-01-01 to 9998-12-31"),
        ("to=9999-12-31", "to", "from 1970-01-01 to 9998-12-31"),
        ("from=2025-03-01&tenant=other", "tenant", "unknown query parameter"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(
    web: WebEnv, caller: Caller, query: str, field: str, needle: str
) -> None:
    resp = web.client.get(f"/v1/usage?{query}", headers=caller.headers)
    assert resp.status_code == 400, resp.get_data(as_text=True)
    err = resp.get_json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["field"] == field
    assert needle in err["message"]


def test_usage_needs_a_token(web: WebEnv) -> None:
    resp = web.client.get("/v1/usage")
    assert resp.status_code == 401
    assert resp.get_json()["error"]["type"] == "authentication_error"


# --- the query itself ------------------------------------------------------------------------------------


def _direct(session: Session) -> tuple[uuid.UUID, uuid.UUID]:
    tenant = get_or_create_tenant(session, f"usage-{uuid.uuid4().hex[:8]}")
    job, _ = create_job(
        session,
        tenant_id=tenant.id,
        kind="claims",
        options={},
        units=[UnitSpec(stage="claim", custom_id="a", mode="grounded", input={"claim": "x"})],
    )
    return tenant.id, job.id


def test_days_are_utc_whatever_the_connection_time_zone(db: Session) -> None:
    tenant_id, job_id = _direct(db)
    for created, endpoint, model, searches, tin, tout, cost in CALLS + OUTSIDE:
        db.add(
            ApiCall(
                tenant_id=tenant_id,
                job_id=job_id,
                endpoint=endpoint,
                model=model,
                searches=searches,
                input_tokens=tin,
                output_tokens=tout,
                cost_usd=cost,
                created_at=created,
            )
        )
    db.flush()
    db.execute(text("SET LOCAL TIME ZONE 'Pacific/Kiritimati'"))  # UTC+14: every local day differs
    report = tenant_usage(db, tenant_id, DayRange(date(2025, 3, 1), date(2025, 3, 5)))
    assert [(d.isoformat(), b.totals.requests) for d, b in report.days] == [
        ("2025-03-01", 4),
        ("2025-03-02", 0),
        ("2025-03-03", 2),
        ("2025-03-04", 1),
        ("2025-03-05", 1),
    ]


def test_the_same_report_on_sqlite(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        sessions = make_session_factory(engine)
        with session_scope(sessions) as session:
            tenant_id, job_id = _direct(session)
        add_calls(sessions, tenant_id, job_id, CALLS + OUTSIDE)
        with sessions() as session:
            report = tenant_usage(session, tenant_id, DayRange(date(2025, 3, 1), date(2025, 3, 5))).as_dict()
        want = expected(CALLS)
        assert [d["requests"] for d in report["daily"]] == [4, 0, 2, 1, 1]
        for entry in report["daily"]:
            assert_figures(entry, want["days"].get(entry["date"], dict.fromkeys(FIGURES, 0)))
    finally:
        engine.dispose()


# --- the page --------------------------------------------------------------------------------------------


def sign_in(web: WebEnv, who: Caller) -> None:
    page = web.client.get("/sign-in").get_data(as_text=True)
    match = CSRF_RE.search(page)
    assert match
    resp = web.client.post("/sign-in", data={"token": who.token, "csrf_token": match.group(1)})
    assert resp.status_code == 302


def test_usage_page_draws_the_days_and_tabulates_them(
    web: WebEnv, caller: Caller, other_caller: Caller
) -> None:
    add_calls(web.sessions, caller.tenant_id, caller_job(web, caller), CALLS + OUTSIDE)
    add_calls(
        web.sessions,
        other_caller.tenant_id,
        caller_job(web, other_caller),
        [(at("2025-03-02"), "agent", "their-model", 1, 1, 1, 7.0)],
    )
    assert web.client.get("/usage").status_code == 302  # pages need a session
    sign_in(web, caller)
    resp = web.client.get(f"/usage?from={FROM}&to={TO}")
    assert resp.status_code == 200
    assert resp.headers["Content-Security-Policy"] == CSP
    page = resp.get_data(as_text=True)
    assert 'href="/usage" aria-current="page"' in page  # in the nav, and current
    assert "style=" not in page and "<script>" not in page
    svg = page[page.index("<svg") : page.index("</svg>")]
    # One bar per day that cost something (03-02 cost nothing), each with its day and value as a title.
    assert svg.count('class="bar"') == 4
    assert "<title>2025-03-03: $0.0263</title>" in svg
    assert "2025-03-02:" not in svg
    days_table = page[page.index('id="usage-days"') :]
    for n in range(1, 6):
        assert f"2025-03-0{n}" in days_table
    endpoints = page[page.index('id="usage-endpoints"') : page.index('id="usage-models"')]
    assert [m for m in ("decisions", "agent", "search") if m in endpoints] == ["decisions", "agent", "search"]
    assert "their-model" not in page and "$7.00" not in page
    assert "none recorded" in page  # calls without a model

    requests_chart = web.client.get(f"/usage?from={FROM}&to={TO}&metric=requests").get_data(as_text=True)
    assert "<title>2025-03-01: 4</title>" in requests_chart


def test_usage_page_shows_reused_answers_apart(web: WebEnv, caller: Caller) -> None:
    """Answers taken from the verdict store (docs/spec.md §10) are a column of their own on the page, as in
    /v1/usage: never counted as requests, at no cost."""
    job_id = caller_job(web, caller)
    add_calls(web.sessions, caller.tenant_id, job_id, CALLS[:2])
    with session_scope(web.sessions) as session:
        for _ in range(3):
            session.add(
                ApiCall(tenant_id=caller.tenant_id, job_id=job_id, endpoint="decisions",
                        model="pplx-decider-v1.2", reused=True, cost_usd=0.0, created_at=at("2025-03-01"))
            )  # fmt: skip
    totals = usage(web, caller)["totals"]
    assert (totals["requests"], totals["reused"]) == (2, 3)
    sign_in(web, caller)
    page = web.client.get(f"/usage?from={FROM}&to={TO}").get_data(as_text=True)
    assert "<tr><th>Reused</th><td>3 answered from earlier jobs, $0</td></tr>" in page
    endpoints = page[page.index('id="usage-endpoints"') : page.index('id="usage-models"')]
    assert '<th class="num">Requests</th><th class="num">Reused</th>' in endpoints
    row = re.search(r"<tr><td>decisions</td>(.*?)</tr>", endpoints)
    assert row and re.findall(r'<td class="num">([^<]*)</td>', row.group(1))[:2] == ["2", "3"]
    days = page[page.index('id="usage-days"') :]
    day = re.search(r'<td class="nowrap">2025-03-01</td>(.*?)</tr>', days)
    assert day and re.findall(r'<td class="num">([^<]*)</td>', day.group(1))[:2] == ["2", "3"]


def test_usage_page_refuses_bad_dates_with_the_form(web: WebEnv, caller: Caller) -> None:
    sign_in(web, caller)
    resp = web.client.get("/usage?from=2025-03-09&to=2025-03-01")
    assert resp.status_code == 400
    page = resp.get_data(as_text=True)
    assert "Dates not accepted." in page and "is after to" in page
    assert 'id="from" name="from" type="date" value="2025-03-09" aria-invalid="true"' in page
    assert "<svg" not in page
    assert web.client.get("/usage").status_code == 200  # the default range


# --- the roll-up of purged calls ------------------------------------------------------------------------


def _drain_roll_up(sessions: Any, job_id: uuid.UUID, limit: int) -> list[int]:
    """roll_up_calls until none is left, each batch its own transaction; the batch sizes it moved."""
    moved: list[int] = []
    while not moved or moved[-1]:
        with session_scope(sessions) as session:
            moved.append(roll_up_calls(session, job_id, limit))
    return moved


def test_purged_calls_count_the_same_in_the_usage_report_and_the_budget(web: WebEnv, caller: Caller) -> None:
    """Rolling a job's calls up into `usage_days` in batches leaves the report, day by day, endpoint by
    endpoint and model by model, and the spend the budgets read, exactly as they were (nothing twice)."""
    job_id = caller_job(web, caller)
    add_calls(web.sessions, caller.tenant_id, job_id, CALLS + OUTSIDE)
    before = usage(web, caller)
    with web.sessions() as s:
        spent_before = spend_since(s, caller.tenant_id, at("2025-03-01", "00:00:00"))
    assert _drain_roll_up(web.sessions, job_id, 3) == [3, 3, 3, 1, 0]
    with web.sessions() as s:
        assert s.scalar(text("SELECT count(*) FROM api_calls WHERE job_id = :j"), {"j": job_id}) == 0
        assert spend_since(s, caller.tenant_id, at("2025-03-01", "00:00:00")) == pytest.approx(spent_before)
    assert usage(web, caller) == before
    # Calls arriving after a purge are live rows beside the roll-up, not a second count of it.
    add_calls(web.sessions, caller.tenant_id, job_id, CALLS[:1])
    assert usage(web, caller)["totals"]["requests"] == before["totals"]["requests"] + 1


def test_the_roll_up_on_sqlite(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        sessions = make_session_factory(engine)
        with session_scope(sessions) as session:
            tenant_id, job_id = _direct(session)
        add_calls(sessions, tenant_id, job_id, CALLS + OUTSIDE)
        period = DayRange(date(2025, 3, 1), date(2025, 3, 5))
        with sessions() as session:
            before = tenant_usage(session, tenant_id, period).as_dict()
        assert _drain_roll_up(sessions, job_id, 4) == [4, 4, 2, 0]
        with sessions() as session:
            assert tenant_usage(session, tenant_id, period).as_dict() == before
            assert session.scalar(text("SELECT count(*) FROM api_calls")) == 0
    finally:
        engine.dispose()
