"""Tenant quotas at intake: a refusal is one 4xx of type `quota_exceeded` naming the quota, its limit, what
is used and when it resets — and nothing is stored."""

# Fixtures are imported from web_fixtures, so their names reappear as parameters.
# ruff: noqa: F811

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from jobs.control import cancel_job
from jobs.finalize import maybe_finalize
from jobs.quotas import live_jobs_of, next_day, next_month
from jobs.tenancy import set_tenant
from models import ApiCall, Job, Tenant, session_scope, utcnow
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    ROWS,
    Caller,
    WebEnv,
    caller,
    memory_celery,
    ndjson,
    settle_items,
    web,
    web_settings,
)

pytestmark = pytest.mark.integration


def _set(web: WebEnv, caller: Caller, **settings: Any) -> None:
    with session_scope(web.sessions) as s:
        set_tenant(s, caller.tenant_name, **settings)


def _spend(web: WebEnv, caller: Caller, usd: float, *, days_ago: int = 0) -> None:
    """Calls that cost `usd` in total, recorded against a job of the caller."""
    job_id = web.submit(caller, ROWS[:1])["id"]
    with session_scope(web.sessions) as s:
        s.add(
            ApiCall(
                tenant_id=caller.tenant_id,
                job_id=uuid.UUID(job_id),
                endpoint="decisions",
                attempt=1,
                status_code=200,
                request_id=f"r-{uuid.uuid4().hex[:8]}",
                cost_usd=usd,
                created_at=utcnow() - timedelta(days=days_ago),
            )
        )


def _refused(
    web: WebEnv, caller: Caller, status: int, rows: list[dict[str, Any]] = ROWS, **query: str
) -> dict[str, Any]:
    before = web.table_counts()
    resp = web.client.post(
        "/v1/jobs",
        query_string={"kind": "claims", **query},
        data=ndjson(rows),
        headers=caller.ndjson_headers(),
    )
    assert resp.status_code == status, resp.get_json()
    assert web.table_counts() == before  # nothing stored
    err: dict[str, Any] = resp.get_json()["error"]
    assert err["type"] == "quota_exceeded"
    return {**err, "retry_after": resp.headers.get("Retry-After")}


def test_too_many_items_in_one_job_is_413(web: WebEnv, caller: Caller) -> None:
    _set(web, caller, max_items_per_job=5)
    err = _refused(web, caller, 413, mode="both")  # 3 rows × 2 modes = 6 items
    assert err["field"] == err["quota"] == "max_items_per_job"
    assert err["limit"] == 5 and err["used"] == 6 and err["resets_at"] is None
    assert "6 items" in err["message"] and "limit is 5" in err["message"]
    # Within the quota it is accepted.
    ok = web.client.post(
        "/v1/jobs",
        query_string={"kind": "claims", "mode": "ungrounded"},
        data=ndjson(ROWS),
        headers=caller.ndjson_headers(),
    )
    assert ok.status_code == 202, ok.get_json()


def test_too_many_live_jobs_is_429(web: WebEnv, caller: Caller) -> None:
    _set(web, caller, max_active_jobs=2)
    web.submit(caller)
    web.submit(caller)
    err = _refused(web, caller, 429)
    assert err["field"] == "max_active_jobs" and err["limit"] == 2 and err["used"] == 2
    assert err["retry_after"] is None


def test_a_spent_daily_budget_is_429_until_midnight(
    web: WebEnv, caller: Caller, other_caller_spends: None
) -> None:
    _spend(web, caller, 3.0)
    _spend(web, caller, 50.0, days_ago=2)  # earlier days do not count against today
    _set(web, caller, daily_budget_usd=3.0)
    err = _refused(web, caller, 429)
    now = utcnow()
    assert err["field"] == "daily_budget_usd" and err["limit"] == 3.0 and err["used"] == pytest.approx(3.0)
    assert err["resets_at"] == next_day(now).isoformat()
    assert 0 < int(err["retry_after"]) <= 86_400
    # Raised, the tenant can submit again.
    _set(web, caller, daily_budget_usd=10.0)
    assert web.submit(caller)["status"] == "queued"


def test_a_spent_monthly_budget_is_429_until_the_first(web: WebEnv, caller: Caller) -> None:
    _spend(web, caller, 20.0)
    _set(web, caller, monthly_budget_usd=15.0)
    err = _refused(web, caller, 429)
    assert err["field"] == "monthly_budget_usd" and err["resets_at"] == next_month(utcnow()).isoformat()


@pytest.fixture
def other_caller_spends(web: WebEnv) -> None:
    """Another tenant's spending never counts against this one's budget."""
    other = web.new_caller("spender")
    _spend(web, other, 1_000.0)
    with session_scope(web.sessions) as s:
        assert s.get(Tenant, other.tenant_id) is not None


def _submit_at_once(web: WebEnv, caller: Caller, n: int) -> list[int]:
    """`n` NDJSON submissions of `caller` sent together from `n` threads, each with its own client, against
    the app on the real Postgres; their statuses."""
    start = threading.Barrier(n)

    def submit(_: int) -> int:
        client = web.app.test_client()
        start.wait()
        resp = client.post(
            "/v1/jobs",
            query_string={"kind": "claims"},
            data=ndjson(ROWS),
            headers=caller.ndjson_headers(),
        )
        return resp.status_code

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(submit, range(n)))


def _live_jobs(web: WebEnv, caller: Caller) -> int:
    with web.sessions() as s:
        return live_jobs_of(s, caller.tenant_id)


def test_twenty_submissions_at_once_store_one_job_under_a_limit_of_one(web: WebEnv, caller: Caller) -> None:
    _set(web, caller, max_active_jobs=1)
    statuses = _submit_at_once(web, caller, 20)
    assert sorted(statuses) == [202] + [429] * 19
    assert _live_jobs(web, caller) == 1


def test_submissions_at_once_fill_a_limit_of_three_exactly(web: WebEnv, caller: Caller) -> None:
    _set(web, caller, max_active_jobs=3)
    statuses = _submit_at_once(web, caller, 12)
    assert sorted(statuses) == [202] * 3 + [429] * 9
    assert _live_jobs(web, caller) == 3


def test_a_retry_counts_against_the_live_job_limit(web: WebEnv, caller: Caller) -> None:
    _set(web, caller, max_active_jobs=1)
    ended = web.submit(caller, mode="grounded")["id"]
    settle_items(
        web.sessions,
        ended,
        {("c1", "grounded"): 0.9, ("c2", "grounded"): ("failed", "upstream 503"), ("c3", "grounded"): 0.2},
    )
    with session_scope(web.sessions) as s:
        assert maybe_finalize(s, uuid.UUID(ended))
    live = web.submit(caller)["id"]  # the one live job the limit allows
    resp = web.client.post(f"/v1/jobs/{ended}/retry", headers=caller.headers)
    assert resp.status_code == 429, resp.get_json()
    err = resp.get_json()["error"]
    assert err["type"] == "quota_exceeded" and err["field"] == "max_active_jobs" and err["used"] == 1
    assert "retry when one has ended" in err["message"]
    assert web.job(ended).status == "completed"
    with session_scope(web.sessions) as s:
        job = s.get(Job, uuid.UUID(live))
        assert job is not None and cancel_job(s, job)
    with session_scope(web.sessions) as s:
        assert maybe_finalize(s, uuid.UUID(live))  # cancelled: no longer live
    assert web.client.post(f"/v1/jobs/{ended}/retry", headers=caller.headers).status_code == 202
