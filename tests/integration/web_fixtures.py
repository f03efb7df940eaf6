"""Fixtures and helpers for the JSON API tests: a Flask app on the real test Postgres, tenants, items.

Each test gets its own app (its own engine, disposed afterwards) and its own uniquely named tenants,
so tests share the session's database without seeing each other's jobs. The app commits for real
(that is what intake must do), which is why isolation is by tenant and not by rollback.

Enqueueing uses a real Celery app on kombu's in-memory broker (what `make_celery` builds when no
REDIS_URL is set): messages are really sent and can be read back with `drain_messages`; no worker
consumes them here — running jobs end to end is the queue integration test's job.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from config import Settings
from jobs.items import claim_item, fail_item, finish_item, skip_item
from jobs.records import CallRow, ClaimedItem
from jobs.tenancy import create_token
from models import ApiCall, Item, Job, intake_rows, session_scope
from web.app import create_app
from workers.api import START_JOB
from workers.app import make_celery

ROWS: list[dict[str, Any]] = [
    {"id": "c1", "claim": "Python 3.12 was released in October 2023.", "label": True, "kind": "stable"},
    {"id": "c2", "claim": "Git was created by Guido van Rossum.", "label": False, "kind": "stable"},
    {"id": "c3", "claim": "Rust 1.0 was released in May 2015.", "label": True},
]


def ndjson(rows: Sequence[object]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@dataclass
class Caller:
    """A tenant with a live token, and the headers that authenticate as it."""

    tenant_id: uuid.UUID
    tenant_name: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def json_headers(self, **extra: str) -> dict[str, str]:
        return {**self.headers, "Content-Type": "application/json", **extra}

    def ndjson_headers(self, **extra: str) -> dict[str, str]:
        return {**self.headers, "Content-Type": "application/x-ndjson", **extra}


@dataclass
class WebEnv:
    """The app under test, its client and helpers over its database."""

    app: Flask
    client: FlaskClient
    sessions: sessionmaker[Session]
    celery: Celery

    def new_caller(self, prefix: str = "t") -> Caller:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        with session_scope(self.sessions) as session:
            issued = create_token(session, name)
        return Caller(issued.tenant_id, issued.tenant_name, issued.token)

    def table_counts(self) -> tuple[int, int, int, int]:
        """(jobs, items, api_calls, intake_rows) rows in the whole database: "nothing stored" means
        unchanged (staged rows included: a refused streamed body must leave none)."""
        with self.sessions() as session:
            return (
                int(session.scalar(select(func.count()).select_from(Job)) or 0),
                int(session.scalar(select(func.count()).select_from(Item)) or 0),
                int(session.scalar(select(func.count()).select_from(ApiCall)) or 0),
                int(session.scalar(select(func.count()).select_from(intake_rows)) or 0),
            )

    def job(self, job_id: str | uuid.UUID) -> Job:
        with self.sessions() as session:
            job = session.get(Job, uuid.UUID(str(job_id)))
            assert job is not None
            return job

    def items(self, job_id: str | uuid.UUID) -> list[Item]:
        with self.sessions() as session:
            return list(
                session.scalars(
                    select(Item).where(Item.job_id == uuid.UUID(str(job_id))).order_by(Item.position)
                )
            )

    def submit(self, caller: Caller, rows: Sequence[object] = ROWS, **options: Any) -> dict[str, Any]:
        """Create a claims job through the API (JSON body) and return its status object."""
        resp = self.client.post(
            "/v1/jobs",
            json={"kind": "claims", "options": options, "items": list(rows)},
            headers=caller.headers,
        )
        assert resp.status_code == 202, resp.get_json()
        body: dict[str, Any] = resp.get_json()
        return body

    def drain_messages(self) -> list[tuple[str, list[Any]]]:
        """Every message waiting on the in-memory broker, as (task name, args); removes them."""
        out: list[tuple[str, list[Any]]] = []
        with self.celery.connection_for_read() as conn:
            queue = conn.SimpleQueue("celery")
            try:
                while True:
                    try:
                        msg = queue.get(block=False)
                    except queue.Empty:
                        break
                    body = msg.decode()
                    args = body[0] if isinstance(body, list | tuple) else []
                    out.append((msg.headers["task"], list(args)))
                    msg.ack()
            finally:
                queue.close()
        return out

    def started_job_ids(self) -> list[str]:
        return [args[0] for task, args in self.drain_messages() if task == START_JOB]


def settle_items(
    sessions: sessionmaker[Session],
    job_id: str | uuid.UUID,
    outcomes: dict[tuple[str, str], Any],
) -> None:
    """Drive items through the jobs/ state functions as a worker would.

    `outcomes[(custom_id, mode)]` is a probability (done), `("failed", error)` or `("skipped", reason)`.
    Each done or failed item gets one api_calls row whose request id is `req-<custom_id>-<mode>`.
    """
    jid = uuid.UUID(str(job_id))
    with session_scope(sessions) as session:
        items = list(session.scalars(select(Item).where(Item.job_id == jid).order_by(Item.position)))
        for item in items:
            key = (item.custom_id, item.mode)
            if key not in outcomes:
                continue
            claimed = claim_item(session, item.id, lease_s=300)
            assert isinstance(claimed, ClaimedItem), key  # a fresh item is never out of tries
            request_id = f"req-{item.custom_id}-{item.mode}"
            outcome = outcomes[key]
            call = CallRow(
                endpoint="decisions",
                attempt=1,
                status_code=200,
                request_id=request_id,
                latency_ms=120.0,
                model="pplx-decider-latest",
                input_tokens=100,
                searches=1 if item.mode == "grounded" else 0,
                cost_usd=0.000002 + (0.001 if item.mode == "grounded" else 0.0),
            )
            if isinstance(outcome, tuple) and outcome[0] == "failed":
                failed_call = CallRow(
                    endpoint="decisions",
                    attempt=1,
                    status_code=500,
                    request_id=request_id,
                    latency_ms=50.0,
                    error=outcome[1],
                )
                fail_item(session, claimed, outcome[1], [failed_call], {"request_ids": [request_id]})
            elif isinstance(outcome, tuple) and outcome[0] == "skipped":
                skip_item(session, claimed, outcome[1])
            else:
                p = float(outcome)
                finish_item(
                    session,
                    claimed,
                    {
                        "p": p,
                        "request_id": request_id,
                        "request_ids": [request_id],
                        "attempts": 1,
                        "latency_s": 0.12,
                        "input_tokens": 100,
                        "n_search_results": 5 if item.mode == "grounded" else 0,
                        "sources": [],
                    },
                    [call],
                )


@pytest.fixture
def web_settings(pg_url: str, tmp_path: Path) -> dict[str, Any]:
    """Overrides for server mode on the test database; no API key, so jobs say they are simulated."""
    return {
        "database_url": pg_url,
        "redis_url": None,
        "perplexity_api_key": None,
        "instance_path": tmp_path / "instance",
    }


@pytest.fixture
def memory_celery(web_settings: dict[str, Any]) -> Iterator[Celery]:
    """The Celery app intake enqueues on: in-memory broker, purged before and after each test."""
    app = make_celery(Settings().with_overrides(web_settings))
    app.control.purge()
    yield app
    app.control.purge()


def make_env(overrides: dict[str, Any], celery: Celery) -> WebEnv:
    app = create_app(overrides, celery=celery)
    app.testing = True
    res = app.extensions["factgate"]
    return WebEnv(app=app, client=app.test_client(), sessions=res.sessions, celery=celery)


@pytest.fixture
def web(web_settings: dict[str, Any], memory_celery: Celery) -> Iterator[WebEnv]:
    env = make_env(web_settings, memory_celery)
    yield env
    env.app.extensions["factgate"].engine.dispose()


@pytest.fixture
def caller(web: WebEnv) -> Caller:
    return web.new_caller()


@pytest.fixture
def other_caller(web: WebEnv) -> Caller:
    return web.new_caller("other")
