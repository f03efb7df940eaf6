"""A window's body moves on every question whose children it held, not just the first to be reported.

A window (one chord) of a citations, answer or quote job often holds the sentences of several answers.
`after_window` once stopped at the first question whose report it built, so the window's other questions
waited for the sweep (FACTGATE_SWEEP_INTERVAL_S, 15 s by default): `make demo`'s citations job of 11
answers took 15 s instead of 3. Here the tasks run through Celery's `apply`, in this process, with the
worker context they have in a worker (as tests/integration/test_tasks_outage.py does), so nothing but
`after_window` can move the questions on: no sweep, no dispatcher.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import select

from config import Settings
from models import Item, Job, session_scope
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)
from workers.app import make_celery
from workers.context import reset_contexts

pytestmark = pytest.mark.integration

SOURCES = [{"id": "1", "text": "The river is long. The river is wide."}]
ANSWERS = [
    {"id": f"a{n}", "answer": "The river is long [1]. The river is wide [1].", "sources": SOURCES}
    for n in range(3)
]


@pytest.fixture
def worker_app(pg_url: str, tmp_path: Path) -> Iterator[Celery]:
    """A worker's Celery app (tasks registered) on the test database, upstream simulated in-process."""
    settings = Settings().with_overrides(
        {"database_url": pg_url, "redis_url": None, "perplexity_api_key": None, "instance_path": tmp_path}
    )
    app = make_celery(settings)
    yield app
    reset_contexts()


def _run(app: Celery, task: str, *args: object) -> None:
    app.set_current()
    result = app.tasks[task].apply(args=args)
    assert result.successful(), result.traceback


def _items(web: WebEnv, job_id: uuid.UUID, *, questions: bool) -> list[Item]:
    with session_scope(web.sessions) as session:
        where = Item.parent_id.is_(None) if questions else Item.parent_id.is_not(None)
        return list(session.scalars(select(Item).where(Item.job_id == job_id, where).order_by(Item.id)))


def test_one_window_of_several_answers_reports_every_one_and_ends_the_job(
    web: WebEnv, caller: Caller, worker_app: Celery
) -> None:
    body = "\n".join(json.dumps(a) for a in ANSWERS)
    resp = web.client.post(
        "/v1/jobs?kind=citations&audit_share=0",  # its sentences alone (no audit items)
        data=body,
        headers={**caller.headers, "Content-Type": "application/x-ndjson"},
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)
    job_id = uuid.UUID(resp.get_json()["id"])
    _run(worker_app, "factgate.start_job", str(job_id))
    for question in _items(web, job_id, questions=True):
        _run(worker_app, "factgate.run_item", question.id)  # splits the answer into its cited sentences
    sentences = _items(web, job_id, questions=False)
    assert len(sentences) == 2 * len(ANSWERS)
    for sentence in sentences:
        _run(worker_app, "factgate.run_item", sentence.id)
    questions = sorted({s.parent_id for s in sentences if s.parent_id is not None})
    _run(worker_app, "factgate.after_window", str(job_id), questions)  # one window held them all
    with session_scope(web.sessions) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == "completed", job.status if job else None
        answers = list(session.scalars(select(Item).where(Item.id.in_(questions))))
        assert len(answers) == len(ANSWERS)
        assert all(a.output and a.output.get("report") for a in answers)  # each one's report was built
