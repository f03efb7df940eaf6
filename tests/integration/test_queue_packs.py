"""Packed jobs end to end (docs/spec.md §9): a real `celery worker` subprocess, the simulator over HTTP,
intake over the API. A packed citations job sends one request per answer (plus its audit), settles every
sentence as its own item with the labels an unpacked run gives, bills each request once, resolves a request
id to every sentence it answered, and reports its packing audit; ungrounded claims pack N to a request with
the verdicts an unpacked run gives; a simulator that drifts packed answers makes the audit warn.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from jobs.tenancy import create_token
from models import ApiCall, Item, make_session_factory, session_scope
from simulator.app import simulator_state
from simulator.config import SimConfig
from simulator.engine import Engine
from simulator.server import RunningSimulator, run_in_thread
from tests.integration.stack import SharedStack, shared_stack
from tests.integration.test_pages import csrf_token
from web.app import create_app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "citations.jsonl"
CLAIMS = ROOT / "examples" / "claims.jsonl"


@pytest.fixture(scope="module")
def sim_and_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningSimulator, SharedStack]]:
    with (
        run_in_thread(SimConfig(decisions_rps=0, agent_rps=0)) as sim,
        shared_stack(sim.base_url, tmp_path_factory.mktemp("packs-stack")) as st,
    ):
        st.start_worker()
        yield sim, st


@pytest.fixture(scope="module")
def stack(sim_and_stack: tuple[RunningSimulator, SharedStack]) -> SharedStack:
    return sim_and_stack[1]


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
    with session_scope(make_session_factory(stack.engine)) as session:
        token = create_token(session, f"packs-{uuid.uuid4().hex[:8]}").token
    return {"Authorization": f"Bearer {token}"}


def _submit(client: FlaskClient, auth: dict[str, str], kind: str, body: bytes, query: str = "") -> str:
    resp = client.post(
        f"/v1/jobs?kind={kind}{query}", data=body, headers={**auth, "Content-Type": "application/x-ndjson"}
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)
    return str(resp.get_json()["id"])


def _results(client: FlaskClient, auth: dict[str, str], job_id: str) -> dict[str, dict[str, Any]]:
    body = client.get(f"/v1/jobs/{job_id}/results", headers=auth).get_data(as_text=True)
    *lines, end = [json.loads(x) for x in body.splitlines()]
    assert end["_end"]["count"] == len(lines)
    return {line["custom_id"]: line for line in lines}


def _page(client: FlaskClient, auth: dict[str, str], path: str) -> str:
    token = auth["Authorization"].removeprefix("Bearer ")
    resp = client.post("/sign-in", data={"token": token, "csrf_token": csrf_token(client)})
    assert resp.status_code == 302
    return client.get(path).get_data(as_text=True)


def _labels(lines: dict[str, dict[str, Any]]) -> dict[str, list[str | None]]:
    return {cid: [s["label"] for s in line["report"]["sentences"]] for cid, line in lines.items()}


def _rows(stack: SharedStack, job_id: str) -> tuple[list[Item], list[ApiCall]]:
    with Session(stack.engine) as s:
        jid = uuid.UUID(job_id)
        items = list(s.scalars(select(Item).where(Item.job_id == jid).order_by(Item.id)))
        calls = list(s.scalars(select(ApiCall).where(ApiCall.job_id == jid).order_by(ApiCall.id)))
        return items, calls


def test_a_packed_citations_job_sends_a_request_per_answer_with_unpacked_labels(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    client = app.test_client()
    body = EXAMPLES.read_bytes()
    packed_id = _submit(client, auth, "citations", body)
    single_id = _submit(client, auth, "citations", body, "&pack_size=1")
    for job_id in (packed_id, single_id):
        job = stack.wait_job(uuid.UUID(job_id), timeout=180)
        assert job.status == "completed", job.error
    packed, single = _results(client, auth, packed_id), _results(client, auth, single_id)
    assert _labels(packed) == _labels(single)

    items, calls = _rows(stack, packed_id)
    sentences = [i for i in items if i.stage == "cited_sentence"]
    audits = [i for i in items if i.stage == "audit_sentence"]
    assert sentences and all(i.status == "done" for i in sentences)
    answers_with_sentences = {i.parent_id for i in sentences}
    sentence_calls = [c for c in calls if c.item_id in {i.id for i in sentences}]
    # one request per answer: a pack of its sentences, or one sentence alone
    assert len(sentence_calls) == len(answers_with_sentences) < len(sentences)
    assert len(calls) == len(sentence_calls) + len(audits)
    for call in sentence_calls:
        answered = call.pack_items or [int(call.item_id or 0)]
        assert {i.parent_id for i in items if i.id in answered} == {
            next(i.parent_id for i in items if i.id == call.item_id)
        }  # never two answers in one request
    # each sentence's usage is its share: they add up to what the requests cost
    assert sum(i.output["usage"]["input_tokens"] for i in sentences) == sum(  # type: ignore[index]
        c.input_tokens for c in sentence_calls
    )
    # a request id resolves to every sentence it answered
    pack = next(c for c in sentence_calls if c.pack_items)
    found = client.get(f"/v1/requests/{pack.request_id}", headers=auth).get_json()
    assert sorted(i["id"] for i in found["calls"][0]["items"]) == sorted(pack.pack_items or [])
    # the audit: the first answer's packed sentences asked again alone, agreeing
    summary = client.get(f"/v1/jobs/{packed_id}", headers=auth).get_json()["summary"]
    audit = summary["packing_audit"]
    assert audit["sentences"] == len(audits) > 0
    assert audit["label_agreement"] == 1.0 and audit["mean_abs_delta"] <= 0.02 and audit["warning"] is None
    page = _page(client, auth, f"/jobs/{packed_id}")
    assert "Packing audit" in page and "Label agreement" in page
    single_summary = client.get(f"/v1/jobs/{single_id}", headers=auth).get_json()["summary"]
    assert single_summary["packing_audit"] is None
    assert summary["totals"]["decisions_requests"] == len(calls)  # the packs and the audit's requests


def test_ungrounded_claims_pack_n_to_a_request_with_unpacked_verdicts(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    client = app.test_client()
    body = CLAIMS.read_bytes()
    packed_id = _submit(client, auth, "claims", body, "&mode=ungrounded&pack_size=10")
    single_id = _submit(client, auth, "claims", body, "&mode=ungrounded")
    for job_id in (packed_id, single_id):
        assert stack.wait_job(uuid.UUID(job_id), timeout=180).status == "completed"
    packed, single = _results(client, auth, packed_id), _results(client, auth, single_id)
    assert {k: v["results"] for k, v in packed.items()}.keys() == single.keys()
    for cid, line in single.items():
        assert packed[cid]["results"]["ungrounded"]["verdict"] == line["results"]["ungrounded"]["verdict"], (
            cid
        )
    items, calls = _rows(stack, packed_id)
    sent = [i for i in items if i.duplicate_of is None]
    assert len(calls) == -(-len(sent) // 10)
    assert all(i.status == "done" for i in items)


def test_grounded_claims_refuse_pack_size_naming_the_option(app: Flask, auth: dict[str, str]) -> None:
    client = app.test_client()
    resp = client.post(
        "/v1/jobs?kind=claims&mode=grounded&pack_size=5",
        data=CLAIMS.read_bytes(),
        headers={**auth, "Content-Type": "application/x-ndjson"},
    )
    assert resp.status_code == 400
    error = resp.get_json()["error"]
    assert error["field"] == "pack_size" and "search" in error["message"]


def test_the_audit_warns_when_packing_moves_verdicts(
    sim_and_stack: tuple[RunningSimulator, SharedStack], app: Flask, auth: dict[str, str]
) -> None:
    """The simulator's `pack_drift` moves a packed answer's probabilities by their position in the request:
    the audit, which asks the same sentences alone, sees the difference and the job says so."""
    sim, stack = sim_and_stack
    engine = simulator_state(sim.app).engine
    assert isinstance(engine, Engine)
    original = engine.config
    engine.config = replace(original, pack_drift=0.02)
    try:
        client = app.test_client()
        job_id = _submit(client, auth, "citations", EXAMPLES.read_bytes(), "&audit_share=1")
        assert stack.wait_job(uuid.UUID(job_id), timeout=180).status == "completed"
    finally:
        engine.config = original
    audit = client.get(f"/v1/jobs/{job_id}", headers=auth).get_json()["summary"]["packing_audit"]
    assert audit["mean_abs_delta"] > 0.02 and audit["warning"] is not None
    assert audit["max_abs_delta"] > audit["mean_abs_delta"] and len(audit["by_position"]) > 1
    page = _page(client, auth, f"/jobs/{job_id}")
    assert "packed verdicts differ from unpacked ones" in page


ANSWERS = ROOT / "examples" / "answer-questions.jsonl"


def _evidence(lines: dict[str, dict[str, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        cid: [(r["role"], r["number"], r["rewrite_number"], r["label"]) for r in line["report"]["evidence"]]
        for cid, line in lines.items()
    }


def test_a_packed_answer_job_sends_fewer_requests_with_unpacked_labels(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    """An answer job with pack_size 8 asks each answer's sentences (and each rewrite's) in one request and
    labels every sentence, original and rewrite, as the unpacked job does."""
    client = app.test_client()
    body = ANSWERS.read_bytes()
    packed_id = _submit(client, auth, "answer", body, "&pack_size=8")
    single_id = _submit(client, auth, "answer", body)
    for job_id in (packed_id, single_id):
        job = stack.wait_job(uuid.UUID(job_id), timeout=180)
        assert job.status == "completed", job.error
    packed, single = _results(client, auth, packed_id), _results(client, auth, single_id)
    assert _evidence(packed) == _evidence(single)
    assert any(r == "rewrite" for rows in _evidence(packed).values() for r, *_ in rows)

    decisions = {}
    for job_id in (packed_id, single_id):
        items, calls = _rows(stack, job_id)
        decisions[job_id] = [c for c in calls if c.endpoint == "decisions"]
        assert all(i.status == "done" for i in items)
        summaries = [line["report"]["summary"] for line in _results(client, auth, job_id).values()]
        # The report counts a pack once; the two jobs are one tenant's on a pinned model, so a request the
        # other job already sent is answered from the verdict store and counted apart (docs/spec.md §10).
        sent = sum(1 for c in decisions[job_id] if not c.reused)
        assert sum(s["decisions_requests"] for s in summaries) == sent
        assert sum(s["reused_requests"] for s in summaries) == len(decisions[job_id]) - sent
    assert len(decisions[packed_id]) < len(decisions[single_id])
    for line in packed.values():  # a packed request's id is listed once
        ids = line["report"]["request_ids"]["decisions"]
        assert len(ids) == len(set(ids))
    items, _calls = _rows(stack, packed_id)
    sentences = [i for i in items if i.stage == "sentence"]
    pack = next(c for c in decisions[packed_id] if c.pack_items)
    # a request id resolves to every sentence it answered, each with its share of the tokens
    found = client.get(f"/v1/requests/{pack.request_id}", headers=auth).get_json()
    assert sorted(i["id"] for i in found["calls"][0]["items"]) == sorted(pack.pack_items or [])
    answered = [i for i in sentences if i.id in (pack.pack_items or [])]
    assert sum(i.output["usage"]["input_tokens"] for i in answered) == pack.input_tokens  # type: ignore[index]
    # the audit: the first question's packed sentences asked again alone, agreeing
    audits = [i for i in items if i.stage == "audit_sentence"]
    summary = client.get(f"/v1/jobs/{packed_id}", headers=auth).get_json()["summary"]
    audit = summary["packing_audit"]
    assert audit["sentences"] == len(audits) > 0
    assert audit["label_agreement"] == 1.0 and audit["warning"] is None
    assert client.get(f"/v1/jobs/{single_id}", headers=auth).get_json()["summary"]["packing_audit"] is None
    page = _page(client, auth, f"/jobs/{packed_id}")
    assert "Packing audit" in page and "Label agreement" in page


QUOTES = ROOT / "examples" / "quote-questions.jsonl"


def _chosen(lines: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    def view(q: dict[str, Any] | None) -> tuple[Any, ...] | None:
        return None if q is None else (q["text"], q["url"], q["p_answers"], q["has_answer"], q["p_best"])

    return {
        cid: (line["report"]["status"], view(line["report"]["quote"]), view(line["report"]["closest"]))
        for cid, line in lines.items()
    }


def test_a_packed_quote_job_ranks_a_questions_results_in_one_request_with_the_same_quotes(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    """A quote job with pack_size 5 ranks each question's results in one request (compare stays one) and
    chooses the quote the unpacked job chooses."""
    client = app.test_client()
    body = QUOTES.read_bytes()
    packed_id = _submit(client, auth, "quote", body, "&pack_size=5")
    single_id = _submit(client, auth, "quote", body)
    for job_id in (packed_id, single_id):
        job = stack.wait_job(uuid.UUID(job_id), timeout=180)
        assert job.status == "completed", job.error
    packed, single = _results(client, auth, packed_id), _results(client, auth, single_id)
    assert _chosen(packed) == _chosen(single)
    assert any(status == "quoted" for status, *_ in _chosen(packed).values())

    decisions = {}
    for job_id in (packed_id, single_id):
        items, calls = _rows(stack, job_id)
        decisions[job_id] = [c for c in calls if c.endpoint == "decisions"]
        assert all(i.status == "done" for i in items)
        lines = list(_results(client, auth, job_id).values())
        # The two jobs are one tenant's, on a pinned model: a compare request the other job already sent is
        # answered from the verdict store (docs/spec.md §10), and the report counts it apart.
        sent = sum(1 for c in decisions[job_id] if not c.reused)
        assert sum(line["report"]["summary"]["decisions_requests"] for line in lines) == sent
        assert (
            sum(line["report"]["summary"]["reused_requests"] for line in lines)
            == len(decisions[job_id]) - sent
        )
    assert len(decisions[packed_id]) < len(decisions[single_id])
    items, _calls = _rows(stack, packed_id)
    ranks = {i.id: i for i in items if i.stage == "result"}
    rank_calls = [c for c in decisions[packed_id] if c.item_id in ranks]
    # one rank request per question that had results to rank
    assert len(rank_calls) == len({ranks[int(c.item_id or 0)].parent_id for c in rank_calls})
    assert any(c.pack_items for c in rank_calls)


def test_a_packed_rerun_is_answered_from_the_store_and_audits_nothing(
    stack: SharedStack, app: Flask, auth: dict[str, str]
) -> None:
    """The same answers again for the same tenant (docs/spec.md §10): every pack is answered from the
    verdict store, so nothing is sent — the packing audit included, which samples only packs sent upstream."""
    client = app.test_client()
    first = _submit(client, auth, "citations", EXAMPLES.read_bytes(), "&audit_share=1")
    assert stack.wait_job(uuid.UUID(first), timeout=180).status == "completed"
    again = _submit(client, auth, "citations", EXAMPLES.read_bytes(), "&audit_share=1")
    assert stack.wait_job(uuid.UUID(again), timeout=180).status == "completed"
    items, calls = _rows(stack, again)
    assert calls and all(c.reused for c in calls)  # recorded, at no cost, and none sent
    assert not [i for i in items if i.stage == "audit_sentence"]
    assert _labels(_results(client, auth, again)) == _labels(_results(client, auth, first))
    summary = client.get(f"/v1/jobs/{again}", headers=auth).get_json()["summary"]
    assert summary["packing_audit"] is None
