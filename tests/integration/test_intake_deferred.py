"""Large streamed submissions answer `validating` and get their items built after the 202.

Above FACTGATE_INTAKE_DEFER_ROWS staged rows (2 here) the job is committed `validating` with its rows in
`intake_rows`; `jobs/bulk_load.py:build_staged` (what `start_job` runs) makes the very items the
synchronous path makes, once. A bad row still stores nothing; a validating job counts against the live-job
quota, reads as an empty export with a correct trailer, and a cancel ends it with its webhook. The real
worker and the sweeper's recovery of a lost `start_job` are in test_queue_validating.py.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import func, select, text

from jobs.bulk_load import Built, build_staged, try_build_lock
from jobs.control import cancel_step
from jobs.finalize import maybe_finalize
from jobs.sweeper import stale_validating
from models import WebhookDelivery, intake_rows, session_scope
from tests.integration.item_rows import item_rows
from tests.integration.test_api_intake import Unchanged, error_of
from tests.integration.test_pages import html, sign_in
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    ROWS,
    Caller,
    WebEnv,
    caller,
    make_env,
    memory_celery,
    ndjson,
    web,
    web_settings,
)
from workers.api import START_JOB

pytestmark = pytest.mark.integration

LONG_CLAIM = "A claim that is far too long for the grounding query. " * 8
CLAIM_ROWS: list[dict[str, Any]] = [
    *ROWS,
    {"id": "c4", "claim": ROWS[0]["claim"]},  # a repeat of c1's request
    {"id": "c5", "claim": LONG_CLAIM, "source": "https://example.org/a"},
    {"id": "c6", "claim": ROWS[1]["claim"], "label": True},  # a repeat of c2's
    {"id": "c7", "claim": 'Tabs\tand "quotes"\\ and a\nnewline survive COPY.'},
]


@pytest.fixture
def deferring(web_settings: dict[str, Any], memory_celery: Celery) -> Iterator[WebEnv]:
    """The same app on the same database, deferring the item build of any body of more than 2 rows."""
    env = make_env({**web_settings, "intake_defer_rows": 2}, memory_celery)
    yield env
    env.app.extensions["factgate"].engine.dispose()


def staged(web: WebEnv, job_id: str) -> int:
    with web.sessions() as s:
        return int(
            s.scalar(
                select(func.count()).select_from(intake_rows).where(intake_rows.c.job_id == uuid.UUID(job_id))
            )
            or 0
        )


def build(web: WebEnv, job_id: str) -> Built:
    with session_scope(web.sessions) as s:
        return build_staged(s, uuid.UUID(job_id))


def csv_body(rows: list[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        text_ = (
            "" if value is None else ("true" if value is True else "false" if value is False else str(value))
        )
        return '"' + text_.replace('"', '""') + '"'

    fields = ("id", "claim", "label", "kind", "source")
    return ",".join(fields) + "\n" + "".join(",".join(cell(r.get(f)) for f in fields) + "\n" for r in rows)


@pytest.mark.parametrize("body_format", ["ndjson", "csv"])
def test_a_deferred_build_makes_the_items_the_synchronous_path_makes(
    web: WebEnv, deferring: WebEnv, caller: Caller, body_format: str
) -> None:
    """Same body, once built before the 202 and once after it: positions, inputs, dedupe keys and the
    links of repeats to their first item are equal; the staged rows are gone either way."""
    if body_format == "ndjson":
        body, content_type = ndjson(CLAIM_ROWS), "application/x-ndjson"
    else:
        body, content_type = csv_body(CLAIM_ROWS).encode(), "text/csv"
    headers = {**caller.headers, "Content-Type": content_type}
    at_once = web.client.post("/v1/jobs?kind=claims&mode=both", data=body, headers=headers)
    deferred = deferring.client.post("/v1/jobs?kind=claims&mode=both", data=body, headers=headers)
    assert at_once.status_code == 202 and deferred.status_code == 202, deferred.get_json()
    a, b = at_once.get_json(), deferred.get_json()
    assert a["status"] == "queued" and staged(web, a["id"]) == 0
    # Accepted, not built: the answer counts the items to come, all pending, and nothing exists yet.
    assert b["status"] == "validating"
    assert b["request_counts"] == {**a["request_counts"], "total": 14, "pending": 14}
    assert b["timestamps"]["queued_at"] is None and b["warnings"] == a["warnings"] != []
    assert item_rows(deferring, b["id"]) == [] and staged(deferring, b["id"]) == len(CLAIM_ROWS)
    assert deferring.started_job_ids() == [a["id"], b["id"]]  # both start_job, after commit

    assert build(deferring, b["id"]) is Built.BUILT
    built = item_rows(deferring, b["id"])
    assert built == item_rows(web, a["id"]) and len(built) == 14
    assert {(r[2], r[3]): (r[10], r[11]) for r in built if r[10] is not None} == {
        ("c4", "ungrounded"): ("c1", "ungrounded"),
        ("c4", "grounded"): ("c1", "grounded"),
        ("c6", "ungrounded"): ("c2", "ungrounded"),
        ("c6", "grounded"): ("c2", "grounded"),
    }
    assert staged(deferring, b["id"]) == 0
    assert {r[5]["claim"] for r in built if r[2] == "c7"} == {CLAIM_ROWS[-1]["claim"]}  # COPY escapes undone
    job = deferring.job(b["id"])
    assert job.status == "queued" and job.queued_at is not None and job.total_items == 14
    after = deferring.client.get(f"/v1/jobs/{b['id']}", headers=caller.headers).get_json()
    assert after["request_counts"] == a["request_counts"]

    # A second message (redelivered, or the sweeper's) builds nothing more.
    assert build(deferring, b["id"]) is Built.SKIPPED
    assert item_rows(deferring, b["id"]) == built


@pytest.mark.parametrize("kind", ["answer", "quote"])
def test_question_kinds_defer_the_same_way(web: WebEnv, deferring: WebEnv, caller: Caller, kind: str) -> None:
    rows = [{"id": f"q{i}", "question": f"Who built bridge number {i}?"} for i in range(5)]
    headers = caller.ndjson_headers()
    a = web.client.post(f"/v1/jobs?kind={kind}", data=ndjson(rows), headers=headers).get_json()
    b = deferring.client.post(f"/v1/jobs?kind={kind}", data=ndjson(rows), headers=headers).get_json()
    assert (a["status"], b["status"]) == ("queued", "validating")
    assert build(deferring, b["id"]) is Built.BUILT
    assert item_rows(deferring, b["id"]) == item_rows(web, a["id"]) != []


def test_a_bad_row_in_a_deferred_body_stores_nothing(deferring: WebEnv, caller: Caller) -> None:
    """Validation finishes before the 202 whatever the size: a bad last row is a 400 naming its line, and
    neither the job nor any staged row remains."""
    rows = [{"id": f"r{i}", "claim": f"Claim {i}."} for i in range(6_000)] + [{"id": "bad", "claim": ""}]
    with Unchanged(deferring):
        err = error_of(
            deferring.client.post("/v1/jobs?kind=claims", data=ndjson(rows), headers=caller.ndjson_headers()),
            400,
        )
    assert err["line"] == 6_001 and err["field"] == "claim"


def test_a_validating_job_counts_against_the_live_job_quota(deferring: WebEnv, caller: Caller) -> None:
    with deferring.sessions() as s:
        s.execute(text("UPDATE tenants SET max_active_jobs = 1 WHERE id = :t"), {"t": caller.tenant_id})
        s.commit()
    first = deferring.client.post(
        "/v1/jobs?kind=claims", data=ndjson(CLAIM_ROWS), headers=caller.ndjson_headers()
    )
    assert first.get_json()["status"] == "validating"
    deferring.drain_messages()
    with Unchanged(deferring):
        again = deferring.client.post(
            "/v1/jobs?kind=claims", data=ndjson(ROWS), headers=caller.ndjson_headers()
        )
        err = error_of(again, 429)
    assert err["field"] == "max_active_jobs"


def test_exports_of_a_validating_job_are_empty_and_complete(deferring: WebEnv, caller: Caller) -> None:
    job = deferring.client.post(
        "/v1/jobs?kind=claims", data=ndjson(CLAIM_ROWS), headers=caller.ndjson_headers()
    ).get_json()
    h = caller.headers
    results = deferring.client.get(f"/v1/jobs/{job['id']}/results", headers=h)
    assert results.headers["X-Job-Status"] == "validating"
    assert [json.loads(x) for x in results.get_data(as_text=True).splitlines()] == [
        {"_end": {"count": 0, "after": None, "last_id": None}}
    ]
    as_csv = deferring.client.get(f"/v1/jobs/{job['id']}/results?format=csv", headers=h).get_data(
        as_text=True
    )
    assert as_csv.splitlines()[-1] == "#end,0" and len(as_csv.splitlines()) == 2  # header, trailer
    errors = deferring.client.get(f"/v1/jobs/{job['id']}/errors", headers=h)
    assert [json.loads(x) for x in errors.get_data(as_text=True).splitlines()][-1]["_end"]["count"] == 0
    listed = deferring.client.get("/v1/jobs?status=validating", headers=h).get_json()["data"]
    assert [j["id"] for j in listed] == [job["id"]] and listed[0]["request_counts"]["total"] == 7


@pytest.mark.parametrize("build_runs", [True, False], ids=["start_job-runs", "start_job-lost"])
def test_a_job_cancelled_while_validating_ends_cancelled_with_its_webhook(
    deferring: WebEnv, caller: Caller, build_runs: bool
) -> None:
    """No items are ever built for it; its staged rows are deleted by the cancel's batches when the build
    finds it cancelled, or by finalize if that build never comes; it ends `cancelled` and its webhook is in
    the outbox."""
    job = deferring.client.post(
        "/v1/jobs?kind=claims&webhook_url=https://hooks.example.org/factgate",
        data=ndjson(CLAIM_ROWS),
        headers=caller.ndjson_headers(),
    ).get_json()
    jid = uuid.UUID(job["id"])
    cancelled = deferring.client.post(f"/v1/jobs/{job['id']}/cancel", headers=caller.headers)
    assert cancelled.status_code == 200 and cancelled.get_json()["status"] == "cancelling"
    if build_runs:
        assert build(deferring, job["id"]) is Built.SKIPPED
        # The staged rows go in the cancel's batches (finish_cancel), not in the build's transaction.
        with session_scope(deferring.sessions) as s:
            assert cancel_step(s, jid) == len(CLAIM_ROWS)
        assert staged(deferring, job["id"]) == 0
    with session_scope(deferring.sessions) as s:
        assert maybe_finalize(s, jid)
    ended = deferring.job(jid)
    assert ended.status == "cancelled" and ended.cancelled_at is not None
    assert (ended.request_counts or {})["total"] == 0
    assert item_rows(deferring, job["id"]) == [] and staged(deferring, job["id"]) == 0
    with deferring.sessions() as s:
        events = list(s.scalars(select(WebhookDelivery.event).where(WebhookDelivery.job_id == jid)))
    assert events == ["job.cancelled"]
    assert build(deferring, job["id"]) is Built.SKIPPED  # a late start_job changes nothing


def test_the_sweeper_only_restarts_validating_jobs_nobody_is_building(
    deferring: WebEnv, caller: Caller
) -> None:
    """`stale_validating` lists a validating job once it is older than the grace, and not while a build
    holds its build lock."""
    job = deferring.client.post(
        "/v1/jobs?kind=claims", data=ndjson(CLAIM_ROWS), headers=caller.ndjson_headers()
    ).get_json()
    jid = uuid.UUID(job["id"])
    with session_scope(deferring.sessions) as s:
        assert jid not in stale_validating(s, 3600.0)
        assert jid in stale_validating(s, 0.0)
    with session_scope(deferring.sessions) as holder:
        assert try_build_lock(holder, jid)  # a build in progress holds the job's advisory lock
        with session_scope(deferring.sessions) as s:
            assert jid not in stale_validating(s, 0.0)
        with session_scope(deferring.sessions) as s:
            assert build_staged(s, jid) is Built.SKIPPED  # a second start_job does not wait for it
    assert deferring.job(jid).status == "validating" and staged(deferring, job["id"]) == len(CLAIM_ROWS)
    assert START_JOB in {task for task, _args in deferring.drain_messages()}


def test_the_job_page_shows_a_validating_job_and_one_cancelled_before_its_items(
    deferring: WebEnv, caller: Caller
) -> None:
    job = deferring.client.post(
        "/v1/jobs?kind=claims", data=ndjson(CLAIM_ROWS), headers=caller.ndjson_headers()
    ).get_json()
    sign_in(deferring.client, caller)
    page = html(deferring.client.get(f"/jobs/{job['id']}"))
    assert "validating" in page and 'data-field="count-total">7<' in page  # the items to come
    deferring.client.post(f"/v1/jobs/{job['id']}/cancel", headers=caller.headers)
    with session_scope(deferring.sessions) as s:
        assert maybe_finalize(s, uuid.UUID(job["id"]))
    page = html(deferring.client.get(f"/jobs/{job['id']}"))
    assert "cancelled" in page and 'data-field="count-total">0<' in page
    assert "cancelled before its claims were stored" in page and "could not be computed" not in page


def test_a_validating_job_cannot_be_retried(deferring: WebEnv, caller: Caller) -> None:
    job = deferring.client.post(
        "/v1/jobs?kind=claims", data=ndjson(CLAIM_ROWS), headers=caller.ndjson_headers()
    ).get_json()
    err = error_of(deferring.client.post(f"/v1/jobs/{job['id']}/retry", headers=caller.headers), 409)
    assert "validating" in err["message"]
    assert deferring.job(job["id"]).status == "validating"
