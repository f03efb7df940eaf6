"""Claims jobs through the real queue: Postgres, Redis, `celery worker` subprocesses, the simulator over HTTP.

The tests that use `stack` share one simulator (no faults, no limit), database and worker for the module,
each submitting as a tenant of its own; the others own their simulator (its faults and limits), database and
workers, and Redis is flushed around each. Nothing here is eager.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from models import ApiCall, Item
from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.stack import SharedStack, Stack, fresh_database, running_stack, shared_stack
from tests.reference import reference_claims

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def reference() -> list[dict[str, object]]:
    return reference_claims()


def _items(engine: Engine, job_id: object) -> list[Item]:
    with Session(engine) as s:
        return list(s.scalars(select(Item).where(Item.job_id == job_id).order_by(Item.position)))


def _calls_per_item(engine: Engine, job_id: object) -> dict[int, int]:
    with Session(engine) as s:
        rows = s.execute(
            select(ApiCall.item_id, func.count()).where(ApiCall.job_id == job_id).group_by(ApiCall.item_id)
        ).all()
    return {int(i): int(n) for i, n in rows}


@pytest.fixture
def queue_db() -> Iterator[tuple[str, Engine]]:
    """A fresh database per test, so no other test's jobs reach this test's workers."""
    with fresh_database() as db:
        yield db


@pytest.fixture(scope="module")
def _module_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStack]:
    with (
        run_in_thread(SimConfig(decisions_rps=0)) as sim,
        shared_stack(sim.base_url, tmp_path_factory.mktemp("claims-stack")) as st,
    ):
        yield st


@pytest.fixture
def stack(_module_stack: SharedStack, request: pytest.FixtureRequest) -> Stack:
    """The module's stack (one worker: these tests have the same settings), as a tenant of the test's own."""
    return _module_stack.for_test(request.node.name)


def test_reference_claims_both_modes_scorecards(stack: Stack, reference: list[dict[str, object]]) -> None:
    stack.start_worker()
    job_id = stack.submit_claims(reference, {"mode": "both"})
    job = stack.wait_job(job_id)
    assert job.status == "completed", job.error
    summary = job.summary or {}
    grounded = summary["scorecards"]["grounded"]
    ungrounded = summary["scorecards"]["ungrounded"]
    assert grounded["n"] == 24 and grounded["correct"] == 24
    assert grounded["acceptance"] is True
    assert ungrounded["acceptance"] is False  # recent claims are past the model's knowledge
    assert summary["request_counts"]["completed"] == 48
    assert summary["outside_query"] == 0
    items = _items(stack.engine, job_id)
    assert {i.status for i in items} == {"done"}
    assert all(i.output and i.output.get("request_id") for i in items)
    # Every upstream attempt is recorded with its request id.
    calls = _calls_per_item(stack.engine, job_id)
    assert set(calls) == {i.id for i in items}
    assert job.usage and job.usage["searches"] >= 24
    # Outcomes live in the database: the result backend stored none (chords joined on their counters).
    assert list(stack.redis().scan_iter("celery-task-meta-*")) == []


def test_window_chords_finish_a_job_without_the_sweeper(
    queue_db: tuple[str, Engine], tmp_path: Path, reference: list[dict[str, object]]
) -> None:
    """The last window's chord body finalizes the job: with no beat running, nothing else would."""
    url, engine = queue_db
    with (
        run_in_thread(SimConfig(decisions_rps=0)) as sim,
        running_stack(url, engine, sim.base_url, tmp_path, FACTGATE_SWEEP_INTERVAL_S="3600") as stack,
    ):
        stack.start_worker(beat=False)
        job = stack.wait_job(stack.submit_claims(reference, {"mode": "both"}), timeout=90)
        assert job.status == "completed"
        assert (job.summary or {})["request_counts"]["completed"] == 48  # windows of 10: five chords


@pytest.mark.parametrize("mode", ["ungrounded", "grounded"])
def test_single_mode_jobs(stack: Stack, reference: list[dict[str, object]], mode: str) -> None:
    stack.start_worker()
    job = stack.wait_job(stack.submit_claims(reference, {"mode": mode}))
    assert job.status == "completed"
    assert list((job.summary or {})["scorecards"]) == [mode]
    assert (job.summary or {})["scorecards"][mode]["n"] == 24


def test_duplicate_claims_sent_once(stack: Stack) -> None:
    rows = [{"id": f"c{i}", "claim": "Rust 1.0 was released in May 2015.", "label": True} for i in range(5)]
    stack.start_worker()
    job_id = stack.submit_claims(rows, {"mode": "ungrounded"})
    job = stack.wait_job(job_id)
    assert job.status == "completed"
    items = _items(stack.engine, job_id)
    assert [i.status for i in items] == ["done"] * 5
    assert len({i.output["p"] for i in items if i.output}) == 1
    assert sum(_calls_per_item(stack.engine, job_id).values()) == 1  # one upstream request for five items


def test_same_item_delivered_twice_stores_one_result(
    stack: Stack, reference: list[dict[str, object]]
) -> None:
    from workers.app import make_celery

    stack.start_worker()
    job_id = stack.submit_claims(reference[:3], {"mode": "ungrounded"})
    stack.wait_job(job_id)
    first = _items(stack.engine, job_id)[0]
    # Deliver the finished item's task twice more, as a broker redelivery would.
    celery = make_celery(stack.settings)
    results = [celery.send_task("factgate.run_item", args=[first.id]) for _ in range(2)]
    for r in results:
        # An embedded worker started earlier in this pytest process makes Celery treat the process as a
        # worker; this is a test waiting on results, not a task, so say so.
        r.get(timeout=30, disable_sync_subtasks=False)
    celery.close()
    again = _items(stack.engine, job_id)[0]
    assert again.output == first.output and again.attempts == first.attempts == 1
    assert _calls_per_item(stack.engine, job_id)[first.id] == 1


def test_worker_killed_mid_job_then_another_completes_it(
    queue_db: tuple[str, Engine], tmp_path: Path, reference: list[dict[str, object]]
) -> None:
    pg_url, pg_engine = queue_db
    # Upstream latency keeps items in flight long enough to kill the worker mid-job. The messages the killed
    # worker had taken but not started are re-sent once their dispatch is 4 s stale (10 s elsewhere).
    with (
        run_in_thread(SimConfig(decisions_rps=0, latency_s=0.4)) as sim,
        running_stack(
            pg_url, pg_engine, sim.base_url, tmp_path, FACTGATE_LEASE_S="4", FACTGATE_DISPATCH_STALE_S="4"
        ) as stack,
    ):
        rows = [{"id": f"k{i}", "claim": f"{r['claim']} ({i})"} for i, r in enumerate(reference * 3)]
        first = stack.start_worker(concurrency=8)
        job_id = stack.submit_claims(rows, {"mode": "ungrounded"})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = sum(1 for i in _items(stack.engine, job_id) if i.status == "done")
            if done >= 8:
                break
            time.sleep(0.1)
        first.kill()
        running = sum(1 for i in _items(stack.engine, job_id) if i.status == "running")
        stack.start_worker(concurrency=8)
        job = stack.wait_job(job_id, timeout=180)
        assert job.status == "completed"
        items = _items(stack.engine, job_id)
        assert len(items) == len(rows)
        assert {i.status for i in items} == {"done"}
        # Exactly one stored result per item; items that were running at the kill were re-driven.
        assert (job.summary or {})["request_counts"]["completed"] == len(rows)
        assert running >= 1


def _queued_items(stack: Stack) -> set[int]:
    """Items with a `run_item` message waiting in the broker's queue."""
    out: set[int] = set()
    for raw in stack.redis().lrange("celery", 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == "factgate.run_item":
            out.add(int(json.loads(base64.b64decode(message["body"]))[0][0]))
    return out


def test_a_stopped_worker_gives_back_what_it_took_and_did_not_start(
    queue_db: tuple[str, Engine], tmp_path: Path, reference: list[dict[str, object]]
) -> None:
    """Messages leave Redis when a worker takes them (no acknowledgements), so a warm shutdown must not
    strand the items whose tasks it dropped: they are dispatchable again at once, not after going stale."""
    pg_url, pg_engine = queue_db
    with (
        run_in_thread(SimConfig(decisions_rps=0, latency_s=0.5)) as sim,
        running_stack(pg_url, pg_engine, sim.base_url, tmp_path, FACTGATE_DISPATCH_STALE_S="600") as stack,
    ):
        rows = [{"id": f"s{i}", "claim": f"{r['claim']} <{i}>"} for i, r in enumerate(reference)]
        first = stack.start_worker(concurrency=2, beat=False)
        job_id = stack.submit_claims(rows, {"mode": "ungrounded"})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum(1 for i in _items(stack.engine, job_id) if i.status == "done") >= 2:
                break
            time.sleep(0.05)
        first.stop()  # warm: the two running tasks finish, the ones waiting for a thread are dropped
        # Nothing is left marked as dispatched without a message in the broker to carry it.
        stranded = {
            i.id for i in _items(stack.engine, job_id) if i.status == "pending" and i.enqueued_at is not None
        }
        assert stranded <= _queued_items(stack)
        assert "gave back" in first.log.read_text(errors="replace")
        assert not stack.redis().exists("unacked", "unacked_index")  # consumed without acknowledgements
        stack.start_worker(concurrency=4)
        job = stack.wait_job(job_id, timeout=60)  # well before a dispatch goes stale (600 s)
        assert job.status == "completed"
        assert _calls_per_item(stack.engine, job_id) == {i.id: 1 for i in _items(stack.engine, job_id)}


def test_redis_flushed_mid_job_sweeper_recovers(
    queue_db: tuple[str, Engine], tmp_path: Path, reference: list[dict[str, object]]
) -> None:
    pg_url, pg_engine = queue_db
    with (
        run_in_thread(SimConfig(decisions_rps=0, latency_s=0.2)) as sim,
        running_stack(pg_url, pg_engine, sim.base_url, tmp_path, FACTGATE_LEASE_S="4") as stack,
    ):
        rows = [{"id": f"f{i}", "claim": f"{r['claim']} [{i}]"} for i, r in enumerate(reference * 3)]
        stack.start_worker(concurrency=4)
        job_id = stack.submit_claims(rows, {"mode": "ungrounded"})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(i.status == "done" for i in _items(stack.engine, job_id)):
                break
            time.sleep(0.05)
        stack.redis().flushdb()  # queue, chord counters, limiter state: all gone
        job = stack.wait_job(job_id, timeout=180)
        assert job.status == "completed"
        assert {i.status for i in _items(stack.engine, job_id)} == {"done"}


def test_429_storm_pauses_workers_and_job_completes(
    queue_db: tuple[str, Engine], tmp_path: Path, reference: list[dict[str, object]]
) -> None:
    pg_url, pg_engine = queue_db
    # The upstream allows 8/s while our limiter believes 20/s: 429s follow, every worker pauses.
    with (
        run_in_thread(SimConfig(decisions_rps=8)) as sim,
        running_stack(
            pg_url,
            pg_engine,
            sim.base_url,
            tmp_path,
            FACTGATE_MAX_ITEM_ATTEMPTS="8",
            FACTGATE_DECISIONS_RPS="20",
        ) as stack,
    ):
        stack.start_worker(concurrency=8)
        job_id = stack.submit_claims(reference, {"mode": "ungrounded"})
        job = stack.wait_job(job_id, timeout=180)
        assert job.status == "completed"
        assert (job.summary or {})["request_counts"]["completed"] == 24
        assert job.usage and job.usage["throttled"] >= 1
        stats = sim.app.test_client().get("/stats").get_json()
        assert stats  # the simulator saw the storm


def test_malformed_bodies_and_5xx_bursts(
    queue_db: tuple[str, Engine], tmp_path: Path, reference: list[dict[str, object]]
) -> None:
    pg_url, pg_engine = queue_db
    sim_cfg = SimConfig(
        decisions_rps=0, fault_rate=0.35, faults=("malformed_json", "bad_probability", "503", "500"), seed=7
    )
    with (
        run_in_thread(sim_cfg) as sim,
        # Outcomes are the point, not the waits: retries back off from 0.1 s instead of 1 s.
        running_stack(pg_url, pg_engine, sim.base_url, tmp_path, FACTGATE_HTTP_RETRY_BASE_S="0.1") as stack,
    ):
        stack.start_worker()
        job_id = stack.submit_claims(reference, {"mode": "ungrounded"})
        job = stack.wait_job(job_id, timeout=180)
        assert job.status == "completed"
        items = _items(stack.engine, job_id)
        assert {i.status for i in items} <= {"done", "failed"}
        failed = [i for i in items if i.status == "failed"]
        assert failed, "with a 35% fault rate some items must fail on malformed bodies"
        for item in failed:
            assert item.error and (
                "malformed" in item.error.lower()
                or "probability" in item.error.lower()
                or "json" in item.error.lower()
                or "50" in item.error
            )
        assert any(i.status == "done" for i in items)
        counts = (job.summary or {})["request_counts"]
        assert counts["completed"] + counts["failed"] == 24
