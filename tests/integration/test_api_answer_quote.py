"""`answer` and `quote` jobs through the JSON API and the stage machine on real Postgres, without a worker.

Intake is exercised over HTTP; items are then settled with the jobs/ state functions a worker uses and
`jobs.stages.advance_question` is called as the task layer calls it, so every stage transition, the
report, readiness, retry and the results export are checked deterministically.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import select

from checks import answers as gate
from checks import quotes
from jobs.finalize import maybe_finalize
from jobs.items import claim_item, fail_item, finish_item
from jobs.records import CallRow
from jobs.stages import Step, advance_question, get_question_report, questions_ready, stalled_questions
from models import Item, Job, session_scope
from tests.integration.export_files import csv_records, ndjson_records
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    ndjson,
    web,
    web_settings,
)
from workers.answers import sentence_specs

pytestmark = pytest.mark.integration

QUESTIONS = [{"id": "q1", "question": "Who built it?"}, {"id": "q2", "question": "When was it built?"}]
RESULTS = [
    {
        "id": 1,
        "url": "https://a.example/1",
        "title": "A",
        "snippet": "The bridge was built by Ada.",
        "date": None,
    },
    {
        "id": 2,
        "url": "https://b.example/2",
        "title": "B",
        "snippet": "It opened in 1890.",
        "date": "2020-01-01",
    },
]
ANSWER = "The bridge was built by Ada [1]. The bridge opened in 1890 [2]."


def post(web: WebEnv, caller: Caller, payload: Any) -> Any:
    return web.client.post("/v1/jobs", json=payload, headers=caller.headers)


def error_of(resp: Any, status: int = 400) -> dict[str, Any]:
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True)[:500])
    err: dict[str, Any] = resp.get_json()["error"]
    return err


def items_of(web: WebEnv, job_id: str) -> list[Item]:
    with web.sessions() as s:
        return list(s.scalars(select(Item).where(Item.job_id == uuid.UUID(job_id)).order_by(Item.id)))


def call(request_id: str, endpoint: str = "decisions", status: int = 200) -> CallRow:
    return CallRow(endpoint=endpoint, attempt=1, status_code=status, request_id=request_id, latency_ms=10.0)


def settle(
    web: WebEnv,
    item_id: int,
    output: dict[str, Any] | None,
    *,
    error: str | None = None,
    request_id: str | None = None,
) -> Step | None:
    """Claim, settle and (for questions) advance in one transaction, as `run_item` does."""
    with session_scope(web.sessions) as s:
        claimed = claim_item(s, item_id, 300)
        assert claimed is not None
        calls = (
            [call(request_id, "agent" if claimed.stage == "question" else "decisions")] if request_id else []
        )
        if error is None:
            assert output is not None
            assert finish_item(s, claimed, output, calls)
        else:
            assert fail_item(s, claimed, error, calls, output)
        return advance_question(s, item_id) if claimed.stage == "question" else None


def advance(web: WebEnv, question_id: int) -> Step:
    with session_scope(web.sessions) as s:
        return advance_question(s, question_id)


def finalize(web: WebEnv, job_id: str) -> bool:
    with session_scope(web.sessions) as s:
        return maybe_finalize(s, uuid.UUID(job_id))


def report_of(web: WebEnv, job_id: str, custom_id: str) -> dict[str, Any]:
    with web.sessions() as s:
        job = s.get(Job, uuid.UUID(job_id))
        assert job is not None
        entry = get_question_report(s, job, custom_id)
    assert entry is not None and entry["report"] is not None
    report: dict[str, Any] = entry["report"]
    return report


def results(web: WebEnv, caller: Caller, job_id: str) -> list[dict[str, Any]]:
    """The NDJSON results export, one parsed line per question."""
    resp = web.client.get(f"/v1/jobs/{job_id}/results", headers=caller.headers)
    assert resp.status_code == 200
    return ndjson_records(resp.get_data(as_text=True))


def csv_rows(web: WebEnv, caller: Caller, job_id: str) -> list[dict[str, str]]:
    """The CSV results export as dicts by column."""
    resp = web.client.get(f"/v1/jobs/{job_id}/results?format=csv", headers=caller.headers)
    assert resp.status_code == 200 and resp.mimetype == "text/csv"
    return csv_records(resp.get_data(as_text=True))


def sentence_output(spec: dict[str, Any], support: float, request_id: str) -> dict[str, Any]:
    """What the sentence handler stores, for made-up probabilities (the label comes from checks/)."""
    answers = {gate.CHECKABLE_QUESTION: 0.95}
    for n in spec["passages"]:
        answers[gate.supports_question(n)] = support
        answers[gate.contradicts_question(n)] = 0.01
    result = gate.label_sentence(answers, spec["passages"].keys(), spec["missing_ids"])
    return {
        "label": result.label,
        "rule": result.rule,
        "checkable": result.checkable,
        "supports": {n: support for n in spec["passages"]},
        "contradicts": {n: 0.01 for n in spec["passages"]},
        "request_id": request_id,
        "request_ids": [request_id],
        "input_tokens": 100,
    }


# --- intake --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["answer", "quote"])
def test_json_intake_creates_one_question_item_per_row(web: WebEnv, caller: Caller, kind: str) -> None:
    resp = post(
        web, caller, {"kind": kind, "items": QUESTIONS, "options": {"model": "pplx-decider-flash-latest"}}
    )
    assert resp.status_code == 202, resp.get_json()
    body = resp.get_json()
    assert body["kind"] == kind and body["request_counts"]["total"] == 2
    assert body["options"] == {
        "model": "pplx-decider-flash-latest",
        "budget_usd": None,
        "priority": "batch",
        "pack_size": 1,
    }
    items = items_of(web, body["id"])
    assert [(i.stage, i.custom_id, i.parent_id) for i in items] == [
        ("question", "q1", None),
        ("question", "q2", None),
    ]
    assert [i.input for i in items] == [{"kind": kind, "question": q["question"]} for q in QUESTIONS]
    assert web.started_job_ids() == [body["id"]]


@pytest.mark.parametrize("kind", ["answer", "quote"])
def test_question_jobs_default_to_the_model_their_cutoffs_were_measured_on(
    web: WebEnv, caller: Caller, kind: str
) -> None:
    resp = post(web, caller, {"kind": kind, "items": QUESTIONS})
    assert resp.status_code == 202, resp.get_json()
    assert resp.get_json()["options"] == {
        "model": "pplx-decider-v1.1-27b",
        "budget_usd": None,
        "priority": "batch",
        "pack_size": 1,
    }
    claims = post(web, caller, {"kind": "claims", "items": [{"id": "c", "claim": "Water is wet."}]})
    assert claims.get_json()["options"]["model"] == "pplx-decider-latest"  # claims keep their default


def test_ndjson_intake_takes_options_from_the_query(web: WebEnv, caller: Caller) -> None:
    resp = web.client.post(
        "/v1/jobs?kind=quote&model=pplx-decider-v1.2&budget_usd=0.5",
        data=ndjson(QUESTIONS),
        headers=caller.ndjson_headers(),
    )
    assert resp.status_code == 202, resp.get_json()
    assert resp.get_json()["options"] == {
        "model": "pplx-decider-v1.2",
        "budget_usd": 0.5,
        "priority": "batch",
        "pack_size": 1,
    }


@pytest.mark.parametrize(
    ("items", "field", "needle"),
    [
        ([QUESTIONS[0], {"id": "b"}], "items[1].question", "is required"),
        ([{"id": "a", "question": "  "}], "items[0].question", "must not be empty"),
        ([{"id": "a", "question": "é" * 1001}], "items[0].question", "2,002 bytes"),
        ([{"id": "x" * 161, "question": "q"}], "items[0].id", "over the limit of 160"),
        ([QUESTIONS[0], QUESTIONS[0]], "items[1].id", "duplicate id"),
        ([{"id": "a", "question": "q", "claim": "c"}], "items[0].claim", "unknown field"),
        ([], "items", "no questions"),
    ],
)
def test_bad_question_rows_are_400_and_store_nothing(
    web: WebEnv, caller: Caller, items: list[Any], field: str, needle: str
) -> None:
    before = web.table_counts()
    err = error_of(post(web, caller, {"kind": "answer", "items": items}))
    assert err["field"] == field and needle in err["message"]
    assert web.table_counts() == before


def test_ndjson_errors_name_every_bad_line(web: WebEnv, caller: Caller) -> None:
    body = b'{"id": "a", "question": "ok"}\n\n{"id": "b"}\nnot json\n'
    before = web.table_counts()
    err = error_of(web.client.post("/v1/jobs?kind=answer", data=body, headers=caller.ndjson_headers()))
    assert [e["line"] for e in err["errors"]] == [3, 4]
    assert err["line"] == 3
    assert web.table_counts() == before


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"mode": "grounded"}, "options.mode"),
        ({"model": "gpt"}, "options.model"),
        ({"budget_usd": -1}, "options.budget_usd"),
    ],
)
def test_bad_options_are_400(web: WebEnv, caller: Caller, options: dict[str, Any], field: str) -> None:
    err = error_of(post(web, caller, {"kind": "quote", "items": QUESTIONS, "options": options}))
    assert err["field"] == field


# --- the answer stage machine --------------------------------------------------------------------------


def test_answer_stages_report_retry_and_export(web: WebEnv, caller: Caller) -> None:
    job_id = post(web, caller, {"kind": "answer", "items": QUESTIONS[:1]}).get_json()["id"]
    (question,) = items_of(web, job_id)
    specs = sentence_specs(ANSWER, RESULTS)
    output = {
        "kind": "answer",
        "started_at": "2026-01-01T00:00:00+00:00",
        "agent": {"text": ANSWER, "results": RESULTS, "request_id": "agent-1", "request_ids": ["agent-1"]},
        "sentences": specs,
        "request_id": "agent-1",
        "request_ids": ["agent-1"],
    }
    step = settle(web, question.id, output, request_id="agent-1")
    # The sentences exist the moment the question is done, pending: the scheduler sends them, to the
    # Decisions scope, while the question itself went to the Agent scope.
    assert question.endpoint == "agent"
    assert step is not None and len(step.spawned) == 2 and not step.reported
    children = [i for i in items_of(web, job_id) if i.parent_id == question.id]
    assert [(c.stage, c.custom_id, c.status) for c in children] == [
        ("sentence", "q1:s1", "pending"),
        ("sentence", "q1:s2", "pending"),
    ]
    assert all(c.enqueued_at is None and c.endpoint == "decisions" for c in children)
    assert children[0].input["passages"] == {"1": RESULTS[0]["snippet"]}
    assert not finalize(web, job_id)

    # s1 supported, s2 weak → one investigation for s2.
    settle(web, children[0].id, sentence_output(specs[0], 0.9, "d-1"), request_id="d-1")
    settle(web, children[1].id, sentence_output(specs[1], 0.5, "d-2"), request_id="d-2")
    with web.sessions() as s:
        assert stalled_questions(s, uuid.UUID(job_id)) == [question.id]
        assert not questions_ready(s, uuid.UUID(job_id))
    step = advance(web, question.id)
    assert len(step.spawned) == 1 and not step.reported
    assert advance(web, question.id).spawned == []  # idempotent: nothing new while it runs
    (investigation,) = [i for i in items_of(web, job_id) if i.stage == "investigation"]
    assert investigation.custom_id == "q1:i2" and investigation.input["claim"] == specs[1]["claim"]

    # The investigation fails: the report is still built, the weak sentence stays, the job completes, and
    # the question is incomplete (not "done"): the step that failed is named.
    settle(
        web,
        investigation.id,
        {"request_ids": ["agent-2"]},
        error="Agent API failed: 503",
        request_id="agent-2",
    )
    step = advance(web, question.id)
    assert step.reported and finalize(web, job_id)
    report = report_of(web, job_id, "q1")
    assert report["status"] == "incomplete" and report["errors"] == [
        "investigation of sentence 2 failed: Agent API failed: 503"
    ]
    (missing,) = report["incomplete_steps"]
    assert (missing["step"], missing["sentence"], missing["status"]) == ("investigate", 2, "failed")
    assert missing["error"] == "Agent API failed: 503" and missing["request_ids"] == ["agent-2"]
    final = report["final"]["sentences"]
    assert [(s["label"], s["outcome"], bool(s["investigation_error"])) for s in final] == [
        ("supported", None, False),
        ("weak", None, True),
    ]
    assert report["summary"]["failed_investigations"] == 1 and report["summary"]["replaced"] == 0
    evidence = report["evidence"]
    assert [r["request_id"] for r in evidence] == ["d-1", "d-2"]
    assert evidence[1]["investigation"]["status"] == "failed"
    assert evidence[0]["passages"][0] == {
        "id": "1",
        "text": RESULTS[0]["snippet"],
        "url": RESULTS[0]["url"],
        "title": "A",
        "supports": 0.9,
        "contradicts": 0.01,
    }
    job = web.job(job_id)
    assert job.status == "completed" and job.summary is not None
    assert job.summary["outcomes"] == {"done": 0, "failed": 0, "skipped": 0, "incomplete": 1}
    assert job.summary["incomplete_steps"] == {"investigate": 1}
    assert job.summary["totals"]["failed_investigations"] == 1
    (line,) = results(web, caller, job_id)
    assert line["outcome"] == "incomplete" and line["final_answer"] is None
    assert line["partial_answer"] == "The bridge was built by Ada. [1] The bridge opened in 1890. [2]"

    # Retry: the failed investigation runs again; its report is stale until rebuilt from the new result.
    resp = web.client.post(f"/v1/jobs/{job_id}/retry", headers=caller.headers)
    assert resp.status_code == 202 and resp.get_json()["retried"] == 1
    rewrite_text = "The bridge opened to traffic in 1890 [2]."
    rewrite_spec = sentence_specs(rewrite_text, RESULTS)[0]
    rewrite = {
        "agent": {
            "text": rewrite_text,
            "results": RESULTS,
            "request_id": "agent-3",
            "request_ids": ["agent-3"],
        },
        "sentences": [
            {**rewrite_spec, **sentence_output(rewrite_spec, 0.95, "d-3"), "status": "done", "error": None}
        ],
        "request_ids": ["agent-3", "d-3"],
    }
    settle(web, investigation.id, rewrite, request_id="agent-3")
    with web.sessions() as s:
        assert stalled_questions(s, uuid.UUID(job_id)) == [question.id]
    assert not finalize(web, job_id)  # the old report no longer matches its children
    assert advance(web, question.id).reported and finalize(web, job_id)
    report = report_of(web, job_id, "q1")
    assert report["status"] == "done" and report["errors"] == [] and report["incomplete_steps"] == []
    assert (web.job(job_id).summary or {})["outcomes"]["done"] == 1
    assert [(s["text"], s["replaced"], s["outcome"]) for s in report["final"]["sentences"]] == [
        ("The bridge was built by Ada.", False, None),
        ("The bridge opened to traffic in 1890.", True, "replaced"),
    ]
    assert [r["role"] for r in report["evidence"]] == ["original", "original", "rewrite"]
    assert report["evidence"][1]["outcome"] == "replaced" and report["evidence"][2]["used"] is True

    lines = results(web, caller, job_id)
    assert len(lines) == 1
    assert (
        lines[0]["final_answer"]
        == "The bridge was built by Ada. [1] The bridge opened to traffic in 1890. [2]"
    )
    assert lines[0]["request_ids"]["agent"] == ["agent-1", "agent-3"]


def test_a_failed_sentence_stops_the_answer_and_every_export_says_incomplete(
    web: WebEnv, caller: Caller
) -> None:
    job_id = post(
        web, caller, {"kind": "answer", "items": QUESTIONS[:1], "options": {"model": "pplx-decider-latest"}}
    ).get_json()["id"]
    (question,) = items_of(web, job_id)
    specs = sentence_specs(ANSWER, RESULTS)
    output = {
        "kind": "answer",
        "agent": {"text": ANSWER, "results": RESULTS, "request_id": "agent-1", "request_ids": ["agent-1"]},
        "sentences": specs,
        "request_ids": ["agent-1"],
    }
    first, second = settle(web, question.id, output, request_id="agent-1").spawned  # type: ignore[union-attr]
    # s1 is weak (it would be investigated); s2's scoring fails.
    settle(web, first, sentence_output(specs[0], 0.5, "d-1"), request_id="d-1")
    settle(web, second, {"request_ids": ["d-2"]}, error="Decisions API failed: 503", request_id="d-2")
    step = advance(web, question.id)
    assert step.reported and step.spawned == []  # no investigation: the run stops at the failed step
    assert [i.stage for i in items_of(web, job_id)] == ["question", "sentence", "sentence"]
    assert finalize(web, job_id)

    report = report_of(web, job_id, "q1")
    assert report["status"] == "incomplete"
    assert [(m["step"], m.get("sentence"), m["status"]) for m in report["incomplete_steps"]] == [
        ("score", 2, "failed"),
        ("review", None, "not_started"),
    ]
    assert report["incomplete_steps"][0]["request_ids"] == ["d-2"]
    assert [s["label"] for s in report["final"]["sentences"]] == ["weak", None]
    assert "this job used pplx-decider-latest" in report["model_note"]

    (line,) = results(web, caller, job_id)
    assert line["outcome"] == "incomplete" and line["final_answer"] is None
    assert line["partial_answer"] == "The bridge was built by Ada. [1] The bridge opened in 1890. [2]"
    assert [m["step"] for m in line["incomplete_steps"]] == ["score", "review"]
    assert line["model_note"] == report["model_note"]
    (row,) = csv_rows(web, caller, job_id)
    assert row["outcome"] == "incomplete" and row["final_answer"] == ""
    assert row["incomplete_steps"].startswith(
        "sentence 2 was not scored (failed: Decisions API failed: 503); "
    )
    assert row["partial_answer"] == line["partial_answer"] and row["model_note"] == report["model_note"]
    summary = web.job(job_id).summary or {}
    assert summary["outcomes"] == {"done": 0, "failed": 0, "skipped": 0, "incomplete": 1}
    assert summary["incomplete_steps"] == {"score": 1, "review": 1}


def test_failed_question_gets_a_failed_report_and_the_job_still_completes(
    web: WebEnv, caller: Caller
) -> None:
    job_id = post(web, caller, {"kind": "answer", "items": QUESTIONS}).get_json()["id"]
    q1, q2 = items_of(web, job_id)
    step = settle(
        web, q1.id, {"request_ids": ["agent-x"]}, error="Agent API failed: 400 bad", request_id="agent-x"
    )
    assert step is not None and step.reported and not step.spawned
    assert not finalize(web, job_id)  # q2 has not run
    settle(web, q2.id, {"kind": "answer", "agent": {"text": "", "results": []}, "sentences": []})
    assert finalize(web, job_id)
    report = report_of(web, job_id, "q1")
    assert report["status"] == "failed" and report["error"] == "Agent API failed: 400 bad"
    assert report["request_ids"]["agent"] == ["agent-x"]
    summary = web.job(job_id).summary or {}
    assert summary["outcomes"] == {"done": 1, "failed": 1, "skipped": 0, "incomplete": 0}


# --- the quote stage machine ---------------------------------------------------------------------------


def rank_output(source: quotes.SourceResult, best: int, has_answer: float, request_id: str) -> dict[str, Any]:
    n = len(source.sentences)
    probabilities = {str(k): (0.9 if k == best else 0.1 / max(1, n - 1)) for k in range(1, n + 1)}
    answers = {
        quotes.BEST_QUESTION: {
            "type": "choice",
            "choice": str(best),
            "probabilities": probabilities,
            "confidence": 0.8,
        },
        quotes.HAS_ANSWER_QUESTION: {"type": "noul", "noul": has_answer},
    }
    candidate = quotes.parse_rank_answers(source, answers, request_id=request_id)
    return {
        "answers": answers,
        "candidate": candidate.as_dict(),
        "request_id": request_id,
        "request_ids": [request_id],
        "input_tokens": 50,
    }


SEARCH = [
    {
        "title": "Bones",
        "url": "https://x.example/bones",
        "snippet": "An adult human body typically has 206 bones. Babies have more.",
        "date": "2024-05-01",
    },
    {"title": "Short", "url": "https://x.example/short", "snippet": "Too short.", "date": None},
    {
        "title": "Skeleton",
        "url": "https://x.example/skeleton",
        "snippet": "The skeleton supports the body and protects organs.",
        "date": None,
    },
]


def quote_question_output() -> dict[str, Any]:
    prepared = quotes.prepare_results(SEARCH)
    return {
        "kind": "quote",
        "started_at": "2026-01-01T00:00:00+00:00",
        "search": {"request_id": "s-1", "request_ids": ["s-1"], "results": [r.as_dict() for r in prepared]},
        "request_id": "s-1",
        "request_ids": ["s-1"],
    }


@pytest.mark.parametrize(("has_answer", "expected"), [(0.95, "quoted"), (0.1, "no_answer")])
def test_quote_stages_and_report(web: WebEnv, caller: Caller, has_answer: float, expected: str) -> None:
    job_id = post(web, caller, {"kind": "quote", "items": QUESTIONS[:1]}).get_json()["id"]
    (question,) = items_of(web, job_id)
    step = settle(web, question.id, quote_question_output(), request_id="s-1")
    # One rank item per result with a usable sentence: "Too short." has none.
    assert step is not None and len(step.spawned) == 2
    results = [i for i in items_of(web, job_id) if i.stage == "result"]
    assert [r.custom_id for r in results] == ["q1:r1", "q1:r3"]
    sources = [quotes.SourceResult.from_dict(r.input["result"]) for r in results]
    settle(web, results[0].id, rank_output(sources[0], 1, has_answer, "r-1"), request_id="r-1")
    settle(web, results[1].id, rank_output(sources[1], 1, 0.05, "r-3"), request_id="r-3")
    step = advance(web, question.id)
    if expected == "quoted":
        assert len(step.spawned) == 1 and not finalize(web, job_id)
        (compare,) = [i for i in items_of(web, job_id) if i.stage == "compare"]
        assert [c["result_index"] for c in compare.input["candidates"]] == [1]
        settle(
            web,
            compare.id,
            {
                "answers": {"answers_1": {"type": "noul", "noul": 0.97}},
                "probabilities": [0.97],
                "request_id": "c-1",
                "request_ids": ["c-1"],
                "input_tokens": 30,
            },
            request_id="c-1",
        )
        step = advance(web, question.id)
    assert step.reported and finalize(web, job_id)
    report = report_of(web, job_id, "q1")
    assert report["status"] == expected
    assert [r["status"] for r in report["results"]] == ["done", "not_ranked", "done"]
    assert report["results"][0]["best"] == {
        "number": 1,
        "text": "An adult human body typically has 206 bones.",
    }
    if expected == "quoted":
        assert report["quote"]["text"] == "An adult human body typically has 206 bones."
        assert report["quote"]["p_answers"] == 0.97 and report["quote"]["compare_request_id"] == "c-1"
        assert report["quote"]["date"] == "2024-05-01"
        assert report["compare"]["candidates"][0]["rank"] == 1
        assert report["request_ids"] == ["s-1", "r-1", "r-3", "c-1"]
        assert report["run"]["totals"]["decisions_requests"] == 3
    else:
        assert report["quote"] is None and report["compare"] is None
        assert report["closest"]["result_index"] == 1 and report["closest_by"] == "has_answer"
        assert report["run"]["compare"] == [] and report["run"]["totals"]["decisions_requests"] == 2
    summary = web.job(job_id).summary or {}
    assert summary["outcomes"][expected] == 1 and summary["totals"]["search_requests"] == 1


def test_a_failed_rank_stops_the_quote_and_every_export_says_incomplete(web: WebEnv, caller: Caller) -> None:
    job_id = post(web, caller, {"kind": "quote", "items": QUESTIONS[:1]}).get_json()["id"]
    (question,) = items_of(web, job_id)
    settle(web, question.id, quote_question_output(), request_id="s-1")
    results_ = [i for i in items_of(web, job_id) if i.stage == "result"]
    source = quotes.SourceResult.from_dict(results_[0].input["result"])
    # Result 1 holds the answer (has_answer 0.95); result 3's rank request fails.
    settle(web, results_[0].id, rank_output(source, 1, 0.95, "r-1"), request_id="r-1")
    settle(web, results_[1].id, {"request_ids": ["r-3"]}, error="Decisions API failed: 500", request_id="r-3")
    step = advance(web, question.id)
    assert step.reported and step.spawned == []  # no compare over part of the results
    assert not [i for i in items_of(web, job_id) if i.stage == "compare"]
    assert finalize(web, job_id)

    report = report_of(web, job_id, "q1")
    assert report["status"] == "incomplete" and report["quote"] is None and report["closest"] is None
    rank, compare = report["incomplete_steps"]
    assert (rank["step"], rank["result"], rank["status"], rank["request_ids"]) == (
        "rank",
        3,
        "failed",
        ["r-3"],
    )
    assert rank["error"] == "Decisions API failed: 500"
    assert (compare["step"], compare["status"]) == ("compare", "not_started")
    assert report["results"][0]["best"]["text"] == "An adult human body typically has 206 bones."  # so far
    assert report["model_note"] is None  # the default model is the one the cutoffs were measured on

    (line,) = results(web, caller, job_id)
    assert line["outcome"] == "incomplete" and line["quote"] is None and line["closest"] is None
    assert [(m["step"], m.get("result")) for m in line["incomplete_steps"]] == [
        ("rank", 3),
        ("compare", None),
    ]
    (row,) = csv_rows(web, caller, job_id)
    assert row["outcome"] == "incomplete" and row["quote"] == "" and row["closest"] == ""
    assert row["incomplete_steps"] == (
        "the rank request of result 3 did not finish (failed: Decisions API failed: 500); "
        "no compare request was sent, because not every result was ranked"
    )
    summary = web.job(job_id).summary or {}
    assert summary["outcomes"] == {"quoted": 0, "no_answer": 0, "failed": 0, "skipped": 0, "incomplete": 1}
    assert summary["incomplete_steps"] == {"rank": 1, "compare": 1}


def test_cancel_mid_question_builds_an_incomplete_report_and_cancels(web: WebEnv, caller: Caller) -> None:
    job_id = post(web, caller, {"kind": "answer", "items": QUESTIONS[:1]}).get_json()["id"]
    (question,) = items_of(web, job_id)
    output = {
        "kind": "answer",
        "agent": {"text": ANSWER, "results": RESULTS},
        "sentences": sentence_specs(ANSWER, RESULTS),
    }
    first, _second = settle(web, question.id, output).spawned  # type: ignore[union-attr]
    settle(web, first, sentence_output(output["sentences"][0], 0.9, "d-1"), request_id="d-1")
    assert web.client.post(f"/v1/jobs/{job_id}/cancel", headers=caller.headers).status_code == 200
    # Every item is terminal now, but the question has no report yet: the job waits for it.
    assert not finalize(web, job_id)
    with web.sessions() as s:
        assert stalled_questions(s, uuid.UUID(job_id)) == [question.id]
    step = advance(web, question.id)
    assert step.reported and not step.spawned  # a cancelling job creates no new work
    assert finalize(web, job_id) and web.job(job_id).status == "cancelled"
    report = report_of(web, job_id, "q1")
    assert report["status"] == "incomplete"
    assert [r["status"] for r in report["evidence"]] == ["done", "skipped"]
    assert [s["label"] for s in report["final"]["sentences"]] == ["supported", None]
    # The cancel is one of the missing steps, next to the sentence it left unscored.
    assert [(m["step"], m["status"]) for m in report["incomplete_steps"]] == [
        ("score", "skipped"),
        ("review", "not_started"),
        ("cancelled", "cancelled"),
    ]


def test_csv_export_of_question_jobs_has_one_row_per_question(web: Any, caller: Any) -> None:
    resp = web.client.post(
        "/v1/jobs",
        json={"kind": "quote", "items": [{"id": "q1", "question": "How deep is the Mariana Trench?"}]},
        headers=caller.headers,
    )
    assert resp.status_code == 202
    csv_resp = web.client.get(f"/v1/jobs/{resp.get_json()['id']}/results?format=csv", headers=caller.headers)
    assert csv_resp.status_code == 200 and csv_resp.mimetype == "text/csv"
    lines = csv_resp.get_data(as_text=True).splitlines()
    assert lines[0].startswith("custom_id,") and len(lines) == 3 and lines[1].startswith("q1,")
    assert lines[2] == "#end,1"
