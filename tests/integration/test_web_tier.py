"""The web tier stays answerable: no body is read before authentication, a body must keep a pace, and each
tenant streams a bounded number of exports at once (a 429 past it, released however a download ends).

The Flask app on the real test Postgres; the pace of a body on a real socket pair (tests/integration/
test_web_tier_server.py has the same under gunicorn, with /healthz answering while they all run).
"""

# Fixtures are imported from web_fixtures, so their names reappear as parameters.
# ruff: noqa: F811

from __future__ import annotations

import io
import socket
import threading
from typing import Any

import pytest
from sqlalchemy import func, select

from models import Job
from tests.integration.test_pages import csrf_token, sign_in
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    make_env,
    memory_celery,
    other_caller,
    settle_items,
    web,
    web_settings,
)
from web.body import BodyPace, BodyTooSlow, PacedInput
from web.export_slots import LOCAL

pytestmark = pytest.mark.integration

JOB = "00000000-0000-0000-0000-000000000000"


class NeverRead(io.BytesIO):
    """A request body that records whether anything asked for it."""

    def __init__(self) -> None:
        super().__init__(b"--b\r\n" + b"x" * 1024)
        self.reads = 0

    def read(self, size: int | None = -1, /) -> bytes:
        self.reads += 1
        return super().read(size)

    def readinto(self, b: Any, /) -> int:
        self.reads += 1
        return super().readinto(b)

    def readline(self, size: int | None = -1, /) -> bytes:
        self.reads += 1
        return super().readline(size)


PAGE_POSTS = (
    "/jobs/new",
    f"/jobs/{JOB}/cancel",
    f"/jobs/{JOB}/delete",
    f"/jobs/{JOB}/retry",
    f"/jobs/{JOB}/webhooks/1/redeliver",
    "/sign-out",
)


@pytest.mark.parametrize("path", PAGE_POSTS)
def test_a_page_post_without_a_session_is_refused_before_its_body_is_read(web: WebEnv, path: str) -> None:
    body = NeverRead()
    resp = web.client.post(
        path,
        input_stream=body,
        content_type="multipart/form-data; boundary=b",
    )
    assert resp.status_code == 302
    assert "/sign-in" in resp.headers["Location"]
    assert body.reads == 0


def test_a_signed_in_post_still_needs_its_csrf_token(web: WebEnv, caller: Caller) -> None:
    sign_in(web.client, caller)
    resp = web.client.post("/jobs/new", data={"paste": "{}"})
    assert resp.status_code == 400 and "Form not accepted" in resp.get_data(as_text=True)
    token = csrf_token(web.client, "/jobs/new")
    ok = web.client.post("/jobs/new", data={"csrf_token": token, "kind": "claims", "paste": ""})
    assert ok.status_code != 400 or "Form not accepted" not in ok.get_data(as_text=True)


def test_the_sign_in_form_is_the_one_read_without_a_session_and_it_is_small(
    web: WebEnv, caller: Caller
) -> None:
    token = csrf_token(web.client)
    resp = web.client.post("/sign-in", data={"token": caller.token, "csrf_token": token, "pad": "x" * 20_000})
    assert resp.status_code == 413
    signed = web.client.post("/sign-in", data={"token": caller.token, "csrf_token": token})
    assert signed.status_code == 302


# --- the pace of a body ------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Trickle:
    """A body that arrives `per_read` bytes per read, each read taking `took` seconds of the fake clock."""

    def __init__(self, clock: Clock, total: int, per_read: int, took: float) -> None:
        self.clock, self.left, self.per_read, self.took = clock, total, per_read, took

    def read(self, size: int = -1) -> bytes:
        self.clock.now += self.took
        n = min(self.left, self.per_read if size < 0 else min(size, self.per_read))
        self.left -= n
        return b"x" * n


def test_a_body_that_keeps_its_pace_is_read_whole() -> None:
    clock = Clock()
    paced = PacedInput(Trickle(clock, 10_000, 1_000, 0.5), BodyPace(2.0, 1_000), clock=clock)
    assert len(b"".join(iter(lambda: paced.read(4096), b""))) == 10_000


def test_a_body_that_falls_behind_stops_with_a_408() -> None:
    clock = Clock()
    paced = PacedInput(Trickle(clock, 10_000, 1, 1.0), BodyPace(2.0, 1_000), clock=clock)
    with pytest.raises(BodyTooSlow) as info:
        while paced.read(4096):
            pass
    assert info.value.code == 408


def test_a_read_blocked_on_a_silent_client_is_ended_by_the_watchdog() -> None:
    """One read of a server's body stream waits in `recv` for as long as the client likes; a check between
    reads never runs. The watchdog shuts the reading side down when the body falls behind, which ends it."""
    server, client = socket.socketpair()
    try:
        client.sendall(b"x" * 10)  # then silence, the connection left open
        stream = server.makefile("rb")
        paced = PacedInput(stream, BodyPace(0.2, 1_000_000), server)
        with pytest.raises(BodyTooSlow):
            while paced.read(1_000):
                pass
        paced.close()
        stream.close()
    finally:
        server.close()
        client.close()


def test_a_too_slow_submission_is_a_408_in_the_api_shape(
    web_settings: dict[str, Any], memory_celery: Any
) -> None:
    env = make_env({**web_settings, "body_grace_s": 0.05, "body_min_bytes_per_s": 1_000_000}, memory_celery)
    try:
        who = env.new_caller()

        class Slow(io.BytesIO):
            """A body whose second line comes later than its pace allows."""

            def __init__(self) -> None:
                super().__init__(b'{"id": "a", "claim": "one"}\n{"id": "b", "claim": "two"}\n')
                self.later = threading.Event()

            def read(self, size: int | None = -1, /) -> bytes:
                if self.tell():
                    self.later.wait(0.3)  # longer than the grace and the first line's allowance together
                return super().read(28)

        resp = env.client.post(
            "/v1/jobs?kind=claims", input_stream=Slow(), content_length=56, headers=who.ndjson_headers()
        )
        assert resp.status_code == 408, resp.get_data(as_text=True)
        err = resp.get_json()["error"]
        assert err["type"] == "invalid_request_error" and "too slowly" in err["message"]
        with env.sessions() as s:
            assert s.scalar(select(func.count()).select_from(Job).where(Job.tenant_id == who.tenant_id)) == 0
    finally:
        env.app.extensions["factgate"].engine.dispose()


# --- exports per tenant ------------------------------------------------------------------------------------


def _ended_job(web: WebEnv, who: Caller) -> str:
    jid: str = web.submit(who, mode="grounded")["id"]
    settle_items(web.sessions, jid, {(c, "grounded"): 0.9 for c in ("c1", "c2", "c3")})
    return jid


EXPORTS = ("/v1/jobs/{id}/results", "/v1/jobs/{id}/results?format=csv", "/v1/jobs/{id}/errors")


def test_a_tenant_streams_at_most_its_exports_at_once_and_a_hang_up_frees_one(
    web_settings: dict[str, Any], memory_celery: Any
) -> None:
    env = make_env({**web_settings, "max_exports_per_tenant": 2}, memory_celery)
    try:
        who, other = env.new_caller(), env.new_caller("other")
        jid, theirs = _ended_job(env, who), _ended_job(env, other)
        first = env.client.get(EXPORTS[0].format(id=jid), headers=who.headers, buffered=False)
        second = env.client.get(EXPORTS[1].format(id=jid), headers=who.headers, buffered=False)
        assert first.status_code == second.status_code == 200
        for path in EXPORTS:
            refused = env.client.get(path.format(id=jid), headers=who.headers)
            assert refused.status_code == 429, path
            err = refused.get_json()["error"]
            assert err["type"] == "quota_exceeded" and err["field"] == "max_exports_per_tenant"
            assert err["limit"] == 2 and "2 downloads" in err["message"]
            assert int(refused.headers["Retry-After"]) > 0
        # Another tenant's downloads do not wait behind these.
        assert env.client.get(EXPORTS[0].format(id=theirs), headers=other.headers).status_code == 200
        # A client that hangs up before reading anything gives its slot back ...
        first.close()
        third = env.client.get(EXPORTS[2].format(id=jid), headers=who.headers, buffered=False)
        assert third.status_code == 200
        # ... and so does a download read to its end.
        assert second.get_data(as_text=True).splitlines()[-1].startswith("#end")
        third.close()
        assert LOCAL.in_use(who.tenant_id) == 0
        sign_in(env.client, who)
        pages = [env.client.get(f"/jobs/{jid}/results.ndjson", buffered=False) for _ in range(2)]
        busy = env.client.get(f"/jobs/{jid}/results.csv")
        assert busy.status_code == 429 and "downloads" in busy.get_data(as_text=True)
        assert int(busy.headers["Retry-After"]) > 0
        for page in pages:
            page.close()
        assert env.client.get(f"/jobs/{jid}/results.csv").status_code == 200
    finally:
        env.app.extensions["factgate"].engine.dispose()
