"""Celery tasks while the database restarts: real Postgres behind a TCP proxy the test cuts and restores.

The tasks run through Celery's `apply` (eagerly, in this process: a retry runs again at once instead of
after its countdown), with the worker context they have in a worker. With the proxy cut, the periodic
`sweep` and `deliver_webhooks` log one warning line and return; `start_job` and `after_window` retry a
bounded number of times and then give up to the sweep, never raising. Once the proxy listens again the
same tasks do their work. No timing asserts.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from config import Settings
from models import Job
from tests.integration.tcp_proxy import TcpProxy
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)
from tests.services import PG_ADMIN_URL
from workers.app import make_celery
from workers.context import reset_contexts
from workers.tasks import INFRA_TASK_RETRIES

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(pg_url: str) -> Iterator[TcpProxy]:
    target = make_url(PG_ADMIN_URL)
    with TcpProxy(target.host or "127.0.0.1", target.port or 5432) as running:
        yield running


@pytest.fixture
def worker_app(pg_url: str, proxy: TcpProxy, tmp_path: Path) -> Iterator[Celery]:
    """A worker's Celery app (tasks registered) whose database is reached through the proxy."""
    settings = Settings().with_overrides(
        {
            "database_url": proxy.url_for(pg_url),
            "redis_url": None,
            "perplexity_api_key": None,
            "instance_path": tmp_path / "instance",
        }
    )
    yield make_celery(settings)
    reset_contexts()


def run(app: Celery, task: str, *args: Any) -> Any:
    """Apply a task eagerly with `app` current: the tasks find their context through `celery.current_app`,
    and every Celery app made since (the web fixture's, say) became current when it was made. Its result is
    read with `disable_sync_subtasks=False`: once another test of this process has run an embedded worker,
    Celery refuses a plain `get()` here ("Never call result.get() within a task")."""
    app.set_current()
    return app.tasks[task].apply(args=args)


def worker_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The workers' log lines; none may be an error or carry a traceback during an outage."""
    records = [r for r in caplog.records if r.name == "factgate.workers"]
    assert all(r.levelno < logging.ERROR and not r.exc_info for r in records), [
        r.getMessage() for r in records
    ]
    return [r.getMessage() for r in records if r.levelno == logging.WARNING]


def status_of(pg_engine: Engine, job_id: str) -> str:
    with Session(pg_engine) as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        return job.status


def test_sweep_logs_one_warning_and_returns_while_the_database_is_down(
    worker_app: Celery, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    assert "live" in run(worker_app, "factgate.sweep").get(
        disable_sync_subtasks=False
    )  # a pooled connection now exists; the restart kills it

    proxy.cut()
    # Only the outage's lines: the sweep above may have warned of another test's job of this shared
    # database (one still validating after a minute, say), which is not what this test counts.
    caplog.clear()
    caplog.set_level(logging.INFO, logger="factgate.workers")
    for _ in range(2):  # the dead pooled connection, then a refused connect
        result = run(worker_app, "factgate.sweep")
        assert result.successful()
        assert result.get(disable_sync_subtasks=False) == {}
    warnings = worker_warnings(caplog)
    assert len(warnings) == 2
    assert all(w.startswith("sweep: the database unreachable") for w in warnings)

    proxy.restore()
    assert "live" in run(worker_app, "factgate.sweep").get(disable_sync_subtasks=False)


def test_deliver_webhooks_logs_one_warning_and_returns_while_the_database_is_down(
    worker_app: Celery, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    proxy.cut()
    caplog.set_level(logging.INFO, logger="factgate.workers")
    result = run(worker_app, "factgate.deliver_webhooks")
    assert result.successful() and result.get(disable_sync_subtasks=False) == 0
    assert worker_warnings(caplog) == [
        "webhooks: the database unreachable (OperationalError); the next sweep sends what is due"
    ]


@pytest.mark.parametrize(
    ("task", "args"),
    [("factgate.start_job", ()), ("factgate.after_window", ([],))],
)
def test_event_tasks_retry_a_bounded_number_of_times_then_give_up_to_the_sweep(
    task: str,
    args: tuple[Any, ...],
    worker_app: Celery,
    proxy: TcpProxy,
    web: WebEnv,
    caller: Any,
    pg_engine: Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job_id = web.submit(caller)["id"]
    assert status_of(pg_engine, job_id) == "queued"

    proxy.cut()
    caplog.set_level(logging.INFO, logger="factgate.workers")
    result = run(worker_app, task, job_id, *args)
    assert result.successful()  # ended, no exception: the sweep is the backstop
    warnings = worker_warnings(caplog)
    retries = [w for w in warnings if "trying again in" in w]
    assert len(retries) == INFRA_TASK_RETRIES
    assert [w for w in warnings if w not in retries] == [
        f"{task.removeprefix('factgate.').replace('after_window', 'after_window of job')} {job_id}: the "
        f"database unreachable (OperationalError) after {INFRA_TASK_RETRIES + 1} tries; giving up, "
        + (
            "the sweep starts or finalizes the job"
            if task == "factgate.start_job"
            else "the sweep moves its questions on"
        )
    ]
    assert status_of(pg_engine, job_id) == "queued"  # nothing half-done

    proxy.restore()
    assert run(worker_app, task, job_id, *args).successful()
    if task == "factgate.start_job":
        assert status_of(pg_engine, job_id) == "in_progress"


def test_a_task_that_is_not_an_outage_still_raises(worker_app: Celery) -> None:
    """Only infrastructure faults are retried or swallowed: a bug keeps its exception (and traceback)."""
    result = run(worker_app, "factgate.start_job", "not-a-uuid")
    assert result.failed()
    assert isinstance(result.result, ValueError)
