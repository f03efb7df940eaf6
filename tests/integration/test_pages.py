"""The HTML pages through the Flask test client on real Postgres: sign-in and session cookie, CSRF,
security headers, tenant scoping, the jobs list, the job page with progress, the claims report with
its cutoff explorer, cancel/retry forms, request lookup and the downloads.

Finished jobs are built with tests/e2e/builders.py: created through the API, items settled through
the jobs/ state functions a worker uses, finalized with maybe_finalize — no worker runs here.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select

from models import ApiCall, Item, Job
from tests.e2e.builders import claim_output, finalize, settle, submit_claims
from tests.integration.export_files import csv_records, ndjson_records
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    make_env,
    memory_celery,
    other_caller,
    web,
    web_settings,
)
from web.security import CSP

pytestmark = pytest.mark.integration

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')

ROWS: list[dict[str, Any]] = [
    {"id": "t1", "claim": "Python 3.12 was released in October 2023.", "label": True},
    {"id": "t2", "claim": "Git was created by Guido van Rossum.", "label": False},
    {"id": "t3", "claim": "Rust 1.0 was released in May 2015.", "label": True},
    {"id": "t4", "claim": "The Eiffel Tower is in Berlin.", "label": False},
]


def csrf_token(client: FlaskClient, path: str = "/sign-in") -> str:
    page = client.get(path)
    match = CSRF_RE.search(page.get_data(as_text=True))
    assert match, f"no CSRF token on {path}"
    return match.group(1)


def sign_in(client: FlaskClient, who: Caller) -> None:
    token = csrf_token(client)
    resp = client.post("/sign-in", data={"token": who.token, "csrf_token": token})
    assert resp.status_code == 302, resp.get_data(as_text=True)[:300]
    assert resp.headers["Location"].endswith("/jobs")


def html(resp: Any, status: int = 200) -> str:
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True)[:800])
    text: str = resp.get_data(as_text=True)
    return text


def api_call_count(web: WebEnv, job_id: str) -> int:
    with web.sessions() as session:
        return int(
            session.scalar(
                select(func.count()).select_from(ApiCall).where(ApiCall.job_id == uuid.UUID(job_id))
            )
            or 0
        )


def finished_job(web: WebEnv, who: Caller, mode: str, probs: dict[tuple[str, str], Any]) -> str:
    """A claims job over ROWS, settled with `probs` ((id, mode) -> p or ("failed", error)), finalized."""
    job_id = submit_claims(web.client.post, who.headers, ROWS, mode=mode)
    outcomes: dict[tuple[str, str], Any] = {}
    for key, value in probs.items():
        if isinstance(value, tuple):
            outcomes[key] = value
            continue
        sources = []
        if key[1] == "grounded":
            sources = [
                {
                    "title": f"Source for {key[0]}",
                    "url": f"https://example.org/{key[0]}",
                    "date": "2024-01-02",
                }
            ]
        outcomes[key] = claim_output(value, f"req-{key[0]}-{key[1]}-{uuid.uuid4().hex[:6]}", sources=sources)
    settle(web.sessions, job_id, outcomes)
    finalize(web.sessions, job_id)
    return job_id


# Ungrounded gets t2 wrong (a false claim marked supported) and sends t3 to review; grounded is right.
BOTH = {
    ("t1", "ungrounded"): 0.91,
    ("t2", "ungrounded"): 0.85,
    ("t3", "ungrounded"): 0.55,
    ("t4", "ungrounded"): 0.05,
    ("t1", "grounded"): 0.97,
    ("t2", "grounded"): 0.03,
    ("t3", "grounded"): 0.93,
    ("t4", "grounded"): 0.02,
}


# --- sign-in, session and CSRF -------------------------------------------------------------------------


def test_every_page_requires_sign_in(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    for path in ("/jobs", f"/jobs/{job_id}", f"/jobs/{job_id}/results.csv", "/requests?id=x", "/"):
        resp = web.client.get(path)
        assert resp.status_code == 302, path
        assert "/sign-in" in resp.headers["Location"], path
    assert "next=/jobs" in web.client.get("/jobs").headers["Location"]
    progress = web.client.get(f"/jobs/{job_id}/progress.json")
    assert progress.status_code == 401
    assert progress.get_json()["error"]["type"] == "authentication_error"


def test_sign_in_rejects_a_bad_token_without_a_session(web: WebEnv, caller: Caller) -> None:
    token = csrf_token(web.client)
    page = html(web.client.post("/sign-in", data={"token": "fg_not-a-token", "csrf_token": token}), 401)
    assert "That token is not valid." in page
    assert web.client.get("/jobs").status_code == 302


def test_sign_in_redirects_to_next_but_never_off_site(web: WebEnv, caller: Caller) -> None:
    token = csrf_token(web.client)
    resp = web.client.post(
        "/sign-in", data={"token": caller.token, "csrf_token": token, "next": "//evil.example/x"}
    )
    assert resp.headers["Location"] == "/jobs"
    web.client.post("/sign-out", data={"csrf_token": csrf_token(web.client, "/jobs")})
    token = csrf_token(web.client)
    resp = web.client.post("/sign-in", data={"token": caller.token, "csrf_token": token, "next": "/requests"})
    assert resp.headers["Location"] == "/requests"


def test_session_cookie_is_httponly_lax_and_secure_over_https(web: WebEnv, caller: Caller) -> None:
    token = csrf_token(web.client)
    resp = web.client.post("/sign-in", data={"token": caller.token, "csrf_token": token})
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    assert caller.token not in cookie

    secure = web.app.test_client()
    page = secure.get("/sign-in", base_url="https://localhost")
    token = CSRF_RE.search(page.get_data(as_text=True)).group(1)  # type: ignore[union-attr]
    resp = secure.post(
        "/sign-in", data={"token": caller.token, "csrf_token": token}, base_url="https://localhost"
    )
    assert resp.status_code == 302
    assert "Secure" in resp.headers["Set-Cookie"]


def test_forms_without_a_csrf_token_are_refused(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    resp = web.client.post("/sign-in", data={"token": caller.token})
    assert "Form not accepted" in html(resp, 400)
    sign_in(web.client, caller)
    for path in (f"/jobs/{job_id}/cancel", f"/jobs/{job_id}/retry", "/sign-out"):
        assert web.client.post(path).status_code == 400, path
        assert web.client.post(path, data={"csrf_token": "forged"}).status_code == 400, path
    assert web.job(job_id).status == "queued"  # the refused cancel changed nothing
    assert web.client.get("/jobs").status_code == 200  # the refused sign-out did not sign out


def test_the_json_api_stays_csrf_exempt(web: WebEnv, caller: Caller) -> None:
    sign_in(web.client, caller)  # a browser session exists; the API still takes bearer tokens alone
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    resp = web.client.post(f"/v1/jobs/{job_id}/cancel", headers=caller.headers)
    assert resp.status_code == 200
    assert resp.get_json()["status"] in ("cancelling", "cancelled")


def test_sign_out_ends_the_session(web: WebEnv, caller: Caller) -> None:
    sign_in(web.client, caller)
    resp = web.client.post("/sign-out", data={"csrf_token": csrf_token(web.client, "/jobs")})
    assert resp.status_code == 302
    assert web.client.get("/jobs").status_code == 302


# --- headers -------------------------------------------------------------------------------------------


def test_strict_security_headers_on_pages(web: WebEnv, caller: Caller) -> None:
    job_id = finished_job(web, caller, "grounded", {(r["id"], "grounded"): 0.9 for r in ROWS})
    responses = [web.client.get("/sign-in")]
    sign_in(web.client, caller)
    responses += [
        web.client.get("/jobs"),
        web.client.get(f"/jobs/{job_id}"),
        web.client.get("/requests"),
        web.client.get("/usage"),
        web.client.get("/jobs/not-a-job"),
        web.client.get("/static/job.js"),
    ]
    for resp in responses:
        assert resp.headers["Content-Security-Policy"] == CSP
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["Referrer-Policy"] == "no-referrer"
        assert resp.headers["X-Frame-Options"] == "DENY"
        if "/static/" not in resp.request.path:
            assert resp.headers["Cache-Control"] == "private, no-store"
        resp.close()  # the static file response holds an open file until closed
    for directive in (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
    ):
        assert directive in CSP
    assert "unsafe-inline" not in CSP


def test_pages_use_no_inline_script_or_style(web: WebEnv, caller: Caller) -> None:
    job_id = finished_job(web, caller, "both", BOTH)
    sign_in(web.client, caller)
    for path in ("/jobs", f"/jobs/{job_id}", "/requests", "/usage", "/sign-in"):
        page = web.client.get(path).get_data(as_text=True)
        assert "style=" not in page, path
        assert "<style" not in page, path
        for script in re.findall(r"<script[^>]*>", page):
            assert 'src="/static/' in script, (path, script)
        assert not re.search(r"<script[^>]*>\s*[^<\s]", page), path  # no inline code
        assert not re.search(r"\son[a-z]+=", page), path  # no event-handler attributes


# --- tenant scoping ------------------------------------------------------------------------------------


def test_jobs_list_shows_only_the_tenants_jobs(web: WebEnv, caller: Caller, other_caller: Caller) -> None:
    mine = finished_job(web, caller, "grounded", {(r["id"], "grounded"): 0.9 for r in ROWS})
    theirs = submit_claims(web.client.post, other_caller.headers, ROWS, mode="grounded")
    sign_in(web.client, caller)
    page = html(web.client.get("/jobs"))
    assert mine[:8] in page
    assert theirs[:8] not in page
    assert caller.tenant_name in page
    assert 'value="100.0"' in page  # the finished job's progress bar
    assert html(web.client.get("/jobs?status=queued")).count("<progress") == 0


def test_another_tenants_job_is_a_404_everywhere(web: WebEnv, caller: Caller, other_caller: Caller) -> None:
    theirs = finished_job(web, other_caller, "grounded", {(r["id"], "grounded"): 0.9 for r in ROWS})
    sign_in(web.client, caller)
    for path in (
        f"/jobs/{theirs}",
        f"/jobs/{theirs}/progress.json",
        f"/jobs/{theirs}/results.ndjson",
        f"/jobs/{theirs}/results.csv",
        f"/jobs/{theirs}/report.html",
        "/jobs/not-a-uuid",
        f"/jobs/{uuid.uuid4()}",
    ):
        resp = web.client.get(path)
        assert resp.status_code == 404, path
        assert "Python 3.12" not in resp.get_data(as_text=True), path
    for path in (f"/jobs/{theirs}/cancel", f"/jobs/{theirs}/retry"):
        token = csrf_token(web.client, "/jobs")
        assert web.client.post(path, data={"csrf_token": token}).status_code == 404, path
    assert "There is no job with that id" in web.client.get(f"/jobs/{theirs}").get_data(as_text=True)


def test_request_lookup_is_scoped_to_the_tenant(web: WebEnv, caller: Caller, other_caller: Caller) -> None:
    mine = finished_job(web, caller, "grounded", {(r["id"], "grounded"): 0.9 for r in ROWS})
    theirs = finished_job(web, other_caller, "grounded", {(r["id"], "grounded"): 0.1 for r in ROWS})
    with web.sessions() as session:
        my_rid = session.scalar(select(ApiCall.request_id).where(ApiCall.job_id == uuid.UUID(mine)).limit(1))
        their_rid = session.scalar(
            select(ApiCall.request_id).where(ApiCall.job_id == uuid.UUID(theirs)).limit(1)
        )
    assert my_rid and their_rid
    sign_in(web.client, caller)
    page = html(web.client.get(f"/requests?id={my_rid}"))
    assert mine in page
    assert "decisions" in page
    custom_id = my_rid.split("-")[1]
    assert f">{custom_id}<" in page  # the item behind the request
    missing = html(web.client.get(f"/requests?id={their_rid}"), 404)
    assert theirs not in missing
    assert "No request with that id" in missing
    assert html(web.client.get("/requests")).count("<table") == 0


# --- the job page and the claims report -----------------------------------------------------------------


def test_live_job_page_polls_and_progress_endpoint_counts(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{job_id}"))
    assert 'data-live="true"' in page
    assert f'data-progress-url="/jobs/{job_id}/progress.json"' in page
    assert '<script src="/static/job.js"' in page
    assert "The report appears here when the job finishes" in page
    assert "results come from the bundled simulator" in page
    body = web.client.get(f"/jobs/{job_id}/progress.json").get_json()
    assert body["percent"] == 0
    assert body["counts"]["pending"] == 4
    assert body["ended"] is False

    settle(
        web.sessions,
        job_id,
        {("t1", "grounded"): claim_output(0.9, "r1"), ("t2", "grounded"): ("failed", "boom")},
    )
    body = web.client.get(f"/jobs/{job_id}/progress.json").get_json()
    assert body["percent"] == 50.0
    assert body["counts"]["completed"] == 1
    assert body["counts"]["failed"] == 1
    assert body["text"]["percent"] == "50 %"


def test_claims_report_in_both_modes(web: WebEnv, caller: Caller) -> None:
    job_id = finished_job(web, caller, "both", BOTH)
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{job_id}"))
    assert 'data-live="false"' in page
    assert 'max="100" value="100.0"' in page
    # Per-claim table: ids, claims, p with three decimals, verdicts, flips and grades.
    for row in ROWS:
        assert f">{row['id']}<" in page
        assert row["claim"] in page
    for p in ("0.910", "0.850", "0.550", "0.050", "0.970", "0.030", "0.930", "0.020"):
        assert f'<span class="p">{p}</span>' in page
    assert page.count("⇄ flip") == 2  # t2 supported → contradicted, t3 review → supported
    assert page.count("✗ wrong") == 1
    # Scorecards with acceptance and the three bounds.
    assert page.count("✗ acceptance not met") == 1  # ungrounded: a missed failure, a review
    assert page.count("✓ acceptance met") == 1
    assert "Missed failures (false claims marked supported)" in page
    assert "1 of 4 (25.0 %)" in page  # ungrounded review count: exactly at the 25 % bound
    assert page.count("✗ fail") == 1  # only the missed-failure bound fails
    # Sources seen (grounded), linked with the safe rel.
    assert 'href="https://example.org/t1" rel="noopener noreferrer nofollow"' in page
    # Calibration: an inline SVG reliability diagram, no script.
    assert "<svg" in page and "Reliability diagram" in page
    assert "Flips between modes" in page
    # Downloads and request ids link to the lookup page.
    assert f"/jobs/{job_id}/results.csv" in page and f"/jobs/{job_id}/report.html" in page
    assert "/requests?id=req-t1-ungrounded" in page


def test_cutoff_explorer_replays_without_requests(web: WebEnv, caller: Caller) -> None:
    job_id = finished_job(web, caller, "both", BOTH)
    sign_in(web.client, caller)
    before = api_call_count(web, job_id)
    page = html(web.client.get(f"/jobs/{job_id}?supported_min=0.5&contradicted_max=0.2"))
    assert api_call_count(web, job_id) == before  # replay sends nothing
    assert "replayed" in page
    # At 0.5 the ungrounded t3 (0.55) is supported: no review left, still the missed failure t2.
    assert page.count("? review") == 0
    assert 'value="0.5"' in page
    # Other cutoffs change verdicts: at 0.95 grounded t1 (0.97) stays, t3 (0.93) goes to review.
    page = html(web.client.get(f"/jobs/{job_id}?supported_min=0.95"))
    assert page.count("? review") >= 1
    assert api_call_count(web, job_id) == before
    with web.sessions() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None and job.options["supported_min"] == 0.8  # nothing stored
    bad = html(web.client.get(f"/jobs/{job_id}?supported_min=0.1&contradicted_max=0.3"), 400)
    assert "Cutoffs not applied" in bad
    assert "contradicted_max" in bad
    junk = html(web.client.get(f"/jobs/{job_id}?supported_min=abc"), 400)
    assert "is not a number" in junk


def test_claims_table_filters_and_pages(web: WebEnv, caller: Caller) -> None:
    job_id = finished_job(web, caller, "both", BOTH)
    sign_in(web.client, caller)
    flips = html(web.client.get(f"/jobs/{job_id}?show=flips"))
    assert ">t2<" in flips and ">t3<" in flips
    assert ">t1<" not in flips and ">t4<" not in flips
    wrong = html(web.client.get(f"/jobs/{job_id}?show=wrong"))
    assert ">t2<" in wrong and ">t1<" not in wrong
    beyond = html(web.client.get(f"/jobs/{job_id}?after=1000000"))
    assert "No claims match this filter." in beyond


def claims_table(page: str) -> str:
    """The claims panel of a report page (the flips panel above it lists claims too)."""
    return page[page.index('id="claims"') :]


def test_claims_table_next_link_walks_the_pages_by_keyset(
    web: WebEnv, caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("web.kinds.claims.PAGE_SIZE", 3)  # the claims report page size (its web part)
    job_id = finished_job(web, caller, "both", BOTH)
    sign_in(web.client, caller)
    first = claims_table(html(web.client.get(f"/jobs/{job_id}?supported_min=0.9")))
    assert ">t1<" in first and ">t3<" in first and ">t4<" not in first
    assert "Page 1 of 2" in first and "First page" not in first
    link = re.search(r'href="([^"]+)" rel="next"', first)
    assert link is not None
    href = link.group(1).replace("&amp;", "&")
    assert "after=5" in href and "supported_min=0.9" in href  # the last position of t3, the cutoffs kept
    second = claims_table(html(web.client.get(href)))
    assert ">t4<" in second and ">t1<" not in second and ">t3<" not in second
    assert "Page 2 of 2" in second and "First page" in second and 'rel="next"' not in second


def test_failed_items_show_errors_and_retry_form(web: WebEnv, caller: Caller) -> None:
    probs: dict[tuple[str, str], Any] = {(r["id"], "grounded"): 0.9 for r in ROWS}
    probs[("t2", "grounded")] = ("failed", "upstream 500: try again")
    job_id = finished_job(web, caller, "grounded", probs)
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{job_id}"))
    assert "upstream 500: try again" in page
    assert "! failed" in page
    assert "Retry 1 failed" in page
    web.drain_messages()
    resp = web.client.post(f"/jobs/{job_id}/retry", data={"csrf_token": csrf_token(web.client, "/jobs")})
    assert resp.status_code == 302
    assert html(web.client.get(resp.headers["Location"])).count("Retrying 1 failed item(s).") == 1
    assert [i.status for i in web.items(job_id) if i.custom_id == "t2"] == ["pending"]
    assert job_id in web.started_job_ids()


def test_cancel_form_cancels_a_live_job(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    sign_in(web.client, caller)
    assert "Cancel job" in html(web.client.get(f"/jobs/{job_id}"))
    resp = web.client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": csrf_token(web.client, "/jobs")})
    assert resp.status_code == 302
    assert web.job(job_id).status in ("cancelling", "cancelled")
    assert all(i.status == "skipped" for i in web.items(job_id))
    again = web.client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": csrf_token(web.client, "/jobs")})
    followed = html(web.client.get(again.headers["Location"]))
    assert (
        "only a validating, queued or running job can be cancelled" in followed
        or "already being cancelled" in followed
    )


# --- downloads ------------------------------------------------------------------------------------------


def test_results_downloads(web: WebEnv, caller: Caller) -> None:
    job_id = finished_job(web, caller, "both", BOTH)
    sign_in(web.client, caller)
    resp = web.client.get(f"/jobs/{job_id}/results.ndjson")
    assert resp.status_code == 200
    assert resp.headers["Content-Disposition"].startswith("attachment;")
    lines = ndjson_records(resp.get_data(as_text=True))
    assert [line["custom_id"] for line in lines] == [r["id"] for r in ROWS]
    assert lines[1]["results"]["ungrounded"]["p"] == 0.85
    resp = web.client.get(f"/jobs/{job_id}/results.csv")
    assert resp.mimetype == "text/csv"
    rows = csv_records(resp.get_data(as_text=True))
    assert len(rows) == 8
    assert {r["verdict"] for r in rows} == {"supported", "contradicted", "review"}


def test_report_file_is_self_contained(web: WebEnv, caller: Caller) -> None:
    job_id = finished_job(web, caller, "both", BOTH)
    sign_in(web.client, caller)
    resp = web.client.get(f"/jobs/{job_id}/report.html")
    assert resp.status_code == 200
    assert resp.headers["Content-Disposition"] == f'attachment; filename="factgate-{job_id}-report.html"'
    page = resp.get_data(as_text=True)
    assert "<script" not in page
    assert 'rel="stylesheet"' not in page and "/static/" not in page
    style = re.search(r"<style>(.*?)</style>", page, re.S)
    assert style and "progress.bar" in style.group(1)
    digest = base64.b64encode(hashlib.sha256(style.group(1).encode()).digest()).decode()
    policy = resp.headers["Content-Security-Policy"]
    assert f"style-src 'sha256-{digest}'" in policy
    assert "script-src" not in policy and "default-src 'none'" in policy
    assert f'<meta http-equiv="Content-Security-Policy" content="{policy.replace(chr(39), "&#39;")}">' in page
    # The whole report: every claim, the scorecards, the calibration plot; no links back into the app.
    for row in ROWS:
        assert row["claim"] in page
    assert "✓ acceptance met" in page and "<svg" in page
    assert "/requests?id=" not in page and "Replay scorecard" not in page
    assert 'href="https://example.org/t3"' in page


def test_unknown_kind_downloads_and_items(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    with web.sessions() as session:
        n = session.scalar(select(func.count()).select_from(Item).where(Item.job_id == uuid.UUID(job_id)))
    assert n == 4
    sign_in(web.client, caller)
    # A running job's report file is not offered yet, but the results download streams what exists.
    page = html(web.client.get(f"/jobs/{job_id}"))
    assert "Report HTML" not in page
    lines = ndjson_records(web.client.get(f"/jobs/{job_id}/results.ndjson").get_data(as_text=True))
    assert len(lines) == 4 and all(x["results"]["grounded"]["status"] == "pending" for x in lines)
