"""A database restart as the web sees it, on real Postgres behind a TCP proxy the test cuts and restores.

While the proxy is cut (open connections dropped, the port refusing new ones: a fast shutdown), every API
route answers 503 `service_unavailable_error` with `Retry-After` and the JSON error, every page the HTML
error page with the same header, `/readyz` 503 naming the database while `/healthz` stays 200 — and all of
it answers as before once the proxy listens again. A statement the database refuses is still a 500.
Nothing here waits on a clock.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url

from models import Job
from tests.integration.tcp_proxy import TcpProxy
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    make_env,
    memory_celery,
    web,
    web_settings,
)
from tests.services import PG_ADMIN_URL, REDIS_URL
from web.errors import RETRY_AFTER_S

pytestmark = pytest.mark.integration

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def proxy(pg_url: str) -> Iterator[TcpProxy]:
    """A proxy in front of the test Postgres (pg_url first: it fails, or skips, when Postgres is away)."""
    target = make_url(PG_ADMIN_URL)
    with TcpProxy(target.host or "127.0.0.1", target.port or 5432) as running:
        yield running


@pytest.fixture
def proxied(web_settings: dict[str, Any], memory_celery: Any, proxy: TcpProxy) -> Iterator[WebEnv]:
    """The app under test, reaching its database only through the proxy."""
    env = make_env(
        {**web_settings, "database_url": proxy.url_for(web_settings["database_url"])}, memory_celery
    )
    yield env
    env.app.extensions["factgate"].engine.dispose()


def unavailable_error(resp: Any, port: int) -> dict[str, Any]:
    """The 503 shape every API route answers while a dependency is away; it never says where it lives."""
    assert resp.status_code == 503, (resp.status_code, resp.get_data(as_text=True)[:500])
    assert resp.headers["Retry-After"] == str(RETRY_AFTER_S)
    assert resp.mimetype == "application/json"
    body = resp.get_data(as_text=True)
    assert str(port) not in body and "127.0.0.1" not in body
    err: dict[str, Any] = resp.get_json()["error"]
    assert err["type"] == "service_unavailable_error"
    assert "database" in err["message"]
    return err


def sign_in(client: FlaskClient, who: Caller) -> None:
    page = client.get("/sign-in").get_data(as_text=True)
    match = CSRF_RE.search(page)
    assert match, "no CSRF token on the sign-in page"
    resp = client.post("/sign-in", data={"token": who.token, "csrf_token": match.group(1)})
    assert resp.status_code == 302, resp.get_data(as_text=True)[:300]


def jobs_of(env: WebEnv, who: Caller) -> int:
    with env.sessions() as session:
        return int(
            session.scalar(select(func.count()).select_from(Job).where(Job.tenant_id == who.tenant_id)) or 0
        )


def test_api_routes_answer_503_with_retry_after_while_the_database_is_down_and_recover(
    proxied: WebEnv, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caller = proxied.new_caller()
    job = proxied.submit(caller)
    status_url = f"/v1/jobs/{job['id']}"
    assert proxied.client.get(status_url, headers=caller.headers).status_code == 200

    proxy.cut()
    caplog.set_level(logging.WARNING, logger="factgate.web")
    # The first poll meets the pooled connection the restart killed, the next ones a refused connect.
    for _ in range(3):
        unavailable_error(proxied.client.get(status_url, headers=caller.headers), proxy.port)
    unavailable_error(proxied.client.get("/v1/jobs", headers=caller.headers), proxy.port)
    unavailable_error(proxied.client.get(f"{status_url}/results", headers=caller.headers), proxy.port)
    refused = proxied.client.post(
        "/v1/jobs",
        json={"kind": "claims", "items": [{"id": "x", "claim": "Rust 1.0 was released in May 2015."}]},
        headers={**caller.headers, "Idempotency-Key": "outage-1"},
    )
    unavailable_error(refused, proxy.port)
    # One warning line per refused request, no traceback: an outage is not a bug.
    web_records = [r for r in caplog.records if r.name == "factgate.web"]
    assert web_records and all(r.levelno == logging.WARNING and r.exc_info is None for r in web_records)
    assert all("database unreachable" in r.getMessage() for r in web_records)
    # Liveness does not touch the database: the process is fine, it must not be restarted for this.
    assert proxied.client.get("/healthz").status_code == 200

    proxy.restore()
    back = proxied.client.get(status_url, headers=caller.headers)
    assert back.status_code == 200 and back.get_json()["id"] == job["id"]
    assert jobs_of(proxied, caller) == 1  # the refused submission stored nothing
    resent = proxied.client.post(
        "/v1/jobs",
        json={"kind": "claims", "items": [{"id": "x", "claim": "Rust 1.0 was released in May 2015."}]},
        headers={**caller.headers, "Idempotency-Key": "outage-1"},
    )
    assert resent.status_code == 202  # the same key sent again is a new job: the first never existed
    assert jobs_of(proxied, caller) == 2


def test_pages_answer_an_html_503_while_the_database_is_down_and_recover(
    proxied: WebEnv, proxy: TcpProxy
) -> None:
    caller = proxied.new_caller()
    job = proxied.submit(caller)
    sign_in(proxied.client, caller)
    assert proxied.client.get("/jobs").status_code == 200

    proxy.cut()
    for path in ("/jobs", f"/jobs/{job['id']}", "/usage"):
        resp = proxied.client.get(path)
        assert resp.status_code == 503, (path, resp.status_code)
        assert resp.mimetype == "text/html"
        assert resp.headers["Retry-After"] == str(RETRY_AFTER_S)
        page = resp.get_data(as_text=True)
        assert "Temporarily unavailable" in page and "503" in page
        assert str(proxy.port) not in page
    # The page's own progress poll is JSON, so its script keeps polling instead of parsing HTML.
    unavailable_error(proxied.client.get(f"/jobs/{job['id']}/progress.json"), proxy.port)

    proxy.restore()
    assert proxied.client.get("/jobs").status_code == 200  # the page session survived the outage


def test_readyz_is_503_naming_the_database_while_it_is_down_then_200(
    proxied: WebEnv, proxy: TcpProxy
) -> None:
    ready = proxied.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.get_json() == {"status": "ready", "checks": {"database": "ok"}}

    proxy.cut()
    down = proxied.client.get("/readyz")
    assert down.status_code == 503
    assert down.headers["Retry-After"] == str(RETRY_AFTER_S)
    assert down.get_json() == {"status": "unavailable", "checks": {"database": "unreachable"}}
    live = proxied.client.get("/healthz")
    assert live.status_code == 200 and live.get_json()["status"] == "ok"

    proxy.restore()
    assert proxied.client.get("/readyz").get_json() == {"status": "ready", "checks": {"database": "ok"}}


def test_a_statement_the_database_refuses_is_still_a_500(
    web: WebEnv, caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Undefined table (ProgrammingError) and a statement timeout (an OperationalError, 57014): bugs to fix,
    not outages to wait out, so no 503 and no Retry-After."""
    statements = iter(
        [
            "SELECT * FROM no_such_table",
            "SET LOCAL statement_timeout = 1; SELECT pg_sleep(5)",
        ]
    )

    def refused(session: Any, *_a: Any, **_kw: Any) -> Any:
        for sql in next(statements).split("; "):
            session.execute(text(sql))
        raise AssertionError("the statement was expected to fail")

    monkeypatch.setattr("web.api.list_jobs", refused)
    for _ in range(2):
        resp = web.client.get("/v1/jobs", headers=caller.headers)
        assert resp.status_code == 500, resp.get_data(as_text=True)[:300]
        assert resp.get_json()["error"]["type"] == "server_error"
        assert "Retry-After" not in resp.headers


def test_liveness_touches_no_dependency(web: WebEnv) -> None:
    resp = web.client.get("/healthz")
    assert resp.status_code == 200
    assert resp.get_json() == {"status": "ok", "mode": "server", "simulated": True}


def test_readyz_pings_redis_in_server_mode(
    web_settings: dict[str, Any], memory_celery: Any, redis_client: Any
) -> None:
    env = make_env({**web_settings, "redis_url": REDIS_URL}, memory_celery)
    try:
        body = env.client.get("/readyz").get_json()
        assert body == {"status": "ready", "checks": {"database": "ok", "redis": "ok"}}
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_readyz_is_503_when_redis_is_down(web_settings: dict[str, Any], memory_celery: Any) -> None:
    # Port 9 (discard) has no Redis: the ping fails fast, and the answer says so without details.
    env = make_env({**web_settings, "redis_url": "redis://:s3cret@127.0.0.1:9/0"}, memory_celery)
    try:
        resp = env.client.get("/readyz")
        assert resp.status_code == 503
        assert resp.headers["Retry-After"] == str(RETRY_AFTER_S)
        assert resp.get_json() == {
            "status": "unavailable",
            "checks": {"database": "ok", "redis": "unreachable"},
        }
        assert "s3cret" not in resp.get_data(as_text=True)
        assert env.client.get("/healthz").status_code == 200
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_readyz_in_embedded_mode_checks_the_database_only(tmp_path: Any, memory_celery: Any) -> None:
    env = make_env(
        {"database_url": None, "redis_url": None, "perplexity_api_key": None, "instance_path": tmp_path},
        memory_celery,
    )
    try:
        assert env.client.get("/readyz").get_json() == {"status": "ready", "checks": {"database": "ok"}}
        assert env.client.get("/healthz").get_json()["mode"] == "embedded"
    finally:
        env.app.extensions["factgate"].engine.dispose()
