"""Embedded mode's worker: a real Celery worker (threads pool) and sweeper in this process, on SQLite, the
in-memory broker, the in-process limiter store and the in-process simulator. Nothing is eager.

No Postgres or Redis is needed: that is the point of embedded mode.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

import migrations
from checks import claims as claim_rules
from checks.options import parse_claims_options
from config import Settings
from jobs.claims import claim_units
from jobs.intake import create_job
from jobs.tenancy import get_or_create_tenant
from models import ApiCall, Item, Job, make_engine, make_session_factory, session_scope
from tests.integration.stack import ENDED
from tests.reference import reference_claims
from workers.api import enqueue_start
from workers.embedded import EmbeddedWorker
from workers.metrics import embedded_redis, read_limiter_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # A limiter faster than the simulator's own 10/s keeps the test short and draws some 429s, which the
    # client retries; every request still takes a limiter slot.
    return Settings(instance_path=tmp_path / "instance", decisions_rps=100.0, sweep_interval_s=1.0)


@pytest.fixture
def engine(settings: Settings) -> Iterator[object]:
    url = settings.effective_database_url()
    migrations.upgrade(url)
    eng = make_engine(url)
    yield eng
    eng.dispose()


def submit(engine: object, rows: list[dict[str, object]], mode: str) -> uuid.UUID:
    parsed = claim_rules.validate_rows(rows, max_rows=1000, max_claim_bytes=4096)
    opts = parse_claims_options({"mode": mode})
    units, warnings = claim_units(parsed, opts)
    with session_scope(make_session_factory(engine)) as session:  # type: ignore[arg-type]
        tenant = get_or_create_tenant(session, "embedded-test")
        job, _ = create_job(
            session,
            tenant_id=tenant.id,
            kind="claims",
            options=opts.as_dict(),
            units=units,
            warnings=warnings,
            simulated=True,
        )
        return job.id


def wait_job(engine: object, job_id: uuid.UUID, timeout: float = 60.0) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with Session(engine) as session:  # type: ignore[call-overload]
            job = session.get(Job, job_id)
            if job is not None and job.status in ENDED:
                session.expunge(job)
                return job
        time.sleep(0.1)
    raise TimeoutError(f"job {job_id} did not end within {timeout}s")


def test_a_claims_job_runs_through_the_real_worker_path(settings: Settings, engine: object) -> None:
    rows = reference_claims()
    with EmbeddedWorker(settings) as worker:
        assert worker.running
        assert not worker.app.conf.task_always_eager
        assert worker.app.conf.broker_url.startswith("memory://")
        job_id = submit(engine, rows, "both")
        enqueue_start(worker.app, job_id)
        job = wait_job(engine, job_id)
    assert not worker.running
    assert job.status == "completed", job.error
    cards = (job.summary or {})["scorecards"]
    assert cards["grounded"]["correct"] == 24 and cards["grounded"]["acceptance"] is True
    assert cards["ungrounded"]["acceptance"] is False
    with Session(engine) as session:  # type: ignore[call-overload]
        by_status = select(Item.status, func.count()).where(Item.job_id == job_id).group_by(Item.status)
        statuses = {status: n for status, n in session.execute(by_status).all()}
        called = set(session.scalars(select(ApiCall.item_id).where(ApiCall.job_id == job_id)))
        items = set(session.scalars(select(Item.id).where(Item.job_id == job_id)))
    assert statuses == {"done": 48}
    assert called == items  # every item's upstream attempts are recorded (429 retries included)
    # The limiter ran on the in-process store and its waits were counted for /metrics.
    assert read_limiter_metrics(embedded_redis())["decisions"].count >= 48


def test_an_interrupted_job_resumes_when_a_worker_starts_again(settings: Settings, engine: object) -> None:
    """What Ctrl-C leaves: a job in progress whose items were marked dispatched but whose messages died with
    the old process's in-memory broker. A new worker clears the marks and finishes the job at once, without
    waiting for a lease or a stale-dispatch period to pass."""
    rows = reference_claims()[:6]
    job_id = submit(engine, rows, "grounded")
    with session_scope(make_session_factory(engine)) as session:  # type: ignore[arg-type]
        session.execute(update(Job).where(Job.id == job_id).values(status="in_progress"))
        session.execute(update(Item).where(Item.job_id == job_id).values(enqueued_at=func.now()))
    slow_sweeps = Settings(instance_path=settings.instance_path, decisions_rps=100.0, sweep_interval_s=3600.0)
    with EmbeddedWorker(slow_sweeps):
        job = wait_job(engine, job_id, timeout=30)  # well before the hourly sweep or the 300 s lease
    assert job.status == "completed"


def test_workers_start_and_stop_cleanly_one_after_another(settings: Settings, engine: object) -> None:
    before = {t.name for t in threading.enumerate()}
    for _ in range(2):
        worker = EmbeddedWorker(settings).start()
        job_id = submit(engine, reference_claims()[:2], "ungrounded")
        enqueue_start(worker.app, job_id)
        assert wait_job(engine, job_id).status == "completed"
        assert worker.stop(timeout=20) is True
    leftover = {t.name for t in threading.enumerate()} - before
    assert not {name for name in leftover if name.startswith("factgate-embedded")}


def test_an_embedded_worker_refuses_a_redis_broker(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="REDIS_URL must be unset"):
        EmbeddedWorker(Settings(instance_path=tmp_path, redis_url="redis://127.0.0.1:6379/0"))
