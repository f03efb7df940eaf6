"""Reading and steering jobs through the API on real Postgres: status, lists, results and errors
streams, scorecard replay, cancel, retry, request-id lookup, health, the OpenAPI document, and tenant
isolation. Items are settled through the jobs/ state functions a worker uses (web_fixtures.settle_items)."""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import csv
import io
import json
import re
import uuid
from datetime import datetime
from typing import Any

import pytest

from jobs.finalize import maybe_finalize
from models import session_scope
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    ROWS,
    Caller,
    WebEnv,
    caller,
    make_env,
    memory_celery,
    ndjson,
    other_caller,
    settle_items,
    web,
    web_settings,
)
from web.openapi import openapi_document

pytestmark = pytest.mark.integration


def error_of(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True)[:500])
    err: dict[str, Any] = resp.get_json()["error"]
    return err


def finalize(web: WebEnv, job_id: str) -> None:
    with session_scope(web.sessions) as session:
        assert maybe_finalize(session, uuid.UUID(job_id))


def ndjson_lines(resp: Any) -> list[dict[str, Any]]:
    """The records of an NDJSON export, after checking its trailer line counts them."""
    lines = [json.loads(line) for line in resp.get_data(as_text=True).splitlines() if line]
    assert lines and set(lines[-1]) == {"_end"}, lines[-1:]
    assert lines[-1]["_end"]["count"] == len(lines) - 1
    return lines[:-1]


def csv_rows(resp: Any) -> list[dict[str, str]]:
    """The data rows of a CSV export, after checking its `#end,<N>` trailer row counts them."""
    rows = list(csv.DictReader(io.StringIO(resp.get_data(as_text=True))))
    assert rows, "no trailer row"
    end = rows.pop()
    assert list(end.values())[:2] == ["#end", str(len(rows))], end
    return rows


# --- status --------------------------------------------------------------------------------------------


def test_status_object_of_a_new_job(web: WebEnv, caller: Caller) -> None:
    created = web.submit(caller, mode="grounded")
    resp = web.client.get(f"/v1/jobs/{created['id']}", headers=caller.headers)
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["id"] == created["id"]
    assert body["object"] == "job"
    assert body["status"] == "queued"
    assert body["request_counts"] == {
        "total": 3,
        "completed": 0,
        "failed": 0,
        "skipped": 0,
        "pending": 3,
        "running": 0,
    }
    assert body["usage"]["http_attempts"] == 0
    assert body["cost_usd"] == 0
    ts = body["timestamps"]
    assert set(ts) == {
        "created_at",
        "queued_at",
        "started_at",
        "finalizing_at",
        "completed_at",
        "cancelling_at",
        "cancelled_at",
        "failed_at",
    }
    created_at = datetime.fromisoformat(ts["created_at"])
    assert created_at.utcoffset() is not None and created_at.utcoffset().total_seconds() == 0
    assert ts["started_at"] is None and ts["completed_at"] is None
    assert body["simulated"] is True
    assert body["simulated_note"] == "results come from the bundled simulator, not Perplexity"
    assert body["summary"] is None
    jid = created["id"]
    assert body["links"] == {
        "self": f"/v1/jobs/{jid}",
        "results": f"/v1/jobs/{jid}/results",
        "errors": f"/v1/jobs/{jid}/errors",
        "scorecard": f"/v1/jobs/{jid}/scorecard",
        "cancel": f"/v1/jobs/{jid}/cancel",
        "retry": f"/v1/jobs/{jid}/retry",
        "report": f"/jobs/{jid}",
    }


def test_status_tracks_progress_usage_and_final_summary(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller, mode="grounded")["id"]
    settle_items(web.sessions, jid, {("c1", "grounded"): 0.95})
    live = web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).get_json()
    assert live["request_counts"]["completed"] == 1
    assert live["request_counts"]["pending"] == 2
    assert live["usage"]["http_attempts"] == 1  # summed live from api_calls
    assert live["usage"]["input_tokens"] == 100
    assert live["cost_usd"] == pytest.approx(0.001002)
    assert live["summary"] is None

    settle_items(
        web.sessions, jid, {("c2", "grounded"): 0.03, ("c3", "grounded"): ("failed", "upstream 500")}
    )
    finalize(web, jid)
    done = web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).get_json()
    assert done["status"] == "completed"
    assert done["timestamps"]["completed_at"] is not None
    assert done["request_counts"] == {
        "total": 3,
        "completed": 2,
        "failed": 1,
        "skipped": 0,
        "pending": 0,
        "running": 0,
    }
    assert done["usage"] == web.job(jid).usage  # the stored total once finished
    assert done["usage"]["http_attempts"] == 3
    card = done["summary"]["scorecards"]["grounded"]
    assert card["correct"] == 2
    assert card["errors"] == 1


def test_other_tenants_job_is_the_same_404_as_a_missing_one(
    web: WebEnv, caller: Caller, other_caller: Caller
) -> None:
    jid = web.submit(caller)["id"]
    missing = web.client.get(f"/v1/jobs/{uuid.uuid4()}", headers=other_caller.headers)
    theirs = web.client.get(f"/v1/jobs/{jid}", headers=other_caller.headers)
    malformed = web.client.get("/v1/jobs/not-a-uuid", headers=other_caller.headers)
    assert error_of(theirs, 404) == error_of(missing, 404) == error_of(malformed, 404)
    assert error_of(theirs, 404)["type"] == "not_found_error"
    for suffix, method in [
        ("results", "get"),
        ("errors", "get"),
        ("scorecard", "get"),
        ("cancel", "post"),
        ("retry", "post"),
    ]:
        resp = getattr(web.client, method)(f"/v1/jobs/{jid}/{suffix}", headers=other_caller.headers)
        assert resp.status_code == 404, suffix
    # Nothing the other tenant did touched the job.
    assert web.job(jid).status == "queued"


def test_list_jobs_newest_first_with_filters(web: WebEnv, caller: Caller, other_caller: Caller) -> None:
    first = web.submit(caller)["id"]
    second = web.submit(caller, mode="both")["id"]
    third = web.submit(caller)["id"]
    web.submit(other_caller)
    web.client.post(f"/v1/jobs/{second}/cancel", headers=caller.headers)

    listed = web.client.get("/v1/jobs", headers=caller.headers).get_json()
    assert listed["object"] == "list"
    assert [j["id"] for j in listed["data"]] == [third, second, first]
    assert web.client.get("/v1/jobs?limit=2", headers=caller.headers).get_json()["data"][1]["id"] == second
    cancelling = web.client.get("/v1/jobs?status=cancelling", headers=caller.headers).get_json()
    assert [j["id"] for j in cancelling["data"]] == [second]
    assert web.client.get("/v1/jobs?kind=answer", headers=caller.headers).get_json()["data"] == []
    assert len(web.client.get("/v1/jobs?kind=claims", headers=caller.headers).get_json()["data"]) == 3


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("status=done", "status"),
        ("kind=poems", "kind"),
        ("page=2", "page"),
    ],
)
def test_list_jobs_bad_parameters_are_named(web: WebEnv, caller: Caller, query: str, field: str) -> None:
    err = error_of(web.client.get(f"/v1/jobs?{query}", headers=caller.headers), 400)
    assert err["field"] == field


def test_requests_without_a_token_are_401(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller)["id"]
    for path in ["/v1/jobs", f"/v1/jobs/{jid}", f"/v1/jobs/{jid}/results", "/v1/requests/abc"]:
        resp = web.client.get(path)
        assert error_of(resp, 401)["type"] == "authentication_error"
        assert "Bearer" in resp.headers["WWW-Authenticate"]
        assert error_of(web.client.get(path, headers={"Authorization": "Bearer nope"}), 401)


# --- results and errors --------------------------------------------------------------------------------


def test_results_stream_as_ndjson_in_input_order(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller, mode="both")["id"]
    settle_items(
        web.sessions,
        jid,
        {
            ("c1", "ungrounded"): 0.5,
            ("c1", "grounded"): 0.97,
            ("c2", "grounded"): 0.1,
            ("c2", "ungrounded"): ("failed", "upstream 500"),
        },
    )
    resp = web.client.get(f"/v1/jobs/{jid}/results", headers=caller.headers)
    assert resp.status_code == 200
    assert resp.mimetype == "application/x-ndjson"
    assert resp.headers["X-Job-Status"] == "queued"
    lines = ndjson_lines(resp)
    assert [line["custom_id"] for line in lines] == ["c1", "c2", "c3"]  # whatever exists, even pending
    c1, c2, c3 = lines
    assert c1["claim"] == ROWS[0]["claim"] and c1["label"] is True
    assert c1["results"]["grounded"]["p"] == 0.97
    assert c1["results"]["grounded"]["verdict"] == "supported"
    assert c1["results"]["grounded"]["request_id"] == "req-c1-grounded"
    assert c1["results"]["ungrounded"]["verdict"] == "review"
    assert c2["results"]["grounded"]["verdict"] == "contradicted"
    assert c2["results"]["ungrounded"]["status"] == "failed"
    assert c2["results"]["ungrounded"]["error"] == "upstream 500"
    assert c3["results"]["grounded"]["status"] == "pending"
    assert c3["results"]["grounded"]["verdict"] is None


def test_results_as_csv_one_row_per_claim_per_mode(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller, mode="both")["id"]
    settle_items(
        web.sessions, jid, {("c1", "grounded"): 0.97, ("c2", "ungrounded"): ("failed", 'bad, "quoted"')}
    )
    resp = web.client.get(f"/v1/jobs/{jid}/results?format=csv", headers=caller.headers)
    assert resp.status_code == 200
    assert resp.mimetype == "text/csv"
    assert resp.headers["Content-Disposition"] == f'attachment; filename="factgate-{jid}-results.csv"'
    rows = csv_rows(resp)
    assert list(rows[0]) == [
        "custom_id", "mode", "status", "p", "verdict", "label", "request_id", "error", "reused_from"
    ]  # fmt: skip
    assert [(r["custom_id"], r["mode"]) for r in rows] == [
        (c, m) for c in ("c1", "c2", "c3") for m in ("ungrounded", "grounded")
    ]
    assert rows[1] == {
        "custom_id": "c1",
        "mode": "grounded",
        "status": "done",
        "p": "0.97",
        "verdict": "supported",
        "label": "true",
        "request_id": "req-c1-grounded",
        "error": "",
        "reused_from": "",
    }
    assert (
        rows[2]["status"] == "failed" and rows[2]["error"] == 'bad, "quoted"' and rows[2]["label"] == "false"
    )
    assert rows[5]["label"] == "true" and rows[5]["p"] == ""


def test_results_bad_format_is_400(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller)["id"]
    err = error_of(web.client.get(f"/v1/jobs/{jid}/results?format=xlsx", headers=caller.headers), 400)
    assert err["field"] == "format"


def test_results_stream_more_rows_than_one_chunk(web: WebEnv, caller: Caller) -> None:
    """The stream spans several keyset chunks (1,000 items each), claims never split across two."""
    rows = [{"id": f"r{i:05d}", "claim": f"Claim {i}."} for i in range(1_250)]
    jid = web.submit(caller, rows, mode="both")["id"]
    resp = web.client.get(f"/v1/jobs/{jid}/results", headers=caller.headers)
    lines = ndjson_lines(resp)
    assert [line["custom_id"] for line in lines] == [r["id"] for r in rows]
    assert all(set(line["results"]) == {"ungrounded", "grounded"} for line in lines)


def test_results_stream_holds_no_connection_between_chunks(web: WebEnv, caller: Caller) -> None:
    """Each chunk is read in its own session, closed before its lines are sent: while the client reads,
    the stream holds no connection (and no transaction), and a client that stops half-way leaves none."""
    rows = [{"id": f"r{i:05d}", "claim": f"Claim {i}."} for i in range(2_500)]
    jid = web.submit(caller, rows, mode="ungrounded")["id"]
    pool = web.app.extensions["factgate"].engine.pool
    assert pool.checkedout() == 0
    resp = web.client.get(f"/v1/jobs/{jid}/results", headers=caller.headers, buffered=False)
    chunks = iter(resp.response)  # lines go out in pieces of about 16 KiB (web/exports.py)
    assert json.loads(next(chunks).splitlines()[0])["custom_id"] == "r00000"
    assert pool.checkedout() == 0
    resp.close()
    assert pool.checkedout() == 0


def test_errors_lists_failed_and_skipped_items(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller, mode="both")["id"]
    settle_items(
        web.sessions,
        jid,
        {
            ("c1", "grounded"): 0.9,
            ("c2", "ungrounded"): ("failed", "upstream 503 after 4 attempts"),
            ("c3", "grounded"): ("skipped", "budget of $0.0010 reached"),
        },
    )
    resp = web.client.get(f"/v1/jobs/{jid}/errors", headers=caller.headers)
    assert resp.status_code == 200
    assert resp.mimetype == "application/x-ndjson"
    lines = ndjson_lines(resp)
    assert [(e["custom_id"], e["mode"], e["status"]) for e in lines] == [
        ("c2", "ungrounded", "failed"),
        ("c3", "grounded", "skipped"),
    ]
    assert lines[0]["error"] == "upstream 503 after 4 attempts"
    assert lines[0]["request_ids"] == ["req-c2-ungrounded"]
    assert lines[1]["error"] == "budget of $0.0010 reached"
    assert lines[1]["request_ids"] == []


def test_errors_of_a_clean_job_is_empty(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller)["id"]
    resp = web.client.get(f"/v1/jobs/{jid}/errors", headers=caller.headers)
    assert resp.status_code == 200
    assert ndjson_lines(resp) == []


# --- scorecard -----------------------------------------------------------------------------------------


def test_scorecard_replays_other_cutoffs_and_flags_partial(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller, mode="both")["id"]
    probs = {"c1": (0.75, 0.95), "c2": (0.15, 0.05), "c3": (0.5, 0.85)}
    settle_items(
        web.sessions,
        jid,
        {
            (cid, mode): p
            for cid, (pu, pg) in probs.items()
            for mode, p in (("ungrounded", pu), ("grounded", pg))
            if not (cid == "c3" and mode == "grounded")
        },
    )
    partial = web.client.get(f"/v1/jobs/{jid}/scorecard", headers=caller.headers).get_json()
    assert partial["partial"] is True
    assert partial["job_id"] == jid
    assert partial["cutoffs"] == {"supported_min": 0.8, "contradicted_max": 0.2}
    assert partial["scorecards"]["grounded"]["errors"] == 1  # c3 grounded still pending

    settle_items(web.sessions, jid, {("c3", "grounded"): 0.85})
    finalize(web, jid)
    default = web.client.get(f"/v1/jobs/{jid}/scorecard", headers=caller.headers).get_json()
    assert default["partial"] is False
    ung = default["scorecards"]["ungrounded"]
    assert (ung["supported"], ung["contradicted"], ung["review"]) == (0, 1, 2)
    assert {f["id"] for f in default["flips"]} == {"c1", "c3"}

    replay = web.client.get(
        f"/v1/jobs/{jid}/scorecard?supported_min=0.7&contradicted_max=0.1", headers=caller.headers
    ).get_json()
    assert replay["cutoffs"] == {"supported_min": 0.7, "contradicted_max": 0.1}
    ung = replay["scorecards"]["ungrounded"]
    assert (ung["supported"], ung["contradicted"], ung["review"]) == (1, 0, 2)
    assert {f["id"] for f in replay["flips"]} == {"c2", "c3"}
    # Replay is read-only: the stored summary keeps the job's own cutoffs.
    assert web.job(jid).summary["cutoffs"] == {"supported_min": 0.8, "contradicted_max": 0.2}


@pytest.mark.parametrize(
    ("query", "field", "needle"),
    [
        ("supported_min=abc", "supported_min", "must be a number"),
        ("contradicted_max=nan", "contradicted_max", "finite"),
        ("supported_min=1.2", "supported_min", "between 0 and 1"),
        ("contradicted_max=-1", "contradicted_max", "between 0 and 1"),
        ("supported_min=0.3&contradicted_max=0.5", "contradicted_max", "below supported_min"),
        ("cutoff=0.5", "cutoff", "unknown query parameter"),
    ],
)
def test_scorecard_bad_parameters_are_named(
    web: WebEnv, caller: Caller, query: str, field: str, needle: str
) -> None:
    jid = web.submit(caller)["id"]
    err = error_of(web.client.get(f"/v1/jobs/{jid}/scorecard?{query}", headers=caller.headers), 400)
    assert err["field"] == field
    assert needle in err["message"]


# --- cancel and retry ----------------------------------------------------------------------------------


def test_cancel_a_queued_job(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller, mode="grounded")["id"]
    web.drain_messages()
    settle_items(web.sessions, jid, {("c1", "grounded"): 0.9})
    resp = web.client.post(f"/v1/jobs/{jid}/cancel", headers=caller.headers)
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["status"] == "cancelling"
    assert body["timestamps"]["cancelling_at"] is not None
    assert body["request_counts"]["skipped"] == 2  # pending items are skipped at once
    assert body["request_counts"]["completed"] == 1
    assert {i.status for i in web.items(jid) if i.custom_id != "c1"} == {"skipped"}
    # Cancelling again while cancelling is harmless.
    again = web.client.post(f"/v1/jobs/{jid}/cancel", headers=caller.headers)
    assert again.status_code == 200 and again.get_json()["status"] == "cancelling"
    finalize(web, jid)
    assert web.job(jid).status == "cancelled"
    err = error_of(web.client.post(f"/v1/jobs/{jid}/cancel", headers=caller.headers), 409)
    assert err["type"] == "conflict_error"
    assert "cancelled" in err["message"]


def test_cancel_a_completed_job_is_409(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller, mode="grounded")["id"]
    settle_items(web.sessions, jid, {(r["id"], "grounded"): 0.9 for r in ROWS})
    finalize(web, jid)
    err = error_of(web.client.post(f"/v1/jobs/{jid}/cancel", headers=caller.headers), 409)
    assert "completed" in err["message"]
    assert web.job(jid).status == "completed"


def test_retry_a_live_job_is_409(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller)["id"]
    web.drain_messages()
    err = error_of(web.client.post(f"/v1/jobs/{jid}/retry", headers=caller.headers), 409)
    assert "queued" in err["message"]
    assert web.drain_messages() == []


def test_retry_with_nothing_failed_is_200(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller, mode="grounded")["id"]
    settle_items(web.sessions, jid, {(r["id"], "grounded"): 0.9 for r in ROWS})
    finalize(web, jid)
    web.drain_messages()
    resp = web.client.post(f"/v1/jobs/{jid}/retry", headers=caller.headers)
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["retried"] == 0
    assert "nothing to retry" in body["message"]
    assert body["status"] == "completed"
    assert web.drain_messages() == []


def test_retry_failed_items_requeues_the_job(web: WebEnv, caller: Caller) -> None:
    jid = web.submit(caller, mode="grounded")["id"]
    settle_items(
        web.sessions,
        jid,
        {
            ("c1", "grounded"): 0.9,
            ("c2", "grounded"): ("failed", "boom"),
            ("c3", "grounded"): ("failed", "boom"),
        },
    )
    finalize(web, jid)
    web.drain_messages()
    resp = web.client.post(f"/v1/jobs/{jid}/retry", headers=caller.headers)
    assert resp.status_code == 202
    body = resp.get_json()
    assert body["retried"] == 2
    assert body["status"] == "queued"
    assert body["request_counts"]["pending"] == 2
    assert body["request_counts"]["completed"] == 1
    assert resp.headers["Location"] == f"/v1/jobs/{jid}"
    assert web.started_job_ids() == [jid]


# --- request-id lookup ---------------------------------------------------------------------------------


def test_request_id_lookup_is_tenant_scoped(web: WebEnv, caller: Caller, other_caller: Caller) -> None:
    jid = web.submit(caller, mode="grounded")["id"]
    settle_items(web.sessions, jid, {("c2", "grounded"): 0.04})
    resp = web.client.get("/v1/requests/req-c2-grounded", headers=caller.headers)
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["request_id"] == "req-c2-grounded"
    (call,) = body["calls"]
    assert call["endpoint"] == "decisions"
    assert call["status_code"] == 200
    assert call["input_tokens"] == 100
    assert call["job"] == {"id": jid, "kind": "claims", "status": "queued"}
    assert call["item"]["custom_id"] == "c2"
    assert call["item"]["output"]["p"] == 0.04

    err_other = error_of(web.client.get("/v1/requests/req-c2-grounded", headers=other_caller.headers), 404)
    err_missing = error_of(web.client.get("/v1/requests/req-nowhere", headers=caller.headers), 404)
    assert err_other == err_missing


# --- errors, health, OpenAPI ---------------------------------------------------------------------------


def test_unknown_paths_and_methods_under_v1_are_json(web: WebEnv, caller: Caller) -> None:
    err = error_of(web.client.get("/v1/nothing-here", headers=caller.headers), 404)
    assert err["type"] == "not_found_error"
    resp = web.client.delete("/v1/jobs", headers=caller.headers)
    assert error_of(resp, 405)["type"] == "method_not_allowed_error"
    assert "POST" in resp.headers["Allow"]


def test_unexpected_errors_are_json_and_do_not_echo(web: WebEnv, caller: Caller, monkeypatch: Any) -> None:
    secret = "postgresql://admin:hunter2@db/prod"

    def broken(*_a: Any, **_kw: Any) -> Any:
        raise RuntimeError(f"connection to {secret} failed")

    monkeypatch.setattr("web.api.list_jobs", broken)
    resp = web.client.get("/v1/jobs", headers=caller.headers)
    err = error_of(resp, 500)
    assert err["type"] == "server_error"
    assert "hunter2" not in resp.get_data(as_text=True)


def test_openapi_describes_every_v1_route(web: WebEnv) -> None:
    resp = web.client.get("/openapi.json")
    assert resp.status_code == 200
    doc = resp.get_json()
    assert doc["openapi"].startswith("3.1")
    assert doc == openapi_document()
    routes = {
        (re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule), method.lower())
        for rule in web.app.url_map.iter_rules()
        if rule.rule.startswith("/v1") or rule.rule in ("/healthz", "/readyz", "/openapi.json")
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    assert len(routes) >= 11
    missing = {(path, m) for path, m in routes if m not in doc["paths"].get(path, {})}
    assert missing == set()
    documented = {(path, m) for path, ops in doc["paths"].items() for m in ops}
    assert documented == routes  # and nothing is documented that does not exist
    # Every documented response refers to schemas that exist.
    refs = set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(doc)))
    assert refs <= set(doc["components"]["schemas"])
    # Every /v1 operation documents its 401.
    for path, ops in doc["paths"].items():
        if path.startswith("/v1"):
            for op in ops.values():
                assert "401" in op["responses"], path


# --- embedded and server start-up ----------------------------------------------------------------------


def test_embedded_mode_migrates_sqlite_at_startup(tmp_path: Any, memory_celery: Any) -> None:
    env = make_env(
        {"database_url": None, "redis_url": None, "perplexity_api_key": None, "instance_path": tmp_path},
        memory_celery,
    )
    try:
        assert (tmp_path / "factgate.db").exists()
        assert env.client.get("/healthz").get_json()["mode"] == "embedded"
        caller = env.new_caller()
        body = env.submit(caller)
        assert env.client.get(f"/v1/jobs/{body['id']}", headers=caller.headers).status_code == 200
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_server_mode_does_not_migrate(
    web_settings: dict[str, Any], memory_celery: Any, monkeypatch: Any
) -> None:
    calls: list[str] = []
    monkeypatch.setattr("web.app.migrations.upgrade", lambda url, *a, **kw: calls.append(url))
    env = make_env(web_settings, memory_celery)
    env.app.extensions["factgate"].engine.dispose()
    assert calls == []


def test_csv_cells_that_would_start_a_formula_are_neutralised(web: WebEnv, caller: Caller) -> None:
    """OWASP CSV injection: ids and errors chosen by others never reach a spreadsheet as formulas."""
    rows = [
        {"id": '=HYPERLINK("http://evil.example")', "claim": "A claim."},
        {"id": "+1+1", "claim": "Another claim."},
        {"id": "@SUM(A1)", "claim": "A third claim."},
        {"id": "-2", "claim": "A plain number stays a number."},
    ]
    jid = web.submit(caller, rows, mode="ungrounded")["id"]
    settle_items(web.sessions, jid, {("+1+1", "ungrounded"): ("failed", "=cmd|' /C calc'!A0")})
    resp = web.client.get(f"/v1/jobs/{jid}/results?format=csv", headers=caller.headers)
    got = csv_rows(resp)
    assert [r["custom_id"] for r in got] == [
        '\'=HYPERLINK("http://evil.example")',
        "'+1+1",
        "'@SUM(A1)",
        "-2",
    ]
    assert got[1]["error"] == "'=cmd|' /C calc'!A0"
    # The NDJSON export is lossless: the ids are exactly as submitted.
    lines = ndjson_lines(web.client.get(f"/v1/jobs/{jid}/results", headers=caller.headers))
    assert [line["custom_id"] for line in lines] == [r["id"] for r in rows]


@pytest.mark.parametrize(
    ("path", "field", "words"),
    [
        ("/v1/jobs?status=", "status", "is empty"),
        ("/v1/jobs?limit=5&limit=6", "limit", "given 2 times"),
        ("/v1/jobs/{jid}/results?format=", "format", "is empty"),
        ("/v1/jobs/{jid}/results?format=csv&format=ndjson", "format", "given 2 times"),
        ("/v1/jobs/{jid}/scorecard?supported_min=0.9&supported_min=0.7", "supported_min", "given 2 times"),
        ("/v1/jobs/{jid}/scorecard?contradicted_max=", "contradicted_max", "is empty"),
    ],
)
def test_empty_or_repeated_query_parameters_are_400_naming_them(
    web: WebEnv, caller: Caller, path: str, field: str, words: str
) -> None:
    jid = web.submit(caller)["id"]
    resp = web.client.get(path.format(jid=jid), headers=caller.headers)
    assert resp.status_code == 400, resp.get_json()
    err = resp.get_json()["error"]
    assert err["field"] == field and words in err["message"]


def test_repeated_options_of_an_ndjson_submission_are_400(web: WebEnv, caller: Caller) -> None:
    before = web.table_counts()
    resp = web.client.post(
        "/v1/jobs?kind=claims&mode=grounded&mode=ungrounded",
        data=ndjson(ROWS),
        headers=caller.ndjson_headers(),
    )
    assert resp.status_code == 400 and resp.get_json()["error"]["field"] == "mode"
    assert web.table_counts() == before


def test_a_url_too_long_for_any_server_is_a_json_414(web: WebEnv, caller: Caller) -> None:
    """Servers with laxer limits than gunicorn (waitress in embedded mode) refuse the same URLs alike."""
    resp = web.client.get(f"/v1/jobs?status={'x' * 8_200}", headers=caller.headers)
    assert resp.status_code == 414 and resp.get_json()["error"]["type"] == "uri_too_long_error"
    assert web.client.get(f"/v1/jobs?status={'x' * 100}", headers=caller.headers).status_code == 400
