"""Quote jobs through the real queue: Postgres, Redis, a `celery worker` subprocess, the simulator over HTTP.

The ten reference questions (tests/data/reference_questions.json, docs/spec.md §7) run on the simulator's
corpus, which reproduces them as simulator/README.md records: the six answerable ones get a quote holding
the answer, the four unanswerable ones get "no result answers" (closest below the cutoff).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from checks import quotes
from checks.kinds.quote import QuoteResult
from jobs.stages import iter_question_reports, iter_question_results
from models import ApiCall, Item, Job
from simulator.config import SimConfig
from simulator.engine import Engine as SimEngine
from simulator.server import run_in_thread
from tests.integration.stack import Stack, fresh_database, running_stack
from tests.reference import answerable_quotes, unanswerable_quotes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ANSWERABLE = answerable_quotes()  # question -> strings one of which the quote must contain
UNANSWERABLE = unanswerable_quotes()


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
        run_in_thread(SimConfig(decisions_rps=0)) as sim,
        running_stack(pg_url, pg_engine, sim.base_url, tmp_path) as st,
    ):
        yield st


def test_reference_questions_quote_or_say_no_result_answers(stack: Stack) -> None:
    questions = [*ANSWERABLE, *UNANSWERABLE]
    rows = [{"id": f"q{n}", "question": q} for n, q in enumerate(questions, start=1)]
    stack.start_worker()
    job_id = stack.submit_quote(rows)
    job = stack.wait_job(job_id, timeout=180)
    assert job.status == "completed", job.error
    summary = job.summary or {}
    assert summary["kind"] == "quote" and summary["questions"] == 10
    assert summary["outcomes"]["quoted"] == 6 and summary["outcomes"]["no_answer"] == 4
    assert summary["totals"]["search_requests"] == 10
    assert summary["totals"]["failed_requests"] == 0

    items = _items(stack.engine, job_id)
    assert {i.status for i in items} == {"done"}
    calls = _calls(stack.engine, job_id)
    assert {c.item_id for c in calls} == {i.id for i in items}
    by_request = {c.request_id: c for c in calls if c.request_id}
    assert sum(1 for c in calls if c.endpoint == "search") == 10
    # Sent and answered from the verdict store (an earlier job of the tenant's), each counted apart (§10).
    decisions = [c for c in calls if c.endpoint == "decisions"]
    assert sum(1 for c in decisions if not c.reused) == summary["totals"]["decisions_requests"]
    assert sum(1 for c in decisions if c.reused) == summary["totals"]["reused_requests"]

    reports = _reports(stack.engine, job)
    for n, question in enumerate(questions, start=1):
        report = reports[f"q{n}"]["report"]
        assert report["question"] == question
        run = report["run"]
        # The run record holds every result, its sentences, every probability and every request id.
        assert run["totals"]["decisions_requests"] <= quotes.MAX_DECISIONS_REQUESTS
        assert len(run["search"]["results"]) == len(report["results"]) == quotes.SEARCH_MAX_RESULTS
        assert set(report["request_ids"]) <= set(by_request)
        assert by_request[report["search"]["request_id"]].endpoint == "search"
        for row in report["results"]:
            if row["status"] == "done":
                assert by_request[row["request_id"]].endpoint == "decisions"
                assert row["best"]["text"] in row["sentences"]
                assert 0.0 <= row["has_answer"] <= 1.0
                assert row["compared"] == (row["has_answer"] >= quotes.COMPARE_MIN)
            else:
                assert row["status"] == "not_ranked" and row["sentence_count"] == 0
        if question in ANSWERABLE:
            assert report["status"] == "quoted"
            quote = report["quote"]
            assert any(answer in quote["text"] for answer in ANSWERABLE[question]), quote["text"]
            assert quote["p_answers"] >= quotes.QUOTE_MIN
            # Printed exactly as returned: the quote is a sentence of that result's snippet.
            source = next(r for r in run["search"]["results"] if r["index"] == quote["result_index"])
            assert quote["text"] in source["snippet"] and quote["url"] == source["url"]
            assert quote["compare_request_id"] == report["compare"]["request_id"]
            ranks = [c["rank"] for c in report["compare"]["candidates"]]
            assert sorted(ranks) == list(range(1, len(ranks) + 1))
        else:
            assert report["status"] == "no_answer" and report["quote"] is None
            closest = report["closest"]
            if closest is not None and closest["p_answers"] is not None:
                assert closest["p_answers"] < quotes.QUOTE_MIN

    with Session(stack.engine) as s:
        lines = [line for line in iter_question_results(s, job) if isinstance(line, QuoteResult)]
    assert [line.outcome for line in lines] == ["quoted"] * 6 + ["no_answer"] * 4
    assert all(line.quote is not None and line.quote["url"] for line in lines[:6])


@dataclass
class RankFaults:
    """Wraps the simulator engine: rank requests for one URL answer with a choice that was not offered
    (a malformed 200 the client refuses without retrying); Search fails for one question."""

    inner: SimEngine
    bad_rank_url: str | None = None
    no_search_for: str | None = None

    def decide(self, body: dict[str, Any]) -> Any:
        outcome = self.inner.decide(body)
        state = body.get("state")
        source = state.get("source") if isinstance(state, dict) else None
        if isinstance(source, dict) and source.get("url") == self.bad_rank_url:
            answers = {name: dict(a) for name, a in outcome.answers.items()}
            answers[quotes.BEST_QUESTION]["choice"] = "999"
            return type(outcome)(**{**outcome.__dict__, "answers": answers})
        return outcome

    def agent(self, body: dict[str, Any]) -> Any:
        return self.inner.agent(body)

    def search(self, body: dict[str, Any]) -> Any:
        if body.get("query") == self.no_search_for:
            return [{"title": "no url here", "snippet": "x"}]  # a result without `url`: malformed
        return self.inner.search(body)


def test_failed_rank_and_failed_search_keep_the_run_record(
    queue_db: tuple[str, Engine], tmp_path: Path
) -> None:
    pg_url, pg_engine = queue_db
    sim_engine = SimEngine(SimConfig())
    question = "How many bones are in the adult human body?"
    # The second result's rank request fails; the answer is in the first (simulator corpus).
    broken_url = str(sim_engine.search(quotes.search_request(question))[1]["url"])
    faulty = RankFaults(sim_engine, bad_rank_url=broken_url, no_search_for=UNANSWERABLE[0])
    rows = [{"id": "bones", "question": question}, {"id": "bolts", "question": UNANSWERABLE[0]}]
    with (
        run_in_thread(SimConfig(decisions_rps=0), engine=faulty) as sim,
        running_stack(pg_url, pg_engine, sim.base_url, tmp_path) as stack,
    ):
        stack.start_worker()
        job_id = stack.submit_quote(rows)
        job = stack.wait_job(job_id, timeout=120)
    assert job.status == "completed", job.error
    summary = job.summary or {}
    assert summary["outcomes"]["failed"] == 1 and summary["outcomes"]["incomplete"] == 1
    assert summary["totals"]["failed_requests"] == 1
    assert summary["incomplete_steps"] == {"rank": 1, "compare": 1}

    reports = _reports(pg_engine, job)
    bolts = reports["bolts"]
    assert bolts["status"] == "failed" and bolts["report"]["status"] == "failed"
    assert bolts["report"]["run"]["search"]["error"] and bolts["report"]["results"] == []

    report = reports["bones"]["report"]
    failed_rows = [r for r in report["results"] if r["status"] == "failed"]
    assert [r["url"] for r in failed_rows] == [broken_url]
    assert failed_rows[0]["error"] and failed_rows[0]["request_id"]
    assert failed_rows[0]["request_id"] in report["request_ids"]
    failed_rank = [a for a in report["run"]["rank"] if a["status"] == "failed"]
    assert len(failed_rank) == 1 and failed_rank[0]["request_id"] == failed_rows[0]["request_id"]
    assert report["run"]["totals"]["failed_requests"] == 1
    # The run stops at the failed rank, as the reference recipe does: no compare request, nothing quoted,
    # the question is incomplete and names the failed rank; the candidates ranked so far are kept.
    assert report["status"] == "incomplete" and report["quote"] is None and report["closest"] is None
    assert report["compare"] is None and report["run"]["compare"] == []
    rank, compare = report["incomplete_steps"]
    assert (rank["step"], rank["result"], rank["status"]) == ("rank", failed_rows[0]["index"], "failed")
    assert rank["request_ids"] and (compare["step"], compare["status"]) == ("compare", "not_started")
    assert any("206" in (r["best"] or {}).get("text", "") for r in report["results"])
