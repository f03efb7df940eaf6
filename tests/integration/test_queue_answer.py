"""Answer jobs through the real queue: Postgres, Redis, a `celery worker` subprocess, the simulator over HTTP.

The five reference questions (docs/spec.md §7) run on the simulator's corpus, which reproduces them as
simulator/README.md records: 16 sentences (supported, weak, unsupported, uncited), every flagged one
replaced by a supported rewrite. Faults are made by wrapping the simulator's engine (an Agent answer
without search results is a malformed response the client refuses without retrying).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from checks.answers import LABELS
from checks.kinds.answer import AnswerResult
from jobs.stages import iter_question_reports, iter_question_results
from models import ApiCall, Item, Job
from simulator.config import SimConfig
from simulator.engine import AgentOutcome
from simulator.engine import Engine as SimEngine
from simulator.server import run_in_thread
from tests.integration.stack import Stack, fresh_database, running_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUESTIONS = [
    "What did the James Webb Space Telescope discover about exoplanet K2-18b?",
    "Who won the 2024 Nobel Prize in Physics and for what work?",
    "What were the release dates and headline features of Python 3.12 and Python 3.13, and when does each "
    "reach end of life?",
    "What are the current rate limits and pricing for the Perplexity Agent API?",
    "How tall is the Eiffel Tower today, and how much has its height changed since it opened?",
]
ROWS = [{"id": f"q{n}", "question": q} for n, q in enumerate(QUESTIONS, start=1)]
INVESTIGATION_MARK = "did not clearly support this sentence"  # checks.answer_requests, investigation


@dataclass
class AgentFaults:
    """Wraps the simulator engine: Agent answers without search results for chosen prompts."""

    inner: SimEngine
    fail_question: str | None = None  # the first Agent call for this question fails
    fail_investigations_of: str | None = None  # every investigation for this question fails

    def decide(self, body: dict[str, Any]) -> Any:
        return self.inner.decide(body)

    def search(self, body: dict[str, Any]) -> Any:
        return self.inner.search(body)

    def agent(self, body: dict[str, Any]) -> Any:
        outcome = self.inner.agent(body)
        prompt = str(body.get("input"))
        investigating = INVESTIGATION_MARK in prompt
        if (self.fail_question is not None and not investigating and prompt == self.fail_question) or (
            self.fail_investigations_of is not None
            and investigating
            and self.fail_investigations_of in prompt
        ):
            return AgentOutcome(text=outcome.text, results=[], input_tokens=1, output_tokens=1)
        return outcome


def _items(engine: Engine, job_id: object) -> list[Item]:
    with Session(engine) as s:
        return list(s.scalars(select(Item).where(Item.job_id == job_id).order_by(Item.position, Item.id)))


def _reports(engine: Engine, job: Job) -> dict[str, dict[str, Any]]:
    with Session(engine) as s:
        return {entry["custom_id"]: entry for entry in iter_question_reports(s, job)}


def _calls(engine: Engine, job_id: object) -> list[ApiCall]:
    with Session(engine) as s:
        return list(s.scalars(select(ApiCall).where(ApiCall.job_id == job_id)))


@pytest.fixture
def queue_db() -> Iterator[tuple[str, Engine]]:
    """A database of the test's own: the session's database holds the web tests' jobs, which a worker
    started on it would run too (and which would compete for its upstream scope)."""
    with fresh_database() as db:
        yield db


@pytest.fixture
def stack(queue_db: tuple[str, Engine], tmp_path: Path) -> Iterator[Stack]:
    pg_url, pg_engine = queue_db
    with (
        run_in_thread(SimConfig(decisions_rps=0, agent_rps=0)) as sim,
        running_stack(pg_url, pg_engine, sim.base_url, tmp_path) as st,
    ):
        yield st


def _check_report_consistency(report: Mapping[str, Any], calls_by_request: Mapping[str, ApiCall]) -> None:
    """Every scored sentence's request id is a stored call; citations point into the sources list."""
    final = report["final"]
    assert final is not None
    sources = final["sources"]
    assert [s["number"] for s in sources] == list(range(1, len(sources) + 1))
    for sentence in final["sentences"]:
        assert all(1 <= n <= len(sources) for n in sentence["citations"])
    for row in report["evidence"]:
        if row["status"] == "done":
            assert row["label"] in LABELS
            assert row["request_id"] in calls_by_request
            assert calls_by_request[row["request_id"]].endpoint == "decisions"
            for passage in row["passages"]:
                assert isinstance(passage["text"], str) and passage["url"]
                assert 0.0 <= passage["supports"] <= 1.0 and 0.0 <= passage["contradicts"] <= 1.0
    for rid in report["request_ids"]["agent"]:
        assert calls_by_request[rid].endpoint == "agent"


def test_reference_questions_are_answered_checked_and_reviewed(stack: Stack) -> None:
    stack.start_worker()
    job_id = stack.submit_answer(ROWS)
    job = stack.wait_job(job_id, timeout=180)
    assert job.status == "completed", job.error
    summary = job.summary or {}
    assert summary["kind"] == "answer" and summary["questions"] == 5
    assert summary["outcomes"]["done"] == 5
    totals = summary["totals"]
    # The simulator's recorded behaviour (simulator/README.md): 16 sentences, every flagged one replaced.
    assert totals["sentences"] == 16
    assert totals["investigated"] == totals["replaced"] >= 1
    assert totals["not_confirmed"] == totals["not_reviewed"] == 0
    assert totals["failed_sentences"] == totals["failed_investigations"] == 0
    assert {"supported", "weak", "uncited"} <= set(summary["before"])
    assert set(summary["after"]) == {"supported"}
    assert totals["agent_calls"] == 5 + totals["investigated"]

    items = _items(stack.engine, job_id)
    assert {i.status for i in items} == {"done"}
    by_stage: dict[str, list[Item]] = {}
    for item in items:
        by_stage.setdefault(item.stage, []).append(item)
    assert len(by_stage["question"]) == 5 and len(by_stage["sentence"]) == 16
    assert len(by_stage["investigation"]) == totals["investigated"]
    assert all(i.parent_id is not None for i in by_stage["sentence"] + by_stage["investigation"])
    # One Decisions request per scored sentence, originals and rewrites; one Agent call per question
    # and per investigation. Every attempt is a row of the item that made it.
    calls = _calls(stack.engine, job_id)
    assert sum(1 for c in calls if c.endpoint == "agent") == totals["agent_calls"]
    # Sent and answered from the verdict store (an earlier job of the tenant's), each counted apart (§10).
    decisions = [c for c in calls if c.endpoint == "decisions"]
    assert sum(1 for c in decisions if not c.reused) == totals["decisions_requests"]
    assert sum(1 for c in decisions if c.reused) == totals["reused_requests"]
    assert {c.item_id for c in calls} == {i.id for i in items}
    calls_by_request = {c.request_id: c for c in calls if c.request_id}

    reports = _reports(stack.engine, job)
    assert list(reports) == ["q1", "q2", "q3", "q4", "q5"]
    for entry in reports.values():
        report = entry["report"]
        assert report["status"] == "done" and report["errors"] == []
        _check_report_consistency(report, calls_by_request)
        originals = [r for r in report["evidence"] if r["role"] == "original"]
        rewrites = [r for r in report["evidence"] if r["role"] == "rewrite"]
        assert len(originals) == report["summary"]["sentences"]
        counts = report["summary"]
        assert len(originals) + len(rewrites) == counts["decisions_requests"] + counts["reused_requests"]
        for row in originals:
            flagged = row["label"] in ("weak", "unsupported", "contradicted", "uncited")
            assert (row["investigation"] is not None) == flagged
            assert row["outcome"] == ("replaced" if flagged else None)
        # A replaced sentence is gone from the final answer; its supported rewrite sentences stand in.
        final = report["final"]["sentences"]
        assert all(s["label"] == "supported" for s in final)
        used = [r for r in rewrites if r["used"]]
        assert len(used) == sum(1 for s in final if s["replaced"])
    # Some answers hold up whole (nothing investigated), as on the real API.
    assert any(e["report"]["summary"]["investigated"] == 0 for e in reports.values())

    with Session(stack.engine) as s:
        lines = [line for line in iter_question_results(s, job) if isinstance(line, AnswerResult)]
    assert [line.custom_id for line in lines] == ["q1", "q2", "q3", "q4", "q5"]
    assert all(line.outcome == "done" and line.final_answer for line in lines)
    assert all("[1]" in (line.final_answer or "") for line in lines)


def test_failed_investigation_and_failed_question_leave_the_rest_reported(
    queue_db: tuple[str, Engine], tmp_path: Path
) -> None:
    pg_url, pg_engine = queue_db
    engine = AgentFaults(
        SimEngine(SimConfig()), fail_question=QUESTIONS[0], fail_investigations_of=QUESTIONS[1]
    )
    with (
        run_in_thread(SimConfig(decisions_rps=0, agent_rps=0), engine=engine) as sim,
        running_stack(pg_url, pg_engine, sim.base_url, tmp_path) as stack,
    ):
        stack.start_worker()
        job_id = stack.submit_answer(ROWS[:3])
        job = stack.wait_job(job_id, timeout=180)
    assert job.status == "completed", job.error
    summary = job.summary or {}
    assert summary["outcomes"] == {"done": 1, "failed": 1, "skipped": 0, "incomplete": 1}
    assert summary["totals"]["failed_investigations"] >= 1
    assert summary["incomplete_steps"] == {"investigate": summary["totals"]["failed_investigations"]}

    reports = _reports(pg_engine, job)
    failed = reports["q1"]
    assert failed["status"] == "failed"
    assert failed["report"]["status"] == "failed" and failed["report"]["final"] is None
    assert "search" in failed["report"]["error"].lower()  # "answered without searching"

    # q2's investigations failed: it is incomplete, not done; its sentences keep their labels, the report
    # names every failed investigation, all else is stored.
    report = reports["q2"]["report"]
    assert report["status"] == "incomplete"
    assert report["errors"] and all("investigation" in e for e in report["errors"])
    flagged = [r for r in report["evidence"] if r["role"] == "original" and r["investigation"] is not None]
    assert flagged
    assert [(m["step"], m["sentence"], m["status"]) for m in report["incomplete_steps"]] == [
        ("investigate", row["number"], "failed") for row in flagged
    ]
    for row in flagged:
        assert row["investigation"]["status"] == "failed" and row["investigation"]["error"]
        assert row["investigation"]["request_id"] is None or row["investigation"]["request_ids"]
        assert row["outcome"] is None
    kept = [s for s in report["final"]["sentences"] if s["investigation_error"]]
    assert len(kept) == len(flagged) and all(s["label"] != "supported" for s in kept)
    assert not any(r["role"] == "rewrite" for r in report["evidence"])
    # The failed Agent attempts are stored as api_calls of the investigation items.
    calls = _calls(pg_engine, job_id)
    investigation_ids = {i.id for i in _items(pg_engine, job_id) if i.stage == "investigation"}
    assert any(c.item_id in investigation_ids and c.error for c in calls)

    # q3 is untouched by either fault.
    assert reports["q3"]["report"]["status"] == "done" and reports["q3"]["report"]["errors"] == []
    assert reports["q3"]["report"]["summary"]["replaced"] >= 1


def test_redis_flushed_mid_job_every_question_still_gets_its_report(
    queue_db: tuple[str, Engine], tmp_path: Path
) -> None:
    pg_url, pg_engine = queue_db
    # Latency keeps children in flight while Redis (queue, chord counters) is flushed.
    with (
        run_in_thread(SimConfig(decisions_rps=0, agent_rps=0, latency_s=0.3)) as sim,
        running_stack(pg_url, pg_engine, sim.base_url, tmp_path, FACTGATE_LEASE_S="4") as stack,
    ):
        stack.start_worker(concurrency=4)
        job_id = stack.submit_answer(ROWS)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(i.stage == "sentence" and i.status == "done" for i in _items(stack.engine, job_id)):
                break
            time.sleep(0.05)
        stack.redis().flushdb()
        job = stack.wait_job(job_id, timeout=240)
    assert job.status == "completed", job.error
    summary = job.summary or {}
    assert summary["outcomes"]["done"] == 5
    assert summary["totals"]["sentences"] == 16
    items = _items(pg_engine, job_id)
    assert {i.status for i in items} == {"done"}
    reports = _reports(pg_engine, job)
    assert all(e["report"] and e["report"]["status"] == "done" for e in reports.values())
    # Each child exists once: nothing was spawned twice by the recovering sweeper.
    custom_ids = [(i.custom_id, i.mode) for i in items]
    assert len(custom_ids) == len(set(custom_ids))
