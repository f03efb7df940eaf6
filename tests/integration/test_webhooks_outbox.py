"""The webhook outbox on real Postgres, without a worker: what ending a job writes, how senders claim and
record attempts, redelivery from the job page (CSRF, tenant scope), and that the job object is the API's.

Sending through a real worker to a real receiver is tests/integration/test_webhooks_delivery.py.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from flask import url_for
from sqlalchemy import select, update

from jobs.control import cancel_job, retry_failed
from jobs.finalize import maybe_finalize
from jobs.retention import Retention
from jobs.serialize import job_model
from jobs.tenancy import set_tenant
from jobs.webhooks import (
    AttemptResult,
    DeliveryStateError,
    claim_due,
    created_in,
    record_attempt,
    redeliver,
)
from models import Job, Tenant, WebhookAttempt, WebhookDelivery, session_scope, utcnow
from tests.e2e.builders import claim_output, finalize, settle, submit_claims
from tests.integration.test_pages import csrf_token, html, sign_in
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    other_caller,
    web,
    web_settings,
)
from workers.api import DELIVER_WEBHOOKS

pytestmark = pytest.mark.integration

HOOK = "https://hooks.example.com/factgate"
ROWS = [
    {"id": "w1", "claim": "Rust 1.0 was released in May 2015.", "label": True},
    {"id": "w2", "claim": "The Linux kernel was first released in 1998.", "label": False},
]


def deliveries(web: WebEnv, job_id: str) -> list[WebhookDelivery]:
    with web.sessions() as session:
        rows = list(
            session.scalars(
                select(WebhookDelivery)
                .where(WebhookDelivery.job_id == uuid.UUID(job_id))
                .order_by(WebhookDelivery.created_at)
            )
        )
        for row in rows:
            session.expunge(row)
        return rows


def ended_job(web: WebEnv, who: Caller, outcome: Any = None, **options: Any) -> str:
    job_id = submit_claims(web.client.post, who.headers, ROWS, mode="grounded", **options)
    settle(
        web.sessions,
        job_id,
        {
            ("w1", "grounded"): claim_output(0.93, "wh-1"),
            ("w2", "grounded"): outcome or claim_output(0.1, "wh-2"),
        },
    )
    finalize(web.sessions, job_id)
    return job_id


def test_ending_a_job_writes_its_webhook_in_the_same_transaction(web: WebEnv, caller: Caller) -> None:
    job_id = ended_job(web, caller, webhook_url=HOOK)
    [row] = deliveries(web, job_id)
    assert row.event == "job.completed" and row.url == HOOK and row.status == "pending"
    assert row.webhook_id == f"msg_{row.id.hex}" and row.attempts == 0
    assert row.next_attempt_at is not None and row.next_attempt_at <= utcnow()
    # The body is the job object exactly as GET /v1/jobs/{id} returns it, now that the job has ended.
    api = web.client.get(f"/v1/jobs/{job_id}", headers=caller.headers).get_json()
    assert json.loads(row.body) == api
    assert api["status"] == "completed" and api["options"]["webhook_url"] == HOOK
    # Nothing more is written for a job that had already ended.
    with session_scope(web.sessions) as session:
        assert maybe_finalize(session, uuid.UUID(job_id))
        assert created_in(session) == []
    assert len(deliveries(web, job_id)) == 1


def test_a_rollback_takes_the_webhook_with_the_jobs_end(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded", webhook_url=HOOK)
    settle(web.sessions, job_id, {(r["id"], "grounded"): claim_output(0.5, f"rb-{r['id']}") for r in ROWS})
    session = web.sessions()
    try:
        assert maybe_finalize(session, uuid.UUID(job_id))
        assert len(created_in(session)) == 1
        session.rollback()
    finally:
        session.close()
    assert web.job(job_id).status != "completed"
    assert deliveries(web, job_id) == []


def test_the_tenant_default_url_cancelled_and_retried_jobs(web: WebEnv, caller: Caller) -> None:
    # No URL anywhere: nothing to send.
    quiet = ended_job(web, caller)
    assert deliveries(web, quiet) == []
    with session_scope(web.sessions) as session:
        set_tenant(session, caller.tenant_name, webhook_url="https://default.example.com/in")
    # A job without the option goes to the tenant's default; the option wins over the default.
    failed_item = ended_job(web, caller, outcome=("failed", "upstream 503"))
    [first] = deliveries(web, failed_item)
    assert first.url == "https://default.example.com/in" and first.event == "job.completed"
    own = ended_job(web, caller, webhook_url=HOOK)
    assert [d.url for d in deliveries(web, own)] == [HOOK]
    # Retrying the failed item and ending again is a new message, with a new id.
    with session_scope(web.sessions) as session:
        job = session.get(Job, uuid.UUID(failed_item))
        assert job is not None and retry_failed(session, job, Retention()) == 1
    settle(web.sessions, failed_item, {("w2", "grounded"): claim_output(0.1, "wh-retry")})
    finalize(web.sessions, failed_item)
    again = deliveries(web, failed_item)
    assert len(again) == 2 and again[0].webhook_id != again[1].webhook_id
    # A cancelled job says so.
    live = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    with session_scope(web.sessions) as session:
        job = session.get(Job, uuid.UUID(live))
        assert job is not None and cancel_job(session, job)
    finalize(web.sessions, live)
    [cancelled] = deliveries(web, live)
    assert cancelled.event == "job.cancelled" and json.loads(cancelled.body)["status"] == "cancelled"


def test_senders_claim_each_delivery_once_and_record_attempts_with_backoff(
    web: WebEnv, caller: Caller
) -> None:
    job_id = ended_job(web, caller, webhook_url=HOOK)
    [row] = deliveries(web, job_id)
    # Other tests' deliveries share the database: claim until ours is held, by two "senders".
    with session_scope(web.sessions) as session:
        session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id != row.id)
            .values(next_attempt_at=utcnow() + timedelta(days=1))
        )
    with session_scope(web.sessions) as a:
        held = claim_due(a, lock_s=60)
    with session_scope(web.sessions) as b:
        assert [c.id for c in claim_due(b, lock_s=60)] == []  # held by the first sender
    [claimed] = [c for c in held if c.id == row.id]
    assert claimed.attempt == 1 and claimed.webhook_id == row.webhook_id

    before = utcnow()
    with session_scope(web.sessions) as session:
        status = record_attempt(
            session,
            claimed,
            AttemptResult(500, "HTTP 500", 12.0),
            started_at=before,
            retry_base_s=10,
            retry_for_s=86400,
        )
    assert status == "pending"
    [after] = deliveries(web, job_id)
    assert after.locked_until is None and after.last_status_code == 500 and after.last_error == "HTTP 500"
    assert after.next_attempt_at is not None
    assert timedelta(seconds=9) <= after.next_attempt_at - before <= timedelta(seconds=12)
    # Due again once the wait has passed; the second attempt waits twice as long.
    with session_scope(web.sessions) as session:
        session.execute(
            update(WebhookDelivery).where(WebhookDelivery.id == row.id).values(next_attempt_at=utcnow())
        )
    with session_scope(web.sessions) as session:
        [second] = claim_due(session, lock_s=60)
    assert second.attempt == 2 and second.webhook_id == row.webhook_id
    with session_scope(web.sessions) as session:
        record_attempt(
            session,
            second,
            AttemptResult(None, "no response", 5.0),
            started_at=utcnow(),
            retry_base_s=10,
            retry_for_s=86400,
        )
    [later] = deliveries(web, job_id)
    assert later.next_attempt_at is not None and later.next_attempt_at - utcnow() > timedelta(seconds=15)
    # Past the retry window it gives up; a 2xx delivers; a refusal is final at once.
    with session_scope(web.sessions) as session:
        session.execute(
            update(WebhookDelivery).where(WebhookDelivery.id == row.id).values(next_attempt_at=utcnow())
        )
    with session_scope(web.sessions) as session:
        [third] = claim_due(session, lock_s=60)
        assert (
            record_attempt(
                session,
                third,
                AttemptResult(503, "HTTP 503", 3.0),
                started_at=utcnow(),
                retry_base_s=10,
                retry_for_s=1,
            )
            == "failed"
        )
    [gave_up] = deliveries(web, job_id)
    assert gave_up.status == "failed" and gave_up.next_attempt_at is None
    with web.sessions() as session:
        attempts = session.scalars(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id == row.id)
            .order_by(WebhookAttempt.attempt)
        ).all()
        assert [(a.attempt, a.status_code, a.next_attempt_at is not None) for a in attempts] == [
            (1, 500, True),
            (2, None, True),
            (3, 503, False),
        ]


def test_a_dead_senders_hold_runs_out(web: WebEnv, caller: Caller) -> None:
    job_id = ended_job(web, caller, webhook_url=HOOK)
    [row] = deliveries(web, job_id)
    with session_scope(web.sessions) as session:
        session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id != row.id)
            .values(next_attempt_at=utcnow() + timedelta(days=1))
        )
        session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == row.id)
            .values(attempts=1, locked_until=utcnow() - timedelta(seconds=1))
        )
    with session_scope(web.sessions) as session:
        [claimed] = claim_due(session, lock_s=60)
    assert claimed.id == row.id and claimed.attempt == 2


def test_job_object_links_are_the_api_routes(web: WebEnv, caller: Caller) -> None:
    job_id = ended_job(web, caller)
    with web.app.test_request_context(), web.sessions() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        links = job_model(session, job).as_json()["links"]
        assert links == {
            "self": url_for("api.get_job", job_id=job_id),
            "results": url_for("api.job_results", job_id=job_id),
            "errors": url_for("api.job_errors", job_id=job_id),
            "scorecard": url_for("api.job_scorecard", job_id=job_id),
            "cancel": url_for("api.cancel_job", job_id=job_id),
            "retry": url_for("api.retry_job", job_id=job_id),
            "report": url_for("pages.job_page", job_id=job_id),
        }


def test_the_job_page_lists_deliveries_and_redelivers_them(
    web: WebEnv, caller: Caller, other_caller: Caller
) -> None:
    live = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded", webhook_url=HOOK)
    sign_in(web.client, caller)
    assert f'When this job ends, a webhook goes to <span class="mono">{HOOK}</span>' in html(
        web.client.get(f"/jobs/{live}")
    )
    job_id = ended_job(web, caller, webhook_url=HOOK)
    [row] = deliveries(web, job_id)
    page = html(web.client.get(f"/jobs/{job_id}"))
    assert row.webhook_id in page and "… sending" in page
    assert page.count(HOOK) == 1  # in the Webhooks panel, not among the options of the overview
    report_file = web.client.get(f"/jobs/{job_id}/report.html").get_data(as_text=True)
    assert HOOK not in report_file
    assert "Redeliver</button>" not in page  # still being tried: nothing to redeliver yet
    path = f"/jobs/{job_id}/webhooks/{row.id}/redeliver"
    resp = web.client.post(path, data={"csrf_token": csrf_token(web.client, "/jobs")})
    assert "still being tried" in html(web.client.get(resp.headers["Location"]))

    # One failed attempt and a give-up, as a sender would record them.
    with session_scope(web.sessions) as session:
        session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id != row.id)
            .values(next_attempt_at=utcnow() + timedelta(days=1))
        )
    with session_scope(web.sessions) as session:
        [claimed] = [c for c in claim_due(session, lock_s=60) if c.id == row.id]
        record_attempt(
            session,
            claimed,
            AttemptResult(502, "HTTP 502", 40.0),
            started_at=utcnow(),
            retry_base_s=10,
            retry_for_s=1,
        )
    page = html(web.client.get(f"/jobs/{job_id}"))
    assert "✗ gave up" in page and "HTTP 502" in page and "1 attempt" in page
    assert f'aria-label="Redeliver webhook {row.webhook_id}"' in page

    # Without the CSRF token: refused. Another tenant: the same 404 as a missing job.
    assert web.client.post(path).status_code == 400
    other = web.app.test_client()
    sign_in(other, other_caller)
    assert other.post(path, data={"csrf_token": csrf_token(other, "/jobs")}).status_code == 404
    other_job = ended_job(web, other_caller, webhook_url=HOOK)
    cross = f"/jobs/{other_job}/webhooks/{row.id}/redeliver"
    assert other.post(cross, data={"csrf_token": csrf_token(other, "/jobs")}).status_code == 404
    with web.sessions() as session:
        assert redeliver(session, other_caller.tenant_id, row.id) is None

    web.drain_messages()
    resp = web.client.post(path, data={"csrf_token": csrf_token(web.client, "/jobs")})
    assert resp.status_code == 302 and resp.headers["Location"].endswith(f"/jobs/{job_id}#webhooks")
    assert f"Redelivering webhook {row.webhook_id}" in html(web.client.get(resp.headers["Location"]))
    [again] = deliveries(web, job_id)
    assert again.status == "pending" and again.webhook_id == row.webhook_id and again.body == row.body
    assert again.next_attempt_at is not None and again.next_attempt_at <= utcnow()
    assert DELIVER_WEBHOOKS in [task for task, _ in web.drain_messages()]
    with session_scope(web.sessions) as session, pytest.raises(DeliveryStateError):
        redeliver(session, caller.tenant_id, row.id)


def test_webhook_url_option_is_validated_at_intake(web: WebEnv, caller: Caller) -> None:
    bad = web.client.post(
        "/v1/jobs",
        json={"kind": "claims", "options": {"webhook_url": "https://user:pw@example.com/"}, "items": ROWS},
        headers=caller.headers,
    )
    assert bad.status_code == 400
    assert bad.get_json()["error"]["field"] == "options.webhook_url"
    ndjson = web.client.post(
        "/v1/jobs?kind=answer&webhook_url=ftp://example.com/x",
        data=b'{"id": "q", "question": "Why?"}\n',
        headers=caller.ndjson_headers(),
    )
    assert ndjson.status_code == 400 and ndjson.get_json()["error"]["field"] == "webhook_url"
    ok = web.client.post(
        f"/v1/jobs?kind=quote&webhook_url={HOOK}",
        data=b'{"id": "q", "question": "How many bones are in the adult human body?"}\n',
        headers=caller.ndjson_headers(),
    )
    assert ok.status_code == 202 and ok.get_json()["options"]["webhook_url"] == HOOK
    with web.sessions() as session:
        assert session.scalar(select(Tenant.webhook_url).where(Tenant.id == caller.tenant_id)) is None


def test_a_webhook_host_with_no_ascii_form_is_a_400_naming_the_field(web: WebEnv, caller: Caller) -> None:
    body = {"kind": "claims", "options": {"webhook_url": "http://\u2603.example:9208/hook"}, "items": ROWS}
    resp = web.client.post("/v1/jobs", json=body, headers=caller.headers)
    assert resp.status_code == 400, resp.get_data(as_text=True)
    text = json.dumps(resp.get_json())
    assert "webhook_url" in text and "internationalized name" in text
    # An internationalized name that has one is accepted as given (sent to in its xn-- form).
    accepted = {**body, "options": {"webhook_url": "http://b\u00fccher.example:9208/hook"}}
    assert web.client.post("/v1/jobs", json=accepted, headers=caller.headers).status_code == 202
