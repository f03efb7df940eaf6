"""`validating` jobs through the real queue: a `celery worker` subprocess builds their items in `start_job`,
and the sweeper (beat) sends `start_job` again for one whose message was lost, then both run to the end.

Both jobs are stored the way `POST /v1/jobs` stores a large streamed body (web/intake.py:submit_stream with
FACTGATE_INTAKE_DEFER_ROWS at 0, so any body is deferred); one is enqueued after commit as the view does, the
other never is (a broker outage at submit, a flushed Redis, or a worker killed mid-build whose transaction
rolled back all leave this same state: `validating`, rows staged, no message).
"""

from __future__ import annotations

import io
import json
import re
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from config import Settings
from jobs.bulk_load import Built, build_staged
from jobs.control import SKIP_INLINE, cancel_job
from jobs.purge import delete_job
from jobs.tenancy import get_or_create_tenant
from models import ApiCall, Item, Job, intake_rows, make_session_factory, session_scope
from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.stack import fresh_database, running_stack
from tests.reference import reference_claims
from web.intake import submit_stream
from workers.api import FINISH_CANCEL, PURGE, enqueue_start
from workers.app import make_celery

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _submit_deferred(engine: Engine, settings: Settings, rows: list[dict[str, object]]) -> uuid.UUID:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    with session_scope(make_session_factory(engine)) as session:
        tenant = get_or_create_tenant(session, f"t-{uuid.uuid4().hex[:8]}")
        submission = submit_stream(
            session,
            tenant=tenant,
            settings=settings,
            body_format="ndjson",
            params=[("kind", "claims"), ("mode", "both")],
            stream=io.BytesIO(body),
        )
        assert submission.created and submission.job.status == "validating"
        return submission.job.id


def test_a_worker_builds_validating_jobs_and_the_sweeper_restarts_a_lost_one(tmp_path: Path) -> None:
    rows = [{"id": r["id"], "claim": r["claim"], "label": r.get("label")} for r in reference_claims()[:8]]
    with (
        fresh_database() as (pg_url, engine),
        run_in_thread(SimConfig(decisions_rps=0)) as sim,
        # A validating job is restarted once it is 2 s old and nobody holds it; sweeps run every second.
        running_stack(pg_url, engine, sim.base_url, tmp_path, FACTGATE_DISPATCH_STALE_S="2") as stack,
    ):
        settings = Settings.from_env({**stack.env, "FACTGATE_INTAKE_DEFER_ROWS": "0"})
        sent = _submit_deferred(engine, settings, rows)
        lost = _submit_deferred(engine, settings, rows)
        celery = make_celery(settings)
        enqueue_start(celery, sent)  # after commit, as web/api.py does; `lost` gets no message
        celery.close()
        stack.start_worker(concurrency=4)
        for job_id in (sent, lost):
            job = stack.wait_job(job_id, timeout=120)
            assert job.status == "completed", job.error
            assert job.total_items == 16 and (job.summary or {})["request_counts"]["completed"] == 16
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(intake_rows)) == 0
            for job_id in (sent, lost):
                assert conn.scalar(select(func.count()).select_from(Item).where(Item.job_id == job_id)) == 16
        logs = "".join(w.log.read_text(errors="replace") for w in stack.workers)
        assert f"job {lost} is still validating: start_job sent again" in logs


def test_a_worker_finishes_large_cancels_in_batches_and_the_sweeper_resends_a_lost_one(
    tmp_path: Path,
) -> None:
    """Two built jobs of 1,200 items each (above SKIP_INLINE, so the cancel leaves them pending) are
    cancelled before any worker runs; one gets its `finish_cancel` message as the view sends it, the other
    none. The worker skips the first's items in batches, the sweeper sends the second's, and both end
    `cancelled` with every item skipped and nothing sent upstream."""
    rows = [{"id": f"r{n}", "claim": f"Claim number {n} was made in {1900 + n % 100}."} for n in range(600)]
    with (
        fresh_database() as (pg_url, engine),
        run_in_thread(SimConfig(decisions_rps=0)) as sim,
        running_stack(pg_url, engine, sim.base_url, tmp_path) as stack,
    ):
        settings = Settings.from_env({**stack.env, "FACTGATE_INTAKE_DEFER_ROWS": "0"})
        sessions = make_session_factory(engine)
        jobs = [_submit_deferred(engine, settings, rows) for _ in range(2)]
        for job_id in jobs:
            with session_scope(sessions) as session:
                assert build_staged(session, job_id) is Built.BUILT
                job = session.get(Job, job_id)
                assert job is not None and job.total_items == 1200 > SKIP_INLINE
                assert cancel_job(session, job)
        celery = make_celery(settings)
        celery.send_task(FINISH_CANCEL, args=[str(jobs[0])])  # after commit, as web/enqueue.py does
        celery.close()
        stack.start_worker(concurrency=4)
        for job_id in jobs:
            job = stack.wait_job(job_id, timeout=120)
            assert job.status == "cancelled", job.error
            assert (job.request_counts or {})["skipped"] == 1200
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(ApiCall)) == 0
        # Only finish_cancel skips a pending item that was never dispatched (nothing was: no call was made);
        # its lines say how many rows each run handled. The sweeper may send a second one while the first
        # runs (they share the rows), so a job's lines add up to at most its items.
        logs = "".join(w.log.read_text(errors="replace") for w in stack.workers)
        for job_id in jobs:
            done = re.findall(
                rf"job {job_id}: cancel finished, (\d+) rows skipped or deleted in batches", logs
            )
            assert sum(int(n) for n in done) <= 1200, done
        assert "cancel finished" in logs
        # Deleted, the first is purged by the worker's `factgate.purge` (sent as the view sends it).
        with session_scope(sessions) as session:
            job = session.get(Job, jobs[0])
            assert job is not None and delete_job(session, job)
        celery = make_celery(settings)
        celery.send_task(PURGE)
        celery.close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                if conn.scalar(select(func.count()).select_from(Job).where(Job.id == jobs[0])) == 0:
                    break
            time.sleep(0.2)
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(Job).where(Job.id == jobs[0])) == 0
            assert conn.scalar(select(func.count()).select_from(Item).where(Item.job_id == jobs[0])) == 0
            assert conn.scalar(select(func.count()).select_from(Item).where(Item.job_id == jobs[1])) == 1200
