"""Deleting jobs and retention on real Postgres: a deleted job is gone for its tenant at once (lists,
results, errors, scorecard, report page, request lookup) while usage stays; its rows are purged in bounded
batches, the job row last. A job past its tenant's retention keeps its row, counts, usage and summary but
not its items (exports are 410), and its row goes one retention period later. Another tenant's jobs are a
404 and untouched."""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from jobs.finalize import maybe_finalize
from jobs.purge import delete_tenant, purge_queue, purge_step
from jobs.retention import Retention
from jobs.tenancy import set_tenant
from models import ApiCall, Item, Job, UsageDay, WebhookDelivery, session_scope
from tests.integration.test_pages import csrf_token, html, sign_in
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    ROWS,
    Caller,
    WebEnv,
    caller,
    memory_celery,
    other_caller,
    settle_items,
    web,
    web_settings,
)
from workers.api import PURGE

pytestmark = pytest.mark.integration

HOOK = "https://hooks.example.org/factgate"


def ended_job(web: WebEnv, who: Caller, **options: Any) -> str:
    """A claims job with three grounded items: two done, one failed (each with its api_calls row)."""
    jid: str = web.submit(who, mode="grounded", **options)["id"]
    settle_items(
        web.sessions,
        jid,
        {("c1", "grounded"): 0.9, ("c2", "grounded"): 0.1, ("c3", "grounded"): ("failed", "upstream 503")},
    )
    with session_scope(web.sessions) as s:
        assert maybe_finalize(s, uuid.UUID(jid))
    return jid


def rows_of(web: WebEnv, job_id: str) -> dict[str, int]:
    jid = uuid.UUID(job_id)
    with web.sessions() as s:
        return {
            "jobs": int(s.scalar(select(func.count()).select_from(Job).where(Job.id == jid)) or 0),
            "items": int(s.scalar(select(func.count()).select_from(Item).where(Item.job_id == jid)) or 0),
            "api_calls": int(
                s.scalar(select(func.count()).select_from(ApiCall).where(ApiCall.job_id == jid)) or 0
            ),
            "webhooks": int(
                s.scalar(
                    select(func.count()).select_from(WebhookDelivery).where(WebhookDelivery.job_id == jid)
                )
                or 0
            ),
        }


def purge_all(
    web: WebEnv, job_id: str, limit: int, retention: Retention | None = None, now: datetime | None = None
) -> list[int]:
    steps: list[int] = []
    policy: dict[str, Any] = {"retention": retention, "now": now} if retention or now else {}
    while not steps or steps[-1]:
        with session_scope(web.sessions) as s:
            steps.append(purge_step(s, uuid.UUID(job_id), limit, **policy))
    return steps


def usage_now(web: WebEnv, who: Caller) -> dict[str, Any]:
    today = datetime.now(UTC).date().isoformat()
    body: dict[str, Any] = web.client.get(
        f"/v1/usage?from={today}&to={today}", headers=who.headers
    ).get_json()
    return body


def test_delete_hides_the_job_at_once_keeps_usage_and_purges_in_batches(
    web: WebEnv, caller: Caller, other_caller: Caller
) -> None:
    jid = ended_job(web, caller, webhook_url=HOOK)
    kept = ended_job(web, caller)
    theirs = ended_job(web, other_caller)
    usage_before = usage_now(web, caller)
    assert usage_before["totals"]["requests"] == 6
    assert rows_of(web, jid) == {"jobs": 1, "items": 3, "api_calls": 3, "webhooks": 1}
    h = caller.headers
    assert web.client.get("/v1/requests/req-c1-grounded", headers=h).get_json()["calls"][0]["job"]["id"] in (
        jid,
        kept,
    )
    # Another tenant's job is a 404 and stays.
    assert web.client.delete(f"/v1/jobs/{theirs}", headers=h).status_code == 404
    web.drain_messages()
    resp = web.client.delete(f"/v1/jobs/{jid}", headers=h)
    assert resp.status_code == 204 and resp.get_data() == b""
    assert PURGE in {task for task, _ in web.drain_messages()}
    for path in ("", "/results", "/errors", "/scorecard", "/retry", "/cancel"):
        method = web.client.post if path in ("/retry", "/cancel") else web.client.get
        assert method(f"/v1/jobs/{jid}{path}", headers=h).status_code == 404, path
    assert web.client.delete(f"/v1/jobs/{jid}", headers=h).status_code == 404  # deleting twice
    assert [j["id"] for j in web.client.get("/v1/jobs", headers=h).get_json()["data"]] == [kept]
    # The request id exists in both jobs of this tenant; only the kept one's call is found now.
    calls = web.client.get("/v1/requests/req-c1-grounded", headers=h).get_json()["calls"]
    assert [c["job"]["id"] for c in calls] == [kept]
    assert usage_now(web, caller) == usage_before
    # The purge: calls rolled up, then items, webhooks, and the job row, two rows at a time.
    assert purge_all(web, jid, 2) == [2, 1, 2, 1, 1, 1, 0]
    assert rows_of(web, jid) == {"jobs": 0, "items": 0, "api_calls": 0, "webhooks": 0}
    assert usage_now(web, caller) == usage_before
    with web.sessions() as s:
        assert (
            int(
                s.scalar(select(func.sum(UsageDay.requests)).where(UsageDay.tenant_id == caller.tenant_id))
                or 0
            )
            == 3
        )
    assert rows_of(web, kept)["items"] == 3 and rows_of(web, theirs)["items"] == 3
    assert usage_now(web, other_caller)["totals"]["requests"] == 3


def test_a_live_job_cannot_be_deleted(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller)["id"]
    resp = web.client.delete(f"/v1/jobs/{jid}", headers=caller.headers)
    assert resp.status_code == 409
    err = resp.get_json()["error"]
    assert err["type"] == "job_live" and "cancel" in err["message"] and err["job_id"] == jid
    with session_scope(web.sessions) as s:
        assert purge_step(s, uuid.UUID(jid)) == 0  # the purge never touches a live job
    assert web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).status_code == 200


def test_the_page_confirms_then_deletes_with_csrf(web: WebEnv, caller: Caller) -> None:
    jid = ended_job(web, caller)
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{jid}"))
    assert "Delete job" in page and 'data-field="expires-at"' in page
    confirm = html(web.client.get(f"/jobs/{jid}/delete"))
    assert "cannot be undone" in confirm and "Usage page" in confirm
    assert web.client.post(f"/jobs/{jid}/delete", data={}).status_code == 400  # no CSRF token
    assert web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).status_code == 200
    resp = web.client.post(f"/jobs/{jid}/delete", data={"csrf_token": csrf_token(web.client, "/jobs")})
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/jobs")
    listing = html(web.client.get("/jobs"))
    assert "was deleted" in listing and jid not in listing
    for path in ("", "/results.ndjson", "/report.html", "/delete"):
        assert web.client.get(f"/jobs/{jid}{path}").status_code == 404, path


def test_the_page_refuses_to_delete_a_live_job(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller)["id"]
    sign_in(web.client, caller)
    assert "Delete job" not in html(web.client.get(f"/jobs/{jid}"))
    assert "cancel it first" in html(web.client.get(f"/jobs/{jid}/delete"))
    resp = web.client.post(f"/jobs/{jid}/delete", data={"csrf_token": csrf_token(web.client, "/jobs")})
    assert "cancel it first" in html(web.client.get(resp.headers["Location"]))
    assert web.job(jid).deleted_at is None


def test_retention_purges_items_keeps_the_summary_then_removes_the_row(web: WebEnv, caller: Caller) -> None:
    with session_scope(web.sessions) as s:
        set_tenant(s, caller.tenant_name, retention_days=2)
    jid = ended_job(web, caller)
    job = web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).get_json()
    ended = datetime.fromisoformat(job["timestamps"]["completed_at"])
    assert datetime.fromisoformat(job["expires_at"]) == ended + timedelta(days=2)
    assert job["purged_at"] is None
    policy = Retention(default_days=30, max_days=365)
    with session_scope(web.sessions) as s:
        assert uuid.UUID(jid) not in purge_queue(s, policy, ended + timedelta(days=1)).expire
        assert uuid.UUID(jid) in purge_queue(s, policy, ended + timedelta(days=3)).expire
        # An operator maximum below the tenant's own days wins.
        assert uuid.UUID(jid) in purge_queue(s, Retention(1, 1), ended + timedelta(days=1, hours=1)).expire
    usage_before = usage_now(web, caller)
    assert purge_all(web, jid, 1000, policy, ended + timedelta(days=1)) == [0]  # not yet: nothing goes
    assert rows_of(web, jid) == {"jobs": 1, "items": 3, "api_calls": 3, "webhooks": 0}
    purge_all(web, jid, 1000, policy, ended + timedelta(days=3))
    assert rows_of(web, jid) == {"jobs": 1, "items": 0, "api_calls": 0, "webhooks": 0}
    purged = web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).get_json()
    assert purged["status"] == "completed" and purged["purged_at"] is not None
    assert purged["summary"] == job["summary"] and purged["request_counts"] == job["request_counts"]
    assert purged["usage"] == job["usage"]
    for path in ("/results", "/errors", "/scorecard"):
        resp = web.client.get(f"/v1/jobs/{jid}{path}", headers=caller.headers)
        assert resp.status_code == 410 and resp.get_json()["error"]["type"] == "job_purged", path
    assert web.client.post(f"/v1/jobs/{jid}/retry", headers=caller.headers).status_code == 410
    assert usage_now(web, caller) == usage_before
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{jid}"))
    assert 'data-field="purged-at"' in page and "were purged under its retention" in page
    assert web.client.get(f"/jobs/{jid}/results.ndjson").status_code == 410
    # One more retention period after the purge, the row goes too.
    purged_at = datetime.fromisoformat(purged["purged_at"])
    with session_scope(web.sessions) as s:
        assert uuid.UUID(jid) not in purge_queue(s, policy, purged_at + timedelta(days=1)).remove
    with session_scope(web.sessions) as s:
        assert uuid.UUID(jid) in purge_queue(s, policy, purged_at + timedelta(days=3)).remove
    assert web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).status_code == 404
    assert purge_all(web, jid, 1000) == [1, 0]
    assert rows_of(web, jid)["jobs"] == 0


def _ended_days_ago(web: WebEnv, job_id: str, days: int) -> datetime:
    """Move the job's end `days` days into the past (retention is counted from it); the new end."""
    ended = datetime.now(UTC) - timedelta(days=days)
    with session_scope(web.sessions) as s:
        job = s.get(Job, uuid.UUID(job_id))
        assert job is not None and job.status == "completed"
        job.completed_at = ended
    return ended


def test_a_retry_is_refused_once_the_job_is_past_its_retention(web: WebEnv, caller: Caller) -> None:
    """The purge queues a job past its retention and deletes it in batches: a retry then (between two
    batches here) would run a job with rows missing, so it is a 409 and the job stays as it was."""
    with session_scope(web.sessions) as s:
        set_tenant(s, caller.tenant_name, retention_days=2)
    jid = ended_job(web, caller)
    _ended_days_ago(web, jid, 3)
    with session_scope(web.sessions) as s:
        assert uuid.UUID(jid) in purge_queue(s, Retention()).expire
    with session_scope(web.sessions) as s:
        assert purge_step(s, uuid.UUID(jid), 1) == 1  # the purge has begun: one call rolled up
    resp = web.client.post(f"/v1/jobs/{jid}/retry", headers=caller.headers)
    assert resp.status_code == 409, resp.get_json()
    err = resp.get_json()["error"]
    assert err["type"] == "conflict_error"
    assert "past its retention of 2 days" in err["message"] and "being purged" in err["message"]
    assert web.job(jid).status == "completed"
    assert rows_of(web, jid)["items"] == 3  # no failed item went back to pending
    with web.sessions() as s:
        statuses = sorted(s.scalars(select(Item.status).where(Item.job_id == uuid.UUID(jid))))
    assert statuses == ["done", "done", "failed"]
    # The page says the same.
    sign_in(web.client, caller)
    token = csrf_token(web.client, f"/jobs/{jid}")
    web.client.post(f"/jobs/{jid}/retry", data={"csrf_token": token})
    assert "being purged" in html(web.client.get(f"/jobs/{jid}"))
    assert web.job(jid).status == "completed"
    # A job within its retention is retried as before.
    fresh = ended_job(web, caller)
    assert web.client.post(f"/v1/jobs/{fresh}/retry", headers=caller.headers).status_code == 202


def test_the_purge_rechecks_expiry_per_step_and_spares_a_job_that_ended_again(
    web: WebEnv, caller: Caller
) -> None:
    """What the queue read is not trusted: a job that is no longer past its retention when a step runs (here
    it ended again, as a retry that raced the queue would leave it; or its tenant's retention was raised) is
    left whole."""
    with session_scope(web.sessions) as s:
        set_tenant(s, caller.tenant_name, retention_days=2)
    jid = ended_job(web, caller)
    _ended_days_ago(web, jid, 3)
    with session_scope(web.sessions) as s:
        assert uuid.UUID(jid) in purge_queue(s, Retention()).expire
    _ended_days_ago(web, jid, 0)  # completed again since the queue was read
    assert purge_all(web, jid, 1) == [0]
    assert rows_of(web, jid) == {"jobs": 1, "items": 3, "api_calls": 3, "webhooks": 0}
    assert web.job(jid).purged_at is None
    # Past its retention again, but the tenant now keeps jobs longer: still spared.
    _ended_days_ago(web, jid, 3)
    with session_scope(web.sessions) as s:
        set_tenant(s, caller.tenant_name, retention_days=7)
    assert purge_all(web, jid, 1) == [0]
    assert rows_of(web, jid) == {"jobs": 1, "items": 3, "api_calls": 3, "webhooks": 0}
    # Once truly past it, the purge goes ahead.
    _ended_days_ago(web, jid, 8)
    purge_all(web, jid, 1000)
    assert rows_of(web, jid) == {"jobs": 1, "items": 0, "api_calls": 0, "webhooks": 0}
    assert web.job(jid).purged_at is not None


def test_expires_at_follows_the_default_and_is_null_while_live(web: WebEnv, caller: Caller) -> None:
    live = web.submit(caller)
    assert live["expires_at"] is None and live["purged_at"] is None
    jid = ended_job(web, caller)
    job = web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).get_json()
    ended = datetime.fromisoformat(job["timestamps"]["completed_at"])
    assert datetime.fromisoformat(job["expires_at"]) == ended + timedelta(days=30)
    assert date.fromisoformat(job["expires_at"][:10]) > ended.date()


def test_a_removed_tenant_is_purged_like_deleted_jobs_and_another_is_untouched(
    web: WebEnv, caller: Caller, other_caller: Caller
) -> None:
    mine = ended_job(web, caller)
    live = web.submit(caller)["id"]
    theirs = ended_job(web, other_caller)
    theirs_live = web.submit(other_caller)["id"]
    sign_in(web.client, caller)
    with session_scope(web.sessions) as s:
        done = delete_tenant(s, caller.tenant_name)
    assert done.tokens_revoked == 1 and done.sessions_ended == 1 and done.jobs_deleted == 1
    assert done.jobs_cancelled == [uuid.UUID(live)]
    assert web.client.get("/v1/jobs", headers=caller.headers).status_code == 401
    assert web.client.get("/jobs").status_code in (302, 303, 401)  # the page session ended with it
    with session_scope(web.sessions) as s:
        assert maybe_finalize(s, uuid.UUID(live))  # the cancelled job ends, then goes like the others
        queue = purge_queue(s, Retention())
    # The database is shared with other tests' tenants: only this one's jobs matter here.
    assert {uuid.UUID(mine), uuid.UUID(live)} <= set(queue.remove)
    assert not {uuid.UUID(theirs), uuid.UUID(theirs_live)} & set(queue.remove + queue.expire)
    for jid in (mine, live):
        purge_all(web, jid, 1000)
        assert rows_of(web, jid) == {"jobs": 0, "items": 0, "api_calls": 0, "webhooks": 0}
    assert rows_of(web, theirs) == {"jobs": 1, "items": 3, "api_calls": 3, "webhooks": 0}
    assert web.job(theirs_live).status == "queued"
    assert usage_now(web, other_caller)["totals"]["requests"] == 3
    with web.sessions() as s:  # the removed tenant's billing stays in the roll-up
        rolled = s.scalar(select(func.sum(UsageDay.requests)).where(UsageDay.tenant_id == caller.tenant_id))
        assert int(rolled or 0) == 3
