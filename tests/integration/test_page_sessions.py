"""Page sessions end when access ends, through the Flask test client on real Postgres: a revoked token,
sign-out (a copy of the old cookie included), the idle and absolute timeouts, the progress poll that is
not activity, `last_used_at` on API and page use, and the TLS settings (ProxyFix, Secure cookie, HSTS).

Timeouts are tested by moving the stored timestamps back, never by sleeping.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from flask.testing import FlaskClient
from sqlalchemy import select, update

from jobs.sessions import page_session_is_live
from jobs.tenancy import revoke_token
from models import ApiToken, WebSession, session_scope, utcnow
from tests.e2e.builders import claim_output, finalize, settle, submit_claims
from tests.integration.test_api_streaming import claims_job, received_text
from tests.integration.test_cli_helpers import clean_env, cli
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    make_env,
    memory_celery,
    web_settings,
)
from web.exports import CHUNK_ITEMS

pytestmark = pytest.mark.integration

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
COOKIE = "factgate_session"
IDLE_S = 600
MAX_S = 3600
ROWS: list[dict[str, Any]] = [
    {"id": "s1", "claim": "Rust 1.0 was released in May 2015.", "label": True},
    {"id": "s2", "claim": "Git was created by Guido van Rossum.", "label": False},
]


@pytest.fixture
def web(web_settings: dict[str, Any], memory_celery: Celery) -> Iterator[WebEnv]:
    """The app with short timeouts (so moved timestamps stay small) and the test's own database."""
    env = make_env({**web_settings, "session_idle_s": IDLE_S, "session_max_s": MAX_S}, memory_celery)
    yield env
    env.app.extensions["factgate"].engine.dispose()


def csrf_token(client: FlaskClient, path: str = "/sign-in") -> str:
    match = CSRF_RE.search(client.get(path).get_data(as_text=True))
    assert match, f"no CSRF token on {path}"
    return match.group(1)


def sign_in(client: FlaskClient, who: Caller) -> None:
    resp = client.post("/sign-in", data={"token": who.token, "csrf_token": csrf_token(client)})
    assert resp.status_code == 302, resp.get_data(as_text=True)[:300]
    assert resp.headers["Location"].endswith("/jobs")


def refused(resp: Any) -> str:
    """A page request sent back to sign-in; returns where."""
    assert resp.status_code == 302, (resp.status_code, resp.get_data(as_text=True)[:300])
    location: str = resp.headers["Location"]
    assert location.startswith("/sign-in"), location
    return location


def sign_in_page(client: FlaskClient) -> str:
    page = client.get("/sign-in")
    assert page.status_code == 200
    return page.get_data(as_text=True)


def web_sessions(web: WebEnv, who: Caller) -> list[WebSession]:
    with web.sessions() as session:
        return list(
            session.scalars(
                select(WebSession)
                .where(WebSession.tenant_id == who.tenant_id)
                .order_by(WebSession.created_at)
            )
        )


def only_session(web: WebEnv, who: Caller) -> WebSession:
    (row,) = web_sessions(web, who)
    return row


def move_session(web: WebEnv, session_id: uuid.UUID, **ago_s: float) -> None:
    """Set `created_at` / `last_seen_at` to that many seconds before now."""
    now = utcnow()
    values = {name: now - timedelta(seconds=s) for name, s in ago_s.items()}
    with session_scope(web.sessions) as session:
        session.execute(update(WebSession).where(WebSession.id == session_id).values(**values))


def token_row(web: WebEnv, who: Caller) -> ApiToken:
    with web.sessions() as session:
        row = session.scalar(select(ApiToken).where(ApiToken.tenant_id == who.tenant_id))
        assert row is not None
        return row


def set_last_used(web: WebEnv, who: Caller, value: datetime | None) -> None:
    with session_scope(web.sessions) as session:
        session.execute(
            update(ApiToken).where(ApiToken.tenant_id == who.tenant_id).values(last_used_at=value)
        )


def failed_job(web: WebEnv, who: Caller) -> str:
    """A finished claims job with one failed item: its retry would spend money."""
    job_id = submit_claims(web.client.post, who.headers, ROWS, mode="grounded")
    settle(
        web.sessions,
        job_id,
        {("s1", "grounded"): claim_output(0.9, "r-s1"), ("s2", "grounded"): ("failed", "upstream 500")},
    )
    finalize(web.sessions, job_id)
    web.drain_messages()
    return job_id


# --- the cookie holds a session, not a tenant --------------------------------------------------------------


def test_sign_in_opens_a_server_side_session_and_the_cookie_holds_only_its_secret(
    web: WebEnv, caller: Caller
) -> None:
    web.client.get("/sign-in", headers={"User-Agent": "pytest-browser/1.0"})
    resp = web.client.post(
        "/sign-in",
        data={"token": caller.token, "csrf_token": csrf_token(web.client)},
        headers={"User-Agent": "pytest-browser/1.0"},
    )
    assert resp.status_code == 302
    row = only_session(web, caller)
    assert row.ended_at is None and row.token_id == token_row(web, caller).id
    assert row.user_agent == "pytest-browser/1.0"
    with web.client.session_transaction() as cookie:
        assert set(cookie) <= {"sid", "csrf_token", "_flashes", "_permanent"}
        assert str(caller.tenant_id) not in str(dict(cookie))
        secret = cookie["sid"]
    assert len(secret) >= 40 and secret not in (row.secret_sha256, str(row.id))
    assert web.client.get("/jobs").status_code == 200


def test_a_cookie_naming_a_tenant_instead_of_a_session_is_refused(web: WebEnv, caller: Caller) -> None:
    """The old cookie format (the tenant id) and a made-up session secret both mean: sign in."""
    with web.client.session_transaction() as cookie:
        cookie["tenant_id"] = str(caller.tenant_id)
    refused(web.client.get("/jobs"))
    with web.client.session_transaction() as cookie:
        cookie["sid"] = "made-up-" + uuid.uuid4().hex
    refused(web.client.get("/jobs"))
    assert "Your session has ended" in sign_in_page(web.client)


# --- revoking the token --------------------------------------------------------------------------------


def test_revoking_the_token_ends_the_page_session_at_the_next_request(web: WebEnv, caller: Caller) -> None:
    job_id = failed_job(web, caller)
    sign_in(web.client, caller)
    assert web.client.get(f"/jobs/{job_id}").status_code == 200
    csrf = csrf_token(web.client, "/jobs")
    # Revoked behind the app's back (no session is ended here): the next request must notice.
    with session_scope(web.sessions) as session:
        assert revoke_token(session, str(token_row(web, caller).id)) == 1
    assert only_session(web, caller).ended_at is None

    # The retry form would spend money: refused, nothing queued, the failed item untouched.
    refused(web.client.post(f"/jobs/{job_id}/retry", data={"csrf_token": csrf}))
    assert web.drain_messages() == []
    assert [i.status for i in web.items(job_id) if i.custom_id == "s2"] == ["failed"]
    row = only_session(web, caller)
    assert row.ended_at is not None and row.end_reason == "revoked"
    assert "token it was opened with has been revoked" in sign_in_page(web.client)
    for path in ("/jobs", f"/jobs/{job_id}", f"/jobs/{job_id}/results.csv", f"/jobs/{job_id}/report.html"):
        refused(web.client.get(path))
    poll = web.client.get(f"/jobs/{job_id}/progress.json")
    assert poll.status_code == 401
    assert poll.get_json()["error"]["type"] == "authentication_error"
    # And the API says the same about the token.
    assert web.client.get("/v1/jobs", headers=caller.headers).status_code == 401


def test_tokens_revoke_ends_the_sessions_it_opened_at_once(
    web: WebEnv, caller: Caller, web_settings: dict[str, Any]
) -> None:
    sign_in(web.client, caller)
    other = web.app.test_client()
    sign_in(other, caller)
    assert [s.ended_at for s in web_sessions(web, caller)] == [None, None]
    # Server mode; this command never touches Redis.
    env = clean_env(DATABASE_URL=web_settings["database_url"], REDIS_URL="redis://127.0.0.1:1/0")
    run = cli("tokens", "revoke", str(token_row(web, caller).id), env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "revoked"
    assert "ended 2 page session(s)" in run.stderr
    assert [s.end_reason for s in web_sessions(web, caller)] == ["revoked", "revoked"]
    refused(web.client.get("/jobs"))
    refused(other.get("/jobs"))


# --- signing out ---------------------------------------------------------------------------------------


def test_sign_out_ends_the_session_and_a_copy_of_the_cookie(web: WebEnv, caller: Caller) -> None:
    job_id = failed_job(web, caller)
    sign_in(web.client, caller)
    csrf = csrf_token(web.client, "/jobs")
    copied = web.client.get_cookie(COOKIE)
    assert copied is not None

    resp = web.client.post("/sign-out", data={"csrf_token": csrf})
    assert resp.status_code == 302
    row = only_session(web, caller)
    assert row.ended_at is not None and row.end_reason == "signed_out"
    refused(web.client.get("/jobs"))

    def thief() -> FlaskClient:
        """Another browser holding the copy (each request starts from the copy itself)."""
        client = web.app.test_client()
        client.set_cookie(COOKIE, copied.value)
        return client

    refused(thief().post(f"/jobs/{job_id}/retry", data={"csrf_token": csrf}))  # its CSRF token is valid
    refused(thief().post(f"/jobs/{job_id}/cancel", data={"csrf_token": csrf}))
    assert web.drain_messages() == []
    assert web.job(job_id).status == "completed"
    assert [i.status for i in web.items(job_id) if i.custom_id == "s2"] == ["failed"]
    refused(thief().get("/jobs"))
    refused(thief().get(f"/jobs/{job_id}/results.ndjson"))
    assert thief().get(f"/jobs/{job_id}/progress.json").status_code == 401
    thief = thief()
    refused(thief.get("/jobs"))
    assert "This session was signed out" in sign_in_page(thief)


@pytest.mark.parametrize("how", ["signed out in another tab", "token revoked"])
def test_a_download_under_way_stops_at_the_next_chunk_once_the_session_ends(
    web: WebEnv, caller: Caller, how: str
) -> None:
    """Access ends with the grant: a results download that began before the session ended sends the rest
    of the chunk it holds and then stops, without the trailer that marks a whole file."""
    job_id = claims_job(web, caller, 2_500)
    sign_in(web.client, caller)
    csrf = csrf_token(web.client, "/jobs")
    resp = web.client.get(f"/jobs/{job_id}/results.ndjson", buffered=False)
    assert resp.status_code == 200
    pieces = iter(resp.response)
    received = [next(pieces) for _ in range(3)]  # under way: the first chunk is being sent
    if how == "token revoked":
        with session_scope(web.sessions) as session:
            assert revoke_token(session, str(token_row(web, caller).id)) == 1
    else:
        assert web.client.post("/sign-out", data={"csrf_token": csrf}).status_code == 302
    received.extend(pieces)
    resp.close()
    ids = [json.loads(line)["custom_id"] for line in received_text(received).splitlines()]  # no `_end`
    assert 3 <= len(ids) <= CHUNK_ITEMS and ids == [f"r{i:05d}" for i in range(len(ids))]
    refused(web.client.get(f"/jobs/{job_id}/results.ndjson"))


def test_what_a_download_rechecks_between_chunks(web: WebEnv, caller: Caller) -> None:
    """Ended, revoked and past its lifetime stop a download; idleness does not (the download is activity)."""
    sign_in(web.client, caller)
    sid = only_session(web, caller).id

    def live() -> bool:
        with web.sessions() as session:
            return page_session_is_live(session, sid, max_s=MAX_S)

    move_session(web, sid, last_seen_at=IDLE_S * 2)
    assert live()
    move_session(web, sid, created_at=MAX_S + 1)
    assert not live()
    move_session(web, sid, created_at=0)
    assert live()
    with session_scope(web.sessions) as session:
        assert revoke_token(session, str(token_row(web, caller).id)) == 1
    assert not live()
    assert only_session(web, caller).ended_at is None  # the check ends nothing: the next page request does


def test_signing_in_again_replaces_the_browsers_session(web: WebEnv, caller: Caller) -> None:
    sign_in(web.client, caller)
    first = web.client.get_cookie(COOKIE)
    assert first is not None
    # Signing in while signed in (another token, say): GET /sign-in redirects, the form still works.
    assert web.client.get("/sign-in").status_code == 302
    resp = web.client.post(
        "/sign-in", data={"token": caller.token, "csrf_token": csrf_token(web.client, "/jobs")}
    )
    assert resp.status_code == 302
    old, new = web_sessions(web, caller)
    assert old.end_reason == "replaced" and new.ended_at is None
    stale = web.app.test_client()
    stale.set_cookie(COOKIE, first.value)
    refused(stale.get("/jobs"))
    assert web.client.get("/jobs").status_code == 200


# --- timeouts ------------------------------------------------------------------------------------------


def test_idle_timeout_ends_the_session_and_page_requests_postpone_it(web: WebEnv, caller: Caller) -> None:
    sign_in(web.client, caller)
    row = only_session(web, caller)
    # Just inside the idle timeout: the page opens and counts as activity.
    move_session(web, row.id, last_seen_at=IDLE_S - 30)
    assert web.client.get("/jobs").status_code == 200
    seen = only_session(web, caller).last_seen_at
    assert utcnow() - seen < timedelta(seconds=30)

    move_session(web, row.id, last_seen_at=IDLE_S + 1)
    location = refused(web.client.get("/requests"))
    assert "next=/requests" in location
    row = only_session(web, caller)
    assert row.end_reason == "idle"
    assert "Your session ended after 10 minutes without activity" in sign_in_page(web.client)
    # Ended for good: moving the clock forward again does not revive it.
    move_session(web, row.id, last_seen_at=0)
    refused(web.client.get("/jobs"))


def test_absolute_timeout_ends_a_busy_session(web: WebEnv, caller: Caller) -> None:
    sign_in(web.client, caller)
    row = only_session(web, caller)
    move_session(web, row.id, created_at=MAX_S - 60, last_seen_at=1)
    assert web.client.get("/jobs").status_code == 200
    move_session(web, row.id, created_at=MAX_S + 1, last_seen_at=1)
    refused(web.client.get("/jobs"))
    assert only_session(web, caller).end_reason == "expired"
    assert "a session lasts at most 1 hour after sign-in" in sign_in_page(web.client)


def test_the_progress_poll_does_not_extend_the_idle_timeout(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    sign_in(web.client, caller)
    assert 'data-live="true"' in web.client.get(f"/jobs/{job_id}").get_data(as_text=True)
    row = only_session(web, caller)
    move_session(web, row.id, last_seen_at=IDLE_S - 5)
    before = only_session(web, caller).last_seen_at
    for _ in range(3):
        poll = web.client.get(f"/jobs/{job_id}/progress.json")
        assert poll.status_code == 200
        assert "Set-Cookie" not in poll.headers  # the poll does not re-sign the cookie either
    assert only_session(web, caller).last_seen_at == before

    move_session(web, row.id, last_seen_at=IDLE_S + 1)
    poll = web.client.get(f"/jobs/{job_id}/progress.json")
    assert poll.status_code == 401
    assert "without activity" in poll.get_json()["error"]["message"]
    assert only_session(web, caller).end_reason == "idle"
    # The page's script reloads on 401: the reload lands on sign-in, saying why.
    refused(web.client.get(f"/jobs/{job_id}"))
    assert "without activity" in sign_in_page(web.client)


def test_page_requests_do_not_resend_the_cookie(web: WebEnv, caller: Caller) -> None:
    sign_in(web.client, caller)
    web.client.get("/jobs")  # the CSRF token is in the cookie from the sign-in page already
    resp = web.client.get("/requests")
    assert resp.status_code == 200
    assert "Set-Cookie" not in resp.headers


# --- last_used_at --------------------------------------------------------------------------------------


def test_last_used_at_is_written_on_api_use_at_most_once_a_minute(web: WebEnv, caller: Caller) -> None:
    assert token_row(web, caller).last_used_at is None
    assert web.client.get("/v1/jobs", headers=caller.headers).status_code == 200
    first = token_row(web, caller).last_used_at
    assert first is not None and utcnow() - first < timedelta(seconds=30)
    assert web.client.get("/v1/jobs", headers=caller.headers).status_code == 200
    assert token_row(web, caller).last_used_at == first  # throttled

    almost = utcnow() - timedelta(seconds=50)
    set_last_used(web, caller, almost)
    web.client.get("/v1/jobs", headers=caller.headers)
    assert token_row(web, caller).last_used_at == almost
    stale = utcnow() - timedelta(seconds=61)
    set_last_used(web, caller, stale)
    web.client.get("/v1/jobs", headers=caller.headers)
    latest = token_row(web, caller).last_used_at
    assert latest is not None and latest > stale + timedelta(seconds=30)
    # A refused token is never marked used.
    other = web.new_caller()
    web.client.get("/v1/jobs", headers={"Authorization": f"Bearer {other.token}x"})
    assert token_row(web, other).last_used_at is None


def test_last_used_at_is_written_on_page_use_but_not_by_the_poll(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    set_last_used(web, caller, None)
    sign_in(web.client, caller)
    signed_in = token_row(web, caller).last_used_at
    assert signed_in is not None

    stale = utcnow() - timedelta(seconds=120)
    set_last_used(web, caller, stale)
    assert web.client.get(f"/jobs/{job_id}/progress.json").status_code == 200
    assert token_row(web, caller).last_used_at == stale  # background: not use
    assert web.client.get("/jobs").status_code == 200
    used = token_row(web, caller).last_used_at
    assert used is not None and used > stale + timedelta(seconds=60)
    assert web.client.get(f"/jobs/{job_id}").status_code == 200
    assert token_row(web, caller).last_used_at == used  # throttled


# --- TLS: ProxyFix, Secure cookie, HSTS -----------------------------------------------------------------


def tls_env(web_settings: dict[str, Any], celery: Celery, **overrides: Any) -> WebEnv:
    return make_env({**web_settings, **overrides}, celery)


def sign_in_cookie(client: FlaskClient, who: Caller, **kw: Any) -> str:
    page = client.get("/sign-in", **kw)
    match = CSRF_RE.search(page.get_data(as_text=True))
    assert match
    resp = client.post("/sign-in", data={"token": who.token, "csrf_token": match.group(1)}, **kw)
    assert resp.status_code == 302
    cookie: str = resp.headers["Set-Cookie"]
    return cookie


def test_forwarded_https_is_ignored_unless_a_proxy_is_trusted(
    web_settings: dict[str, Any], memory_celery: Celery
) -> None:
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "factgate.example"}
    plain = tls_env(web_settings, memory_celery)
    proxied = tls_env(web_settings, memory_celery, trust_proxy=1)
    try:
        resp = plain.client.get("/healthz", headers=forwarded)
        assert "Strict-Transport-Security" not in resp.headers
        cookie = sign_in_cookie(plain.client, plain.new_caller(), headers=forwarded)
        assert "Secure" not in cookie

        resp = proxied.client.get("/healthz", headers=forwarded)
        assert resp.headers["Strict-Transport-Security"] == "max-age=31536000"
        assert "Strict-Transport-Security" in proxied.client.get("/sign-in", headers=forwarded).headers
        cookie = sign_in_cookie(proxied.client, proxied.new_caller(), headers=forwarded)
        assert "Secure" in cookie
        # Without the header the trusted setup still serves plain http as plain http.
        assert "Strict-Transport-Security" not in proxied.client.get("/healthz").headers
    finally:
        plain.app.extensions["factgate"].engine.dispose()
        proxied.app.extensions["factgate"].engine.dispose()


def test_proxy_hops_take_the_value_the_trusted_proxy_appended(
    web_settings: dict[str, Any], memory_celery: Celery
) -> None:
    """With two trusted proxies the value the outer one appended (second from the right) counts: a client
    that connects over http and sends its own `X-Forwarded-Proto: https` does not become https."""
    env = tls_env(web_settings, memory_celery, trust_proxy=2)
    try:
        # client → outer proxy over http (the client's own "https" first), outer → inner over http.
        spoofed = env.client.get("/healthz", headers={"X-Forwarded-Proto": "https, http, http"})
        assert "Strict-Transport-Security" not in spoofed.headers
        # client → outer proxy over https, outer → inner over http.
        honest = env.client.get("/healthz", headers={"X-Forwarded-Proto": "https, http"})
        assert "Strict-Transport-Security" in honest.headers
        # Fewer values than trusted proxies: not believed at all.
        assert (
            "Strict-Transport-Security"
            not in env.client.get("/healthz", headers={"X-Forwarded-Proto": "https"}).headers
        )
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_cookie_secure_forces_the_flag_over_plain_http(
    web_settings: dict[str, Any], memory_celery: Celery
) -> None:
    env = tls_env(web_settings, memory_celery, cookie_secure=True)
    try:
        cookie = sign_in_cookie(env.client, env.new_caller())
        assert "Secure" in cookie and "HttpOnly" in cookie
        assert "Strict-Transport-Security" not in env.client.get("/healthz").headers  # still http
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_hsts_on_https_only_and_off_with_a_zero_max_age(
    web_settings: dict[str, Any], memory_celery: Celery
) -> None:
    env = tls_env(web_settings, memory_celery)
    off = tls_env(web_settings, memory_celery, hsts_max_age_s=0)
    try:
        https = env.client.get("/healthz", base_url="https://localhost")
        assert https.headers["Strict-Transport-Security"] == "max-age=31536000"
        assert "Strict-Transport-Security" not in env.client.get("/healthz").headers
        assert (
            "Strict-Transport-Security"
            not in off.client.get("/healthz", base_url="https://localhost").headers
        )
    finally:
        env.app.extensions["factgate"].engine.dispose()
        off.app.extensions["factgate"].engine.dispose()
