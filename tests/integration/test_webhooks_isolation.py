"""One tenant's webhooks cannot hold up another's, on real Postgres, without a worker (the worker's side
is tests/integration/test_webhooks_delivery.py): a receiver trickling its answer ends as a recorded failure
at the attempt's deadline; a non-ASCII host and any exception raised while sending are recorded failures
that end `failed` after the retry window; an attempt that never recorded a result is given up once its
window has closed; senders claim due deliveries round robin across tenants.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine, select, update

import clients.webhooks
import workers.webhooks as sender
from config import Settings
from jobs.intake import UnitSpec, create_job
from jobs.tenancy import get_or_create_tenant
from jobs.webhooks import claim_due
from models import WebhookAttempt, WebhookDelivery, make_session_factory, session_scope, utcnow
from tests.integration.stack import fresh_database
from tests.services import redis_db_url
from workers.context import WorkerContext, build_context

pytestmark = pytest.mark.integration

RESPONSE = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"


@dataclass
class Trickler:
    """A receiver that reads the request, then answers one byte a second (a whole answer takes ~40 s)."""

    port: int = 0
    connections: int = 0
    answered_whole: int = 0
    cut_off: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def trickler() -> Iterator[Trickler]:
    rec = Trickler()
    server = socket.create_server(("127.0.0.1", 0))
    rec.port = server.getsockname()[1]
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            for byte in RESPONSE:
                if stop.wait(1.0):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    with rec.lock:
                        rec.cut_off += 1
                    return
            with rec.lock:
                rec.answered_whole += 1

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with rec.lock:
                rec.connections += 1
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, name="trickler", daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


@pytest.fixture
def db() -> Iterator[Engine]:
    with fresh_database() as (_url, engine):
        yield engine


def context(engine: Engine, **env: str) -> WorkerContext:
    settings = Settings.from_env(
        {
            "DATABASE_URL": engine.url.render_as_string(hide_password=False),
            "REDIS_URL": redis_db_url(12),
            "PERPLEXITY_API_KEY": "webhook-test-key",
            "FACTGATE_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
            "FACTGATE_WEBHOOK_ALLOW_PRIVATE": "1",
            "FACTGATE_WEBHOOK_CONNECT_TIMEOUT_S": "2",
            "FACTGATE_WEBHOOK_TIMEOUT_S": "3",
            "FACTGATE_WEBHOOK_RETRY_BASE_S": "1",
            **env,
        }
    )
    return build_context(settings)


def deliveries(engine: Engine, tenant: str, urls: list[str], *, age_s: float = 0.0) -> list[uuid.UUID]:
    """A job of `tenant` with one due delivery per URL, the first due earliest."""
    now = utcnow() - timedelta(seconds=age_s)
    with session_scope(make_session_factory(engine)) as s:
        t = get_or_create_tenant(s, tenant)
        unit = UnitSpec(stage="claim", custom_id="c1", mode="ungrounded", input={"claim": "x"})
        job, _ = create_job(s, tenant_id=t.id, kind="claims", options={}, units=[unit])
        ids = []
        for n, url in enumerate(urls):
            delivery_id = uuid.uuid4()
            due = now + timedelta(milliseconds=n)
            s.add(
                WebhookDelivery(
                    id=delivery_id, webhook_id=f"msg_{delivery_id.hex}", tenant_id=t.id, job_id=job.id,
                    event="job.completed", url=url, body="{}", status="pending", attempts=0,
                    next_attempt_at=due, scheduled_at=due, created_at=due,
                )
            )  # fmt: skip
            ids.append(delivery_id)
        return ids


def state(engine: Engine, delivery_id: uuid.UUID) -> tuple[WebhookDelivery, list[WebhookAttempt]]:
    with session_scope(make_session_factory(engine)) as s:
        row = s.get(WebhookDelivery, delivery_id)
        assert row is not None
        attempts = list(
            s.scalars(
                select(WebhookAttempt)
                .where(WebhookAttempt.delivery_id == delivery_id)
                .order_by(WebhookAttempt.attempt)
            )
        )
        s.expunge_all()
        return row, attempts


def test_a_trickling_receiver_is_a_recorded_failure_at_the_attempts_deadline(
    db: Engine, trickler: Trickler
) -> None:
    [delivery_id] = deliveries(db, "slow", [f"http://127.0.0.1:{trickler.port}/hook"])
    ctx = context(db)
    try:
        # Each byte comes well within the per-read timeout; the whole answer would take ~40 s.
        assert sender.deliver_due(ctx) == 1
    finally:
        ctx.close()
    row, attempts = state(db, delivery_id)
    with trickler.lock:
        assert trickler.connections == 1 and trickler.answered_whole == 0
    assert row.status == "pending" and row.next_attempt_at is not None and row.locked_until is None
    assert [(a.attempt, a.status_code, a.error) for a in attempts] == [
        (1, None, "no complete response from 127.0.0.1 within 3 s")
    ]


def test_a_non_ascii_host_is_sent_in_idna_form_recorded_and_ends_failed(
    db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def loopback(host: str, port: int, **_: Any) -> list[Any]:
        seen.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    real_resolve = clients.webhooks.resolve

    def resolve(host: str, port: int, *_: Any) -> Any:
        return real_resolve(host, port, loopback)

    monkeypatch.setattr(clients.webhooks, "resolve", resolve)
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: every attempt fails
    [delivery_id] = deliveries(db, "umlaut", [f"http://b\u00fccher.example:{port}/hook"])
    ctx = context(db, FACTGATE_WEBHOOK_RETRY_FOR_S="2.5")
    try:
        for _ in range(20):
            sender.deliver_due(ctx)
            if state(db, delivery_id)[0].status != "pending":
                break
            time.sleep(0.5)
    finally:
        ctx.close()
    row, attempts = state(db, delivery_id)
    assert seen and set(seen) == {"xn--bcher-kva.example"}
    assert row.status == "failed" and row.next_attempt_at is None and row.locked_until is None
    # Retried while its window lasted (once or more, as the machine's speed allows), then given up.
    assert attempts and all(a.status_code is None and a.error for a in attempts)
    assert attempts[-1].next_attempt_at is None
    assert all(a.next_attempt_at is not None for a in attempts[:-1])


def test_any_exception_while_sending_is_a_recorded_failure_and_ends_failed(
    db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*_: Any, **__: Any) -> Any:
        raise UnicodeEncodeError("ascii", "b\u00fccher.example", 1, 2, "ordinal not in range(128)")

    monkeypatch.setattr(sender, "send", explode)
    [delivery_id] = deliveries(db, "broken", ["http://hooks.example/x"])
    ctx = context(db, FACTGATE_WEBHOOK_RETRY_FOR_S="0.5")  # the first retry would already be too late
    try:
        assert sender.deliver_due(ctx) == 1
        assert sender.deliver_due(ctx) == 0  # nothing is claimed again
    finally:
        ctx.close()
    row, attempts = state(db, delivery_id)
    assert row.status == "failed" and row.attempts == 1 and row.locked_until is None
    assert row.last_error is not None and row.last_error.startswith("UnicodeEncodeError while sending: ")
    assert [(a.attempt, a.error) for a in attempts] == [(1, row.last_error)]


def test_an_attempt_that_never_recorded_a_result_ends_failed_once_its_window_closed(db: Engine) -> None:
    old, fresh = deliveries(db, "lost", ["http://hooks.example/a", "http://hooks.example/b"], age_s=7200)
    factory = make_session_factory(db)
    with session_scope(factory) as s:
        held = claim_due(s, lock_s=60, limit=2)
        assert {c.id for c in held} == {old, fresh}
        # Both senders died holding them; only `old`'s window (one hour) has closed.
        s.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id.in_([old, fresh]))
            .values(locked_until=utcnow() - timedelta(seconds=1))
        )
        s.execute(update(WebhookDelivery).where(WebhookDelivery.id == fresh).values(scheduled_at=utcnow()))
    with session_scope(factory) as s:
        again = claim_due(s, lock_s=60, limit=5, retry_for_s=3600)
    assert [c.id for c in again] == [fresh]  # tried again within its window
    row, attempts = state(db, old)
    assert row.status == "failed" and row.next_attempt_at is None and row.locked_until is None
    assert row.last_error == "given up: the retry window closed and the last attempt never recorded a result"
    assert [(a.attempt, a.error) for a in attempts] == [(1, row.last_error)]


def test_senders_claim_due_deliveries_round_robin_across_tenants(db: Engine) -> None:
    # `busy` has a backlog due before anything of `quiet`'s.
    busy = deliveries(db, "busy", [f"http://hooks.example/{n}" for n in range(6)], age_s=600)
    quiet = deliveries(db, "quiet", ["http://hooks.example/q1", "http://hooks.example/q2"])
    factory = make_session_factory(db)
    with session_scope(factory) as s:
        batch = [c.id for c in claim_due(s, lock_s=60, limit=4)]
    assert batch == [busy[0], quiet[0], busy[1], quiet[1]]
    # One at a time, as the sender threads claim: a tenant with a delivery in flight waits its turn.
    with session_scope(factory) as s:
        s.execute(update(WebhookDelivery).values(locked_until=None, attempts=0))
    claimed = []
    for _ in range(4):
        with session_scope(factory) as s:
            claimed += [c.id for c in claim_due(s, lock_s=60, limit=1)]
    assert claimed == [busy[0], quiet[0], busy[1], quiet[1]]
