"""Citations jobs end to end: intake over the API (NDJSON streamed through the staging table on Postgres,
JSON in memory), a real `celery worker` subprocess, the simulator over HTTP judging the passages the rows
supply, finalize, the exports, the report page with its cutoff replay, and request-id lookup.

`examples/citations.jsonl` is written so that the simulator's judge (simulator/judge.py: a passage that
states the sentence supports it, a changed number contradicts, another topic does not support) gives each
label on purpose; the assertions below name which sentence gets which.
"""

from __future__ import annotations

import csv
import io
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from jobs.tenancy import create_token
from models import ApiCall, Item, make_session_factory, session_scope
from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.stack import SharedStack, shared_stack
from tests.integration.test_pages import csrf_token
from web.app import create_app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "citations.jsonl"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStack]:
    with (
        run_in_thread(SimConfig(decisions_rps=0, agent_rps=0)) as sim,
        shared_stack(sim.base_url, tmp_path_factory.mktemp("citations-stack")) as st,
    ):
        st.start_worker()
        yield st


@pytest.fixture(scope="module")
def app(stack: SharedStack) -> Iterator[Flask]:
    app = create_app(
        {
            "database_url": stack.pg_url,
            "redis_url": stack.env["REDIS_URL"],
            "perplexity_api_key": "sim-test-key",
            "instance_path": stack.tmp / "instance",
        }
    )
    app.testing = True
    try:
        yield app
    finally:
        app.extensions["factgate"].engine.dispose()


@pytest.fixture
def auth(stack: SharedStack) -> dict[str, str]:
    """A tenant of the test's own (the module's worker serves every test's jobs)."""
    with session_scope(make_session_factory(stack.engine)) as session:
        token = create_token(session, f"cit-{uuid.uuid4().hex[:8]}").token
    return {"Authorization": f"Bearer {token}"}


def _submit_ndjson(client: FlaskClient, auth: dict[str, str], body: bytes, query: str = "") -> str:
    resp = client.post(
        f"/v1/jobs?kind=citations{query}", data=body, headers={**auth, "Content-Type": "application/x-ndjson"}
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)
    return str(resp.get_json()["id"])


def _results(client: FlaskClient, auth: dict[str, str], job_id: str) -> dict[str, dict[str, Any]]:
    body = client.get(f"/v1/jobs/{job_id}/results", headers=auth).get_data(as_text=True)
    *lines, end = [json.loads(x) for x in body.splitlines()]
    assert end["_end"]["count"] == len(lines)
    return {line["custom_id"]: line for line in lines}


def _labels(line: dict[str, Any]) -> list[str | None]:
    return [s["label"] for s in line["report"]["sentences"]]


def _calls(stack: SharedStack, job_id: str) -> list[ApiCall]:
    with Session(stack.engine) as s:
        return list(s.scalars(select(ApiCall).where(ApiCall.job_id == uuid.UUID(job_id))))


def test_examples_get_every_label_and_the_metrics_on_purpose(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    client = app.test_client()
    job_id = _submit_ndjson(client, auth, EXAMPLES.read_bytes())
    job = stack.wait_job(uuid.UUID(job_id), timeout=180)
    assert job.status == "completed", job.error
    lines = _results(client, auth, job_id)
    assert list(lines) == [json.loads(r)["id"] for r in EXAMPLES.read_text().splitlines()]
    assert all(line["outcome"] == "done" for line in lines.values())

    assert _labels(lines["eiffel"]) == ["supported"] * 3
    assert _labels(lines["danube"]) == ["contradicted", "supported"]  # 12 countries, the passage says 10
    danube = lines["danube"]["report"]["sentences"][0]
    assert danube["rule"].startswith("passage 1 contradicts")
    # Citations swapped: each sentence cites the source about the other; the label still judges the citation.
    wall = lines["great-wall"]["report"]["sentences"]
    assert [s["label"] for s in wall] == ["unsupported", "unsupported"]
    assert [s["misattributed"] for s in wall] == [["wall-b"], ["wall-a"]]
    assert lines["great-wall"]["metrics"]["citation_recall"] == 0.0
    assert lines["great-wall"]["metrics"]["supported_share"] == 1.0
    assert _labels(lines["curie"]) == ["weak", "supported"]
    # [1, 4]: a list marker naming a source the row does not have is a missing id, not a row error.
    python = lines["python-release"]["report"]["sentences"][1]
    assert python["label"] == "supported" and python["missing"] == ["4"]
    assert "cites [4] but the row has no source with that id" in python["rule"]
    assert lines["python-release"]["metrics"]["citation_precision"] == pytest.approx(2 / 3, abs=1e-3)
    assert _labels(lines["summary-transition"]) == ["supported", "not_checkable"]
    assert _labels(lines["uncited-claim"]) == ["supported", "uncited"]
    assert _labels(lines["off-topic"]) == ["unsupported"]
    assert _labels(lines["tea"]) == ["supported", "not_checkable"]
    # A long source is cut into chunks; the chunk that states the sentence counts and is marked.
    moon = lines["long-document"]["report"]["sentences"][0]
    cited = [p for p in moon["passages"] if p["role"] == "cited"]
    assert moon["label"] == "supported" and len(cited) == cited[0]["chunks"] > 1
    best = [p for p in cited if p["best"]]
    assert len(best) == 1 and "20 July 1969" in best[0]["text"]

    summary = job.summary or {}
    assert summary["kind"] == "citations" and summary["questions"] == len(lines)
    metrics = summary["metrics"]
    assert set(metrics["labels"]) == {"supported", "weak", "unsupported", "contradicted", "uncited",
                                      "not_checkable"}  # fmt: skip
    assert metrics["misattributed"] == 2 and metrics["contradicted"] == 1
    assert metrics["sentences"] == sum(len(line["report"]["sentences"]) for line in lines.values())

    # One Decisions request per answer, its sentences packed (docs/spec.md §9), none for the answers
    # themselves (they only split), and the packing audit's: the first answer's sentences asked alone. Each
    # id is the request behind one answer's sentences, and the lookup finds every one of them.
    calls = _calls(stack, job_id)
    assert {c.endpoint for c in calls} == {"decisions"}
    with Session(stack.engine) as s:
        stages = dict(
            s.execute(
                select(Item.stage, func.count()).where(Item.job_id == uuid.UUID(job_id)).group_by(Item.stage)
            ).all()
        )
    first = lines[next(iter(lines))]
    audits = len(first["report"]["sentences"])
    assert stages == {"answer": len(lines), "cited_sentence": metrics["sentences"], "audit_sentence": audits}
    answered = sum(1 for line in lines.values() if line["report"]["sentences"])
    totals = summary["totals"]
    assert len(calls) == answered + audits == totals["decisions_requests"] + totals["reused_requests"]
    assert totals["decisions_requests"] == sum(1 for c in calls if not c.reused)
    assert summary["packing_audit"]["sentences"] == audits
    rid = danube["request_id"]
    found = client.get(f"/v1/requests/{rid}", headers=auth)
    assert found.status_code == 200
    (call,) = found.get_json()["calls"]
    assert call["job"] == {"id": job_id, "kind": "citations", "status": "completed"}
    assert call["item"]["custom_id"] == "danube:s1"
    assert [i["custom_id"] for i in call["items"]] == ["danube:s1", "danube:s2"]
    assert job.usage is not None and job.usage["http_attempts"] == len(calls)

    # The CSV is one row per sentence, formula-safe, with the trailer.
    table = list(
        csv.reader(
            io.StringIO(
                client.get(f"/v1/jobs/{job_id}/results?format=csv", headers=auth).get_data(as_text=True)
            )
        )
    )
    assert table[0][:5] == ["custom_id", "sentence", "paragraph", "text", "label"]
    assert table[-1] == ["#end", str(metrics["sentences"])]
    assert [r[4] for r in table[1:-1] if r[0] == "danube"] == ["contradicted", "supported"]


def test_the_report_page_replays_cutoffs_without_a_request(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    client = app.test_client()
    rows = [
        line for line in EXAMPLES.read_text().splitlines() if json.loads(line)["id"] in ("curie", "eiffel")
    ]
    job_id = _submit_ndjson(client, auth, "\n".join(rows).encode())
    assert stack.wait_job(uuid.UUID(job_id), timeout=120).status == "completed"
    calls_before = len(_calls(stack, job_id))
    token = auth["Authorization"].removeprefix("Bearer ")
    resp = client.post("/sign-in", data={"token": token, "csrf_token": csrf_token(client)})
    assert resp.status_code == 302
    page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Citation metrics" in page and "Cutoff replay" in page
    assert page.count('class="sent l-weak" title="sentence') == 1  # curie's long sentence
    # At weak_min 0.6 the weak sentence (support ~0.5) is unsupported; nothing is sent or stored.
    replayed = client.get(f"/jobs/{job_id}?weak_min=0.6").get_data(as_text=True)
    assert "replayed" in replayed
    assert replayed.count('l-weak" title="sentence') == 0
    assert replayed.count('l-unsupported" title="sentence') == 1
    assert len(_calls(stack, job_id)) == calls_before
    bad = client.get(f"/jobs/{job_id}?weak_min=0.9").get_data(as_text=True)
    assert "must not be above supported_min" in bad
    # The self-contained report file shows the same sentences, at the job's own cutoffs.
    report = client.get(f"/jobs/{job_id}/report.html").get_data(as_text=True)
    assert report.count('class="sent l-weak" title="sentence') == 1 and "<form" not in re.sub(
        r"<header.*?</header>", "", report, flags=re.S
    )


def test_misattribution_off_asks_only_the_cited_passages(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    client = app.test_client()
    row = next(line for line in EXAMPLES.read_text().splitlines() if json.loads(line)["id"] == "great-wall")
    job_id = _submit_ndjson(client, auth, row.encode(), "&misattribution=false")
    assert stack.wait_job(uuid.UUID(job_id), timeout=120).status == "completed"
    line = _results(client, auth, job_id)["great-wall"]
    assert line["report"]["misattribution"] is False
    for sentence in line["report"]["sentences"]:
        assert sentence["misattributed"] == [] and {p["role"] for p in sentence["passages"]} == {"cited"}
    assert line["metrics"]["supported_share"] == 0.0


def test_review_suggests_a_rewrite_for_flagged_sentences(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    client = app.test_client()
    rows = [
        {"id": "with-q", "question": "Who won the 2024 Nobel Prize in Physics?",
         "answer": "John Hopfield and Geoffrey Hinton won the 2024 Nobel Prize in Physics [1].",
         "sources": [{"id": "1", "text": "The Louvre is the most visited museum in the world."}]},
        {"id": "no-q", "answer": "John Hopfield and Geoffrey Hinton won the 2024 Nobel Prize in Physics [1].",
         "sources": [{"id": "1", "text": "The Louvre is the most visited museum in the world."}]},
    ]  # fmt: skip
    resp = client.post(
        "/v1/jobs", json={"kind": "citations", "options": {"review": "agent"}, "items": rows}, headers=auth
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)
    job_id = str(resp.get_json()["id"])
    job = stack.wait_job(uuid.UUID(job_id), timeout=180)
    assert job.status == "completed", job.error
    lines = _results(client, auth, job_id)
    reviewed = lines["with-q"]["report"]["sentences"][0]
    assert reviewed["label"] == "unsupported"  # the review suggests; it does not change the label
    assert reviewed["review"]["status"] == "done" and reviewed["review"]["outcome"] in (
        "replaced",
        "not confirmed",
    )
    assert reviewed["review"]["request_ids"]
    assert lines["no-q"]["report"]["sentences"][0]["review"] is None  # no question: nothing to ask
    agent = [c for c in _calls(stack, job_id) if c.endpoint == "agent"]
    assert len(agent) == (job.summary or {})["totals"]["agent_calls"] == 1


def test_bad_rows_and_csv_bodies_are_refused_naming_the_field(app: Flask, auth: dict[str, str]) -> None:
    client = app.test_client()
    bad = client.post(
        "/v1/jobs",
        json={"kind": "citations", "items": [
            {"id": "a", "answer": "Fine [1].", "sources": [{"id": "1", "text": "Fine."}]},
            {"id": "b", "answer": "Text [x].", "sources": [{"id": "x", "text": "ok"}, {"title": "no text"}]},
        ]},
        headers=auth,
    )  # fmt: skip
    assert bad.status_code == 400, bad.get_data(as_text=True)
    assert bad.get_json()["error"]["field"] == "items[1].sources[1].text"
    dup = b'{"id": "a", "answer": "A [2].", "sources": [{"id": "2", "text": "x"}, {"text": "y"}]}\n'
    resp = client.post(
        "/v1/jobs?kind=citations", data=dup, headers={**auth, "Content-Type": "application/x-ndjson"}
    )
    error = resp.get_json()["error"]
    assert resp.status_code == 400 and error["line"] == 1 and error["field"] == "sources[1].id", error
    assert "duplicate source id" in error["message"]
    csv_body = client.post(
        "/v1/jobs?kind=citations", data="id,answer\na,x\n", headers={**auth, "Content-Type": "text/csv"}
    )
    message = csv_body.get_json()["error"]["message"]
    assert csv_body.status_code == 400 and "NDJSON or JSON" in message and "sources" in message
    with Session(app.extensions["factgate"].engine) as s:
        assert not s.scalar(select(func.count()).select_from(Item).where(Item.custom_id.in_(["a", "b"])))


def test_the_job_and_its_results_match_the_served_document(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    """Real citations responses (the job object with its summary, every results line with the report it
    carries, the trailer) against the served /openapi.json, whose components come from the contracts."""
    from openapi_core import OpenAPI

    from tests.integration.test_api_openapi_responses import _check, _lines

    client = app.test_client()
    served = client.get("/openapi.json").get_json()
    assert "citations" in served["components"]["schemas"]["Job"]["properties"]["kind"]["enum"]
    assert {"CitationsResult", "CitationsSummary", "CitationRow", "CitationsOptions"} <= set(
        served["components"]["schemas"]
    )
    api = OpenAPI.from_dict(served)
    rows = [line for line in EXAMPLES.read_text().splitlines() if json.loads(line)["id"] in ("danube", "tea")]
    job_id = _submit_ndjson(client, auth, "\n".join(rows).encode())
    assert stack.wait_job(uuid.UUID(job_id), timeout=120).status == "completed"
    job = _check(api, client.get(f"/v1/jobs/{job_id}", headers=auth))
    assert job["summary"]["kind"] == "citations" and job["summary"]["metrics"]["contradicted"] == 1
    lines = _lines(served, client.get(f"/v1/jobs/{job_id}/results", headers=auth), "CitationsResult")
    assert [line["custom_id"] for line in lines] == ["danube", "tea"]


RAGAS = EXAMPLES.parent / "ragas.jsonl"
DEEPEVAL = EXAMPLES.parent / "deepeval.json"


def test_ragas_and_deepeval_rows_run_as_they_are_and_the_job_says_how_it_read_them(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    """A RAGAS file streamed as NDJSON (no markers: every sentence against every source) and DeepEval test
    cases as JSON items (markers by context position); the job's warning names the format."""
    client = app.test_client()
    ragas_id = _submit_ndjson(client, auth, RAGAS.read_bytes())
    cases = json.loads(DEEPEVAL.read_text())["test_cases"]
    resp = client.post("/v1/jobs", json={"kind": "citations", "items": cases}, headers=auth)
    assert resp.status_code == 202, resp.get_data(as_text=True)
    deepeval_id = str(resp.get_json()["id"])

    ragas_job = stack.wait_job(uuid.UUID(ragas_id), timeout=180)
    assert ragas_job.status == "completed", ragas_job.error
    (note,) = ragas_job.warnings or []
    assert note.startswith("rows read as RAGAS (detected)") and "11 of 11 answers have no [n] markers" in note
    lines = _results(client, auth, ragas_id)
    assert list(lines)[:2] == ["eiffel", "danube"]  # RAGAS's own `id`
    eiffel = lines["eiffel"]["report"]["sentences"]
    assert [s["label"] for s in eiffel] == ["supported"] * 3
    assert all(s["unmarked"] and s["cited"] == ["1", "2"] for s in eiffel)
    assert eiffel[0]["rule"].startswith("no markers, checked against every source: ")
    # Unmarked: never "uncited"; the swapped citations of great-wall are no longer wrong, only the facts.
    assert _labels(lines["great-wall"]) == ["supported", "supported"]
    assert _labels(lines["danube"])[0] == "contradicted"
    metrics = (ragas_job.summary or {})["metrics"]
    assert "uncited" not in metrics["labels"] and metrics["unmarked"] == metrics["checkable"] > 0
    assert metrics["citation_recall"] is None and metrics["uncited_rate"] is None
    assert 0 < metrics["supported_share"] < 1
    table = client.get(f"/v1/jobs/{ragas_id}/results?format=csv", headers=auth).get_data(as_text=True)
    assert "no markers, checked against every source" in table
    token = auth["Authorization"].removeprefix("Bearer ")
    client.post("/sign-in", data={"token": token, "csrf_token": csrf_token(client)})
    page = client.get(f"/jobs/{ragas_id}").get_data(as_text=True)
    assert "rows read as RAGAS" in page and "checked against every source (no markers)" in page
    assert "come from answers without [n] markers" in page

    deepeval_job = stack.wait_job(uuid.UUID(deepeval_id), timeout=180)
    assert deepeval_job.status == "completed", deepeval_job.error
    assert (deepeval_job.warnings or [""])[0].startswith("rows read as DeepEval (detected)")
    marked = _results(client, auth, deepeval_id)
    assert _labels(marked["great-wall"]) == ["unsupported", "unsupported"]  # its markers are judged
    assert _labels(marked["uncited-claim"]) == ["supported", "uncited"]
    assert (deepeval_job.summary or {})["metrics"]["unmarked"] == 0


def test_ragas_and_deepeval_rows_are_refused_in_their_own_field_names(
    app: Flask, auth: dict[str, str]
) -> None:
    client = app.test_client()
    body = (
        b'{"user_input": "q", "response": "A.", "retrieved_contexts": ["ok"]}\n'
        b'{"user_input": "q", "response": "B.", "retrieved_contexts": ["ok", 3]}\n'
    )
    resp = client.post(
        "/v1/jobs?kind=citations", data=body, headers={**auth, "Content-Type": "application/x-ndjson"}
    )
    error = resp.get_json()["error"]
    assert resp.status_code == 400 and error["line"] == 2 and error["field"] == "retrieved_contexts[1]", error
    named = client.post(
        "/v1/jobs",
        json={"kind": "citations", "options": {"input_format": "deepeval"},
              "items": [{"input": "q", "actual_output": "A.", "retrieval_context": "not a list"}]},
        headers=auth,
    )  # fmt: skip
    assert named.status_code == 400
    assert named.get_json()["error"]["field"] == "items[0].retrieval_context"
