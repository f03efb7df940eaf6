"""GET /metrics (Prometheus text) and request ids, on the real app: an embedded SQLite app for exact counts,
and a server-mode app on Postgres and Redis for the queue depth and the limiter metrics in Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
from flask import Flask, jsonify
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from config.logging import current_context
from models import ApiCall, Item, Job, Tenant, session_scope, utcnow
from tests.services import redis_db_url, unavailable
from web.app import create_app
from web.session import EXTENSION
from workers.metrics import METRICS_KEY, embedded_redis
from workers.signals import record_limiter_wait, record_throttled

pytestmark = [pytest.mark.integration]

SERVER_REDIS = redis_db_url(12)  # flushed: a database of this xdist worker's own


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by (name, sorted labels). Parsing also proves the format is valid."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def seed(app: Flask) -> None:
    """Two jobs (one live, one completed) with items and upstream calls, one call outside the window."""
    sessions = app.extensions[EXTENSION].sessions
    now = utcnow()
    with session_scope(sessions) as s:
        tenant = Tenant(name=f"m-{uuid.uuid4().hex[:8]}")
        s.add(tenant)
        s.flush()
        live = Job(tenant_id=tenant.id, kind="claims", status="in_progress", options={})
        done = Job(tenant_id=tenant.id, kind="claims", status="completed", options={})
        s.add_all([live, done])
        s.flush()
        # (status, dispatched?, endpoint): in flight = dispatched and pending or running.
        states = [("pending", False, "decisions"), ("pending", True, "decisions"), ("running", True, "agent"),
                  ("done", True, "decisions"), ("failed", True, "search")]  # fmt: skip
        for pos, (status, sent, endpoint) in enumerate(states):
            s.add(Item(job_id=live.id, stage="claim", position=pos, custom_id=f"c{pos}", mode="grounded",
                       input={}, status=status, endpoint=endpoint, enqueued_at=now if sent else None,
                       scope=f"nokey:{endpoint}" if sent else None))  # fmt: skip
        for pos in range(3):  # a finished job's items are not counted
            s.add(Item(job_id=done.id, stage="claim", position=pos, custom_id=f"d{pos}", mode="grounded",
                       input={}, status="done"))  # fmt: skip
        calls = [("decisions", 200, now), ("decisions", 200, now), ("decisions", 429, now),
                 ("search", None, now), ("decisions", 200, now - timedelta(hours=2))]  # fmt: skip
        for endpoint, code, at in calls:
            s.add(
                ApiCall(
                    tenant_id=tenant.id, job_id=live.id, endpoint=endpoint, status_code=code, created_at=at
                )
            )


@pytest.fixture(autouse=True)
def public_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read the figures: the endpoint opened on purpose (it is closed by default, below)."""
    monkeypatch.delenv("FACTGATE_METRICS_TOKEN", raising=False)
    monkeypatch.setenv("FACTGATE_METRICS_PUBLIC", "true")


@pytest.fixture
def embedded_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Flask:
    monkeypatch.delenv("FACTGATE_METRICS", raising=False)
    return create_app({"database_url": None, "redis_url": None, "instance_path": tmp_path / "instance"})


def test_metrics_count_jobs_items_and_upstream_calls(embedded_app: Flask) -> None:
    seed(embedded_app)
    endpoint = f"ep{uuid.uuid4().hex[:8]}"  # the embedded store is per process: a name of our own
    for waited in (0.0, 0.2, 3.0):
        record_limiter_wait(embedded_redis(), endpoint, waited)
    record_throttled(embedded_redis(), endpoint)
    resp = embedded_app.test_client().get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    got = samples(resp.get_data(as_text=True))

    assert got[("factgate_jobs", (("status", "in_progress"),))] == 1
    assert got[("factgate_jobs", (("status", "completed"),))] == 1
    assert got[("factgate_jobs", (("status", "failed"),))] == 0
    in_flight = {
        ep: got[("factgate_items_in_flight", (("endpoint", ep),))] for ep in ("decisions", "agent", "search")
    }
    assert in_flight == {"decisions": 1, "agent": 1, "search": 0}  # never a count over a job's items

    def calls(endpoint: str, status: str) -> float:
        return got[
            ("factgate_upstream_calls", (("endpoint", endpoint), ("status", status), ("window_s", "900")))
        ]

    assert calls("decisions", "200") == 2  # the two-hour-old call is outside the window
    assert calls("decisions", "429") == 1 and calls("search", "none") == 1
    assert got[("factgate_upstream_429", (("endpoint", "decisions"), ("window_s", "900")))] == 1

    ep = (("endpoint", endpoint),)
    assert got[("factgate_limiter_wait_seconds_count", ep)] == 3
    assert got[("factgate_limiter_wait_seconds_sum", ep)] == pytest.approx(3.2)
    assert got[("factgate_limiter_wait_seconds_bucket", (("endpoint", endpoint), ("le", "0.25")))] == 2
    assert got[("factgate_limiter_wait_seconds_bucket", (("endpoint", endpoint), ("le", "+Inf")))] == 3
    assert got[("factgate_upstream_throttled_total", ep)] == 1
    assert got[("factgate_queue_depth", (("queue", "celery"),))] >= 0
    for source in ("database", "redis", "broker"):
        assert got[("factgate_metrics_source_up", (("source", source),))] == 1


def test_metrics_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACTGATE_METRICS", "0")
    app = create_app({"database_url": None, "redis_url": None, "instance_path": tmp_path / "instance"})
    assert app.test_client().get("/metrics").status_code == 404


def test_every_request_gets_an_id_in_its_log_context_and_response(embedded_app: Flask) -> None:
    @embedded_app.get("/_test/context")
    def context() -> Any:
        return jsonify(current_context())

    client = embedded_app.test_client()
    given = client.get("/_test/context", headers={"X-Request-Id": "abc-123"})
    assert given.headers["X-Request-Id"] == "abc-123" and given.get_json() == {"request_id": "abc-123"}
    made = client.get("/_test/context", headers={"X-Request-Id": "bad id; with spaces and {braces}"})
    rid = made.headers["X-Request-Id"]
    assert len(rid) == 32 and made.get_json() == {"request_id": rid}
    assert client.get("/healthz").headers["X-Request-Id"]
    assert current_context() == {}  # nothing leaks out of the request


@pytest.fixture
def server_redis() -> Iterator[redis_lib.Redis]:
    client = redis_lib.Redis.from_url(SERVER_REDIS)
    try:
        client.flushdb()
    except Exception as exc:
        unavailable("Redis", exc)
        raise
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def make_server_app(pg_url: str, tmp_path: Path) -> Iterator[Any]:
    """Server-mode apps on the test Postgres; their engines and Redis clients are closed afterwards."""
    apps: list[Flask] = []

    def make(redis_url: str) -> Flask:
        app = create_app({"database_url": pg_url, "redis_url": redis_url, "instance_path": tmp_path / "i"})
        apps.append(app)
        return app

    yield make
    for app in apps:
        res = app.extensions[EXTENSION]
        res.engine.dispose()
        if res.redis is not None:
            res.redis.close()


def test_server_mode_reads_queue_depth_and_limiter_metrics_from_redis(
    make_server_app: Any, server_redis: redis_lib.Redis
) -> None:
    app = make_server_app(SERVER_REDIS)
    server_redis.rpush("celery", "m1", "m2", "m3")
    server_redis.hset("unacked", mapping={"t1": "x", "t2": "y"})
    record_limiter_wait(server_redis, "decisions", 0.02)
    record_limiter_wait(server_redis, "decisions", 70.0, timed_out=True)
    got = samples(app.test_client().get("/metrics").get_data(as_text=True))
    assert got[("factgate_queue_depth", (("queue", "celery"),))] == 3
    assert got[("factgate_queue_unacked", ())] == 2
    assert got[("factgate_limiter_wait_seconds_count", (("endpoint", "decisions"),))] == 2
    assert got[("factgate_limiter_timeouts_total", (("endpoint", "decisions"),))] == 1
    assert server_redis.exists(METRICS_KEY)
    assert got[("factgate_metrics_source_up", (("source", "database"),))] == 1


def test_an_unreachable_redis_marks_its_source_down_but_still_answers(make_server_app: Any) -> None:
    app = make_server_app("redis://127.0.0.1:1/0")
    resp = app.test_client().get("/metrics")
    assert resp.status_code == 200
    got = samples(resp.get_data(as_text=True))
    assert got[("factgate_metrics_source_up", (("source", "redis"),))] == 0
    assert got[("factgate_metrics_source_up", (("source", "broker"),))] == 0
    assert got[("factgate_metrics_source_up", (("source", "database"),))] == 1
    assert ("factgate_jobs", (("status", "queued"),)) in got


def test_metrics_token_guards_the_endpoint(embedded_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FACTGATE_METRICS_TOKEN", "scrape-secret")
    client = embedded_app.test_client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = client.get("/metrics", headers={"Authorization": "Bearer scrape-secret"})
    assert ok.status_code == 200 and "factgate_jobs" in ok.get_data(as_text=True)


def test_metrics_are_closed_without_a_token_unless_made_public(
    embedded_app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = embedded_app.test_client()
    for public in (None, "", "0", "false"):
        if public is None:
            monkeypatch.delenv("FACTGATE_METRICS_PUBLIC", raising=False)
        else:
            monkeypatch.setenv("FACTGATE_METRICS_PUBLIC", public)
        closed = client.get("/metrics")
        assert closed.status_code == 404, public
        body = closed.get_data(as_text=True)
        assert "factgate_jobs" not in body and "FACTGATE_METRICS_TOKEN" in body
    monkeypatch.setenv("FACTGATE_METRICS_PUBLIC", "true")
    assert client.get("/metrics").status_code == 200
    # A token still guards it when set, public or not.
    monkeypatch.setenv("FACTGATE_METRICS_TOKEN", "scrape-secret")
    assert client.get("/metrics").status_code == 401


def test_metrics_name_no_tenant_job_or_key(embedded_app: Flask) -> None:
    seed(embedded_app)
    text = embedded_app.test_client().get("/metrics").get_data(as_text=True)
    with embedded_app.extensions[EXTENSION].sessions() as s:
        names = [t.name for t in s.scalars(select(Tenant))] + [str(j.id) for j in s.scalars(select(Job))]
    assert names and not any(name in text for name in names)
