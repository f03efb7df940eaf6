"""Verdict reuse across a tenant's jobs (docs/spec.md, "Verdict reuse") with a real `celery worker`, Postgres,
Redis and the simulator over HTTP: a second job of the same tenant asking the same requests sends nothing
and says where its answers came from; another tenant, a deleted job, `reuse: "none"`, a `…-latest` model, a
grounded request without `reuse_max_age_hours` and a tenant with reuse off all pay; the purge removes the
entries with their job; `/v1/usage` and the job's usage count reused answers apart.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from checks.reuse import ReusePolicy
from jobs.purge import delete_job, purge_step
from jobs.retention import Retention
from jobs.tenancy import create_token, get_or_create_tenant, set_tenant
from jobs.verdicts import NewVerdict, find_verdict, keep_verdict
from models import (
    ApiCall,
    Item,
    Job,
    Verdict,
    autocommit_scope,
    make_engine,
    make_session_factory,
    session_scope,
    utcnow,
)
from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.stack import SharedStack, shared_stack
from tests.integration.test_pages import csrf_token
from web.app import create_app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PINNED = "pplx-decider-v1.2"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "citations.jsonl"
ANSWERS = EXAMPLES.with_name("answer-questions.jsonl")
QUOTES = EXAMPLES.with_name("quote-questions.jsonl")
CLAIMS = [
    {"id": "c1", "claim": "Rust 1.0 was released in May 2015."},
    {"id": "c2", "claim": "The Eiffel Tower is in Berlin."},
    {"id": "c3", "claim": "Python 3.0 was released in December 2008."},
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStack]:
    with (
        run_in_thread(SimConfig(decisions_rps=0, agent_rps=0)) as sim,
        shared_stack(sim.base_url, tmp_path_factory.mktemp("reuse-stack")) as st,
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


class Tenant:
    def __init__(self, stack: SharedStack, client: FlaskClient) -> None:
        self.name = f"reuse-{uuid.uuid4().hex[:8]}"
        with session_scope(make_session_factory(stack.engine)) as session:
            token = create_token(session, self.name).token
        self.headers = {"Authorization": f"Bearer {token}"}
        self.token = token
        self.stack = stack
        self.client = client

    def run_citations(self, rows: list[dict[str, Any]]) -> uuid.UUID:
        """A citations job of `rows` on the pinned model, run to completed."""
        resp = self.client.post(
            "/v1/jobs",
            json={"kind": "citations", "options": {"model": PINNED}, "items": rows},
            headers=self.headers,
        )
        assert resp.status_code == 202, resp.get_data(as_text=True)
        job_id = uuid.UUID(resp.get_json()["id"])
        assert self.stack.wait_job(job_id).status == "completed"
        return job_id

    def run(self, options: dict[str, Any], claims: list[dict[str, Any]] = CLAIMS) -> uuid.UUID:
        resp = self.client.post(
            "/v1/jobs", json={"kind": "claims", "options": options, "items": claims}, headers=self.headers
        )
        assert resp.status_code == 202, resp.get_data(as_text=True)
        job_id = uuid.UUID(resp.get_json()["id"])
        job = self.stack.wait_job(job_id)
        assert job.status == "completed", job.error
        return job_id

    def submit(self, kind: str, rows: list[dict[str, Any]], options: dict[str, Any]) -> uuid.UUID:
        """A job of `kind` through the API, waited for until it completed."""
        resp = self.client.post(
            "/v1/jobs", json={"kind": kind, "options": options, "items": rows}, headers=self.headers
        )
        assert resp.status_code == 202, resp.get_data(as_text=True)
        job_id = uuid.UUID(resp.get_json()["id"])
        job = self.stack.wait_job(job_id, timeout=180)
        assert job.status == "completed", job.error
        return job_id

    def lines(self, job_id: uuid.UUID) -> list[dict[str, Any]]:
        body = self.client.get(f"/v1/jobs/{job_id}/results", headers=self.headers).get_data(as_text=True)
        *lines, end = [json.loads(x) for x in body.splitlines() if x.strip()]
        assert end["_end"]["count"] == len(lines)
        return lines

    def csv(self, job_id: uuid.UUID) -> list[dict[str, str]]:
        text = self.client.get(f"/v1/jobs/{job_id}/results?format=csv", headers=self.headers).get_data(
            as_text=True
        )
        return [r for r in csv.DictReader(io.StringIO(text)) if not r["custom_id"].startswith("#")]

    def page(self, path: str) -> str:
        """A signed-in page (the session cookie stays on this client)."""
        resp = self.client.post("/sign-in", data={"token": self.token, "csrf_token": csrf_token(self.client)})
        assert resp.status_code == 302
        return self.client.get(path).get_data(as_text=True)

    def job(self, job_id: uuid.UUID) -> dict[str, Any]:
        resp = self.client.get(f"/v1/jobs/{job_id}", headers=self.headers)
        assert resp.status_code == 200
        return dict(resp.get_json())


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def _sent(stack: SharedStack, job_id: uuid.UUID) -> int:
    """HTTP attempts the job sent upstream (reused answers are rows too, but not attempts)."""
    with Session(stack.engine) as s:
        return int(
            s.scalar(select(func.count()).where(ApiCall.job_id == job_id, ApiCall.reused.is_(False))) or 0
        )


def _reused(stack: SharedStack, job_id: uuid.UUID) -> int:
    """Requests of the job answered from the verdict store (one `reused` row each)."""
    with Session(stack.engine) as s:
        return int(
            s.scalar(select(func.count()).where(ApiCall.job_id == job_id, ApiCall.reused.is_(True))) or 0
        )


def _request_totals(job: dict[str, Any]) -> tuple[int, int]:
    """The job summary's Decisions requests: (sent, answered from the store)."""
    totals = job["summary"]["totals"]
    return int(totals["decisions_requests"]), int(totals["reused_requests"])


def _outputs(stack: SharedStack, job_id: uuid.UUID) -> list[dict[str, Any]]:
    with Session(stack.engine) as s:
        return [
            dict(o) for o in s.scalars(select(Item.output).where(Item.job_id == job_id).order_by(Item.id))
        ]


def _rows(stack: SharedStack, job_id: uuid.UUID) -> tuple[list[Item], list[ApiCall]]:
    with Session(stack.engine) as s:
        items = list(s.scalars(select(Item).where(Item.job_id == job_id).order_by(Item.id)))
        calls = list(s.scalars(select(ApiCall).where(ApiCall.job_id == job_id).order_by(ApiCall.id)))
        return items, calls


def _sent_decisions(calls: list[ApiCall]) -> list[ApiCall]:
    """The Decisions requests a job sent upstream (an answer's and a quote's other calls, Agent and Search,
    are never answered from the store)."""
    return [c for c in calls if c.endpoint == "decisions" and not c.reused]


def _entries(stack: SharedStack, job_id: uuid.UUID) -> int:
    with Session(stack.engine) as s:
        return int(s.scalar(select(func.count()).where(Verdict.job_id == job_id)) or 0)


def test_a_second_job_of_the_tenant_sends_nothing_and_says_where_its_answers_came_from(
    stack: SharedStack, client: FlaskClient
) -> None:
    acme = Tenant(stack, client)
    first = acme.run({"model": PINNED, "mode": "ungrounded"})
    assert _sent(stack, first) == len(CLAIMS)
    assert _entries(stack, first) == len(CLAIMS)
    originals = {o["request_id"]: o for o in _outputs(stack, first)}

    second = acme.run({"model": PINNED, "mode": "ungrounded"})
    assert _sent(stack, second) == 0
    outputs = _outputs(stack, second)
    for output in outputs:
        origin = output["reused_from"]
        assert origin["request_id"] in originals
        datetime.fromisoformat(origin["answered_at"])
        assert output["p"] == originals[origin["request_id"]]["p"]
        assert output["usage"]["attempts"] == 0
        assert output["usage"]["cost_usd"] == 0
    # Said everywhere: the result line, the job's usage, /v1/usage, and the original id still resolves.
    lines = client.get(f"/v1/jobs/{second}/results", headers=acme.headers).get_data(as_text=True)
    assert lines.count('"reused_from"') == len(CLAIMS)
    usage = acme.job(second)["usage"]
    assert (usage["http_attempts"], usage["reused"], usage["cost_usd"]) == (0, len(CLAIMS), 0)
    today = datetime.now(UTC).date().isoformat()
    totals = client.get(f"/v1/usage?from={today}&to={today}", headers=acme.headers).get_json()["totals"]
    assert (totals["requests"], totals["reused"]) == (len(CLAIMS), len(CLAIMS))
    some_id = outputs[0]["reused_from"]["request_id"]
    found = client.get(f"/v1/requests/{some_id}", headers=acme.headers).get_json()
    assert [c["reused"] for c in found["calls"]] == [False, True]
    assert found["calls"][0]["job"]["id"] == str(first)


def test_another_tenant_pays_for_the_same_requests(stack: SharedStack, client: FlaskClient) -> None:
    acme, other = Tenant(stack, client), Tenant(stack, client)
    acme.run({"model": PINNED, "mode": "ungrounded"})
    theirs = other.run({"model": PINNED, "mode": "ungrounded"})
    assert _sent(stack, theirs) == len(CLAIMS)
    assert all("reused_from" not in o for o in _outputs(stack, theirs))


def test_deleting_the_first_job_stops_reuse_at_once_and_the_purge_removes_its_entries(
    stack: SharedStack, client: FlaskClient
) -> None:
    acme = Tenant(stack, client)
    first = acme.run({"model": PINNED, "mode": "ungrounded"})
    # The delete the API makes, without the purge it sends: reuse must stop before the purge runs.
    with session_scope(make_session_factory(stack.engine)) as s:
        job = s.get(Job, first)
        assert job is not None and delete_job(s, job)
    again = acme.run({"model": PINNED, "mode": "ungrounded"})
    assert _sent(stack, again) == len(CLAIMS)
    assert _entries(stack, first) == len(CLAIMS)
    with session_scope(make_session_factory(stack.engine)) as s:
        while purge_step(s, first, 2):
            pass
    assert _entries(stack, first) == 0
    with Session(stack.engine) as s:
        assert s.get(Job, first) is None
    # Through the API too: the delete (and the purge it sends) leaves nothing that answers.
    assert client.delete(f"/v1/jobs/{again}", headers=acme.headers).status_code in {200, 202, 204}
    third = acme.run({"model": PINNED, "mode": "ungrounded"})
    assert _sent(stack, third) == len(CLAIMS)


def test_reuse_none_sends_everything_and_keeps_nothing(stack: SharedStack, client: FlaskClient) -> None:
    acme = Tenant(stack, client)
    acme.run({"model": PINNED, "mode": "ungrounded"})
    off = acme.run({"model": PINNED, "mode": "ungrounded", "reuse": "none"})
    assert _sent(stack, off) == len(CLAIMS)
    assert _entries(stack, off) == 0
    assert acme.job(off)["options"]["reuse"] == "none"


def test_a_latest_model_is_never_reused(stack: SharedStack, client: FlaskClient) -> None:
    acme = Tenant(stack, client)
    first = acme.run({"model": "pplx-decider-latest", "mode": "ungrounded"})
    second = acme.run({"model": "pplx-decider-latest", "mode": "ungrounded"})
    assert (_sent(stack, first), _sent(stack, second)) == (len(CLAIMS), len(CLAIMS))
    assert _entries(stack, first) == 0


def test_grounded_requests_are_reused_only_with_a_max_age(stack: SharedStack, client: FlaskClient) -> None:
    acme = Tenant(stack, client)
    claims = CLAIMS[:2]
    acme.run({"model": PINNED, "mode": "grounded"}, claims)
    unbounded = acme.run({"model": PINNED, "mode": "grounded"}, claims)
    assert _sent(stack, unbounded) == len(claims)
    bounded = acme.run({"model": PINNED, "mode": "grounded", "reuse_max_age_hours": 1}, claims)
    assert _sent(stack, bounded) == 0
    # The stored search results come back with the answer (as a source list reference, jobs/source_lists.py).
    assert any(o["n_search_results"] for o in _outputs(stack, bounded))
    assert all(o.get("src_ref") for o in _outputs(stack, bounded) if o["n_search_results"])


def test_a_tenant_with_reuse_off_pays(stack: SharedStack, client: FlaskClient) -> None:
    acme = Tenant(stack, client)
    acme.run({"model": PINNED, "mode": "ungrounded"})
    with session_scope(make_session_factory(stack.engine)) as s:
        set_tenant(s, acme.name, reuse=False)
    again = acme.run({"model": PINNED, "mode": "ungrounded"})
    assert _sent(stack, again) == len(CLAIMS)


def test_the_store_on_sqlite_keeps_finds_hides_and_purges(sqlite_url: str) -> None:
    """Embedded mode's database: the same insert (tenant's switch read in it, first answer kept), one-read
    lookup (a deleted job's entry not found) and purge batch."""
    engine = make_engine(sqlite_url)
    try:
        factory = make_session_factory(engine)
        with session_scope(factory) as s:
            tenant = get_or_create_tenant(s, "lite")
            job = Job(tenant_id=tenant.id, kind="claims", status="completed", completed_at=utcnow())
            s.add(job)
            s.flush()
            tenant_id, job_id = tenant.id, job.id
        entry = NewVerdict(
            tenant_id=tenant_id, job_id=job_id, key=b"k" * 32, endpoint="decisions", model=PINNED,
            grounded=False, request_id="req-1", answered_at=utcnow(), answer={"answers": {}},
            input_tokens=3, output_tokens=1,
        )  # fmt: skip
        policy = ReusePolicy(read=True, write=True)
        with autocommit_scope(engine) as conn:
            assert keep_verdict(conn, entry)
            assert not keep_verdict(conn, replace(entry, request_id="req-2"))  # the first answer stays
            found = find_verdict(conn, tenant_id, b"k" * 32, policy=policy, retention=Retention())
            assert found is not None and found.request_id == "req-1"
            assert find_verdict(conn, uuid.uuid4(), b"k" * 32, policy=policy, retention=Retention()) is None
        with session_scope(factory) as s:
            gone = s.get(Job, job_id)
            assert gone is not None and delete_job(s, gone)
        with autocommit_scope(engine) as conn:
            assert find_verdict(conn, tenant_id, b"k" * 32, policy=policy, retention=Retention()) is None
        with session_scope(factory) as s:
            while purge_step(s, job_id):
                pass
            assert s.scalar(select(func.count()).select_from(Verdict)) == 0
    finally:
        engine.dispose()


def test_a_citations_rerun_says_reused_from_in_its_lines_csv_and_report(
    stack: SharedStack, client: FlaskClient
) -> None:
    acme = Tenant(stack, client)
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()][:2]

    first = acme.run_citations(rows)
    assert _sent(stack, first) > 0
    second = acme.run_citations(rows)
    assert _sent(stack, second) == 0
    lines = [json.loads(x) for x in client.get(f"/v1/jobs/{second}/results", headers=acme.headers).get_data(
        as_text=True).splitlines() if x.strip() and not x.startswith('{"_end"')]  # fmt: skip
    sentences = [s for line in lines for s in line["report"]["sentences"]]
    assert sentences and all(s["reused_from"]["request_id"] for s in sentences)
    # The request counts say what was sent and what the store answered: each reused request once.
    assert all(line["report"]["summary"]["decisions_requests"] == 0 for line in lines)
    assert all(line["report"]["summary"]["reused_requests"] > 0 for line in lines)
    assert _request_totals(acme.job(first)) == (_sent(stack, first), 0)
    assert _request_totals(acme.job(second)) == (0, _reused(stack, second)) != (0, 0)
    csv_text = client.get(f"/v1/jobs/{second}/results?format=csv", headers=acme.headers).get_data(
        as_text=True
    )
    header, *body = list(csv.reader(io.StringIO(csv_text)))
    at = header.index("reused_from")
    assert all(row[at] for row in body if row and not row[0].startswith("#"))


def test_a_reviewed_citations_rerun_counts_its_review_requests_as_reused(
    stack: SharedStack, client: FlaskClient
) -> None:
    """A citations job with `review: agent` on a pinned model, run twice: the second sends its Agent call
    again (the store keeps Decisions answers only) but no Decisions request, the rewrite sentences' among
    them, and its report counts every one of them as reused, none as sent."""
    acme = Tenant(stack, client)
    rows = [
        {"id": "flagged", "question": "Who won the 2024 Nobel Prize in Physics?",
         "answer": "John Hopfield and Geoffrey Hinton won the 2024 Nobel Prize in Physics [1].",
         "sources": [{"id": "1", "text": "The Louvre is the most visited museum in the world."}]},
    ]  # fmt: skip
    options = {"model": PINNED, "review": "agent", "pack_size": 1, "audit_share": 0}
    first = acme.submit("citations", rows, options)
    second = acme.submit("citations", rows, options)
    (before,) = acme.lines(first)
    (after,) = acme.lines(second)
    review = after["report"]["sentences"][0]["review"]
    assert review["status"] == "done" and review["sentences"], review
    sent = before["report"]["summary"]["decisions_requests"]
    assert sent == len(_sent_decisions(_rows(stack, first)[1])) > 1  # the sentence and its rewrite's
    assert (
        after["report"]["summary"]["decisions_requests"],
        after["report"]["summary"]["reused_requests"],
    ) == (
        0,
        sent,
    )
    assert _sent_decisions(_rows(stack, second)[1]) == []


def test_a_citations_rerun_settles_its_sentences_as_they_are_created_never_dispatching_them(
    stack: SharedStack, client: FlaskClient
) -> None:
    """The store answers a re-run's packs when their answer is planned (jobs/stages.py:_spawn): no sentence
    is dispatched, each is done with its pack place and a zero-cost share, and the one `reused` call row
    per pack, on its head, names every member, as a pack sent upstream would."""
    acme = Tenant(stack, client)
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()][:3]

    first = acme.run_citations(rows)
    second = acme.run_citations(rows)
    assert _sent(stack, second) == 0
    with Session(stack.engine) as s:
        sentences = list(
            s.scalars(
                select(Item).where(Item.job_id == second, Item.parent_id.is_not(None)).order_by(Item.id)
            )
        )
        calls = list(s.scalars(select(ApiCall).where(ApiCall.job_id == second)))
        first_sentences = int(
            s.scalar(
                select(func.count()).where(
                    Item.job_id == first, Item.parent_id.is_not(None), Item.stage == "cited_sentence"
                )
            )
            or 0
        )
    assert len(sentences) == first_sentences > len(rows)  # no audit: nothing of this job went upstream
    assert all(i.status == "done" and i.enqueued_at is None and i.attempts == 1 for i in sentences)
    assert all(i.output and i.output["reused_from"]["request_id"] for i in sentences)
    assert all(i.output and i.output["usage"]["cost_usd"] == 0 for i in sentences)
    heads = {i.output["pack"]["head"] for i in sentences if i.output}
    assert len(calls) == len(heads) and all(c.reused for c in calls)
    by_head = {c.item_id: sorted(c.pack_items or []) for c in calls}
    for head in heads:
        members = sorted(i.id for i in sentences if i.output and i.output["pack"]["head"] == head)
        assert by_head[head] == members
        assert [i.output["pack"]["position"] for i in sentences if i.id in members and i.output] == list(
            range(len(members))
        )
    reports = [o["report"] for o in _outputs(stack, second) if "report" in o]
    assert len(reports) == len(rows) and all(r["status"] != "failed" for r in reports)


def _examples(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _labels(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (line["custom_id"], row["role"], row["number"], row["rewrite_number"], row["label"])
        for line in lines
        for row in line["report"]["evidence"]
    ]


def test_a_packed_answer_rerun_sends_no_decisions_request_audits_nothing_and_says_reused_from(
    stack: SharedStack, client: FlaskClient
) -> None:
    """docs/spec.md §9.6 and §10 for the answer kind: the same packed questions again for the same tenant
    send no Decisions request (the Agent calls are sent: the store keeps Decisions answers only) and plan
    no packing audit; every evidence row, the result line, the CSV and both pages say where the answers
    came from. An edited re-run sends and audits only the changed question's packs."""
    acme = Tenant(stack, client)
    rows = [r for r in _examples(ANSWERS) if r["id"] in ("jwst", "eiffel")]
    options = {"pack_size": 8, "audit_share": 1}
    first = acme.submit("answer", rows, options)
    items, calls = _rows(stack, first)
    assert _sent_decisions(calls) and [i for i in items if i.stage == "audit_sentence"]

    second = acme.submit("answer", rows, options)
    items, calls = _rows(stack, second)
    assert _sent_decisions(calls) == []
    assert not [i for i in items if i.stage == "audit_sentence"]
    reused = [c for c in calls if c.reused]
    assert reused and {c.endpoint for c in reused} == {"decisions"}
    lines = acme.lines(second)
    assert _labels(lines) == _labels(acme.lines(first))
    evidence = [row for line in lines for row in line["report"]["evidence"]]
    assert evidence and all(row["reused_from"]["request_id"] for row in evidence)
    for line in lines:
        ids = [r["request_id"] for r in line["reused_from"]]
        assert ids and len(ids) == len(set(ids)) == len(set(line["report"]["request_ids"]["decisions"]))
        datetime.fromisoformat(line["reused_from"][0]["answered_at"])
    assert all(row["reused_from"] for row in acme.csv(second))
    job = acme.job(second)
    assert job["summary"]["packing_audit"] is None
    assert _request_totals(job) == (0, len(reused))
    assert _request_totals(acme.job(first))[1] == 0
    assert (job["usage"]["reused"], job["usage"]["cost_usd"] > 0) == (len(reused), True)  # the Agent calls
    page = acme.page(f"/jobs/{second}")
    assert "reused from an earlier job" in page
    assert f"{len(reused)} answered from earlier jobs (reused, $0)" in page

    # An edited re-run: one question changed. Only its packs are sent upstream, and only they are audited.
    edited = [rows[0], {"id": rows[1]["id"], "question": "How deep is the Mariana Trench?"}]
    third = acme.submit("answer", edited, options)
    items, calls = _rows(stack, third)
    changed = next(i.id for i in items if i.parent_id is None and i.custom_id == rows[1]["id"])
    parent = {i.id: i.parent_id for i in items}
    audits = [i for i in items if i.stage == "audit_sentence"]
    assert audits and {i.parent_id for i in audits} == {changed}
    sent = _sent_decisions(calls)
    assert sent and {parent[int(c.item_id or 0)] for c in sent} == {changed}
    kept = next(line for line in acme.lines(third) if line["custom_id"] == rows[0]["id"])
    assert all(row["reused_from"] for row in kept["report"]["evidence"])


def test_a_packed_quote_rerun_sends_no_decisions_request_and_says_reused_from(
    stack: SharedStack, client: FlaskClient
) -> None:
    """docs/spec.md §10 for the quote kind: the same packed questions again send no rank or compare request
    (the searches are sent), choose the same quotes, and the report rows, the result line, the CSV and the
    report page say where the answers came from."""
    acme = Tenant(stack, client)
    rows = _examples(QUOTES)[:3]
    options = {"pack_size": 5}
    first = acme.submit("quote", rows, options)
    assert _sent_decisions(_rows(stack, first)[1])
    second = acme.submit("quote", rows, options)
    _items, calls = _rows(stack, second)
    assert _sent_decisions(calls) == []
    reused = [c for c in calls if c.reused]
    assert reused and {c.endpoint for c in reused} == {"decisions"}

    def chosen(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(line["custom_id"], line["outcome"], line["quote"], line["closest"]) for line in lines]

    lines = acme.lines(second)
    assert chosen(lines) == chosen(acme.lines(first))
    results = [row for line in lines for row in line["report"]["results"]]
    assert results and all(row["reused_from"]["request_id"] for row in results)
    compares = [line["report"]["compare"] for line in lines if line["report"]["compare"]]
    assert compares and all(c["reused_from"]["request_id"] for c in compares)
    for line in lines:
        ids = {r["request_id"] for r in line["reused_from"]}
        assert ids == {row["request_id"] for row in line["report"]["results"]} | {
            c["request_id"] for c in [line["report"]["compare"]] if c
        }
    assert all(row["reused_from"] for row in acme.csv(second))
    assert acme.job(second)["usage"]["reused"] == len(reused)
    assert _request_totals(acme.job(second)) == (0, len(reused))
    assert all(line["report"]["summary"]["reused_requests"] > 0 for line in lines)
    page = acme.page(f"/jobs/{second}")
    assert "reused from an earlier job" in page
    assert f"{len(reused)} answered from earlier jobs (reused, $0)" in page
