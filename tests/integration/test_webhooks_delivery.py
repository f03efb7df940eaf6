"""Webhooks through the real server stack (Postgres, Redis, a `celery worker` process with its sweeper, the
simulator over HTTP) to a receiver in the test: a tiny HTTP server on 127.0.0.1.

- The receiver fails the first try: the worker retries with the same `webhook-id`, each attempt signed with
  the tenant's secret (as `factgate tenants webhook-secret` prints it, checked with the receiver snippet of
  docs/operations.md), the body carrying the job id and its final status; every attempt is recorded.
  Redelivering from the job page sends it once more, same id. The secret is in no log and no `pg_dump`.
- Without FACTGATE_WEBHOOK_ALLOW_PRIVATE a loopback target is refused: nothing is sent, and the refusal is
  recorded on the delivery.
- Receivers that never answer hold the webhook senders, never the worker's task threads: another tenant's
  job runs to its end on a worker of one thread meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from jobs.serialize import job_model
from jobs.tenancy import create_token, get_or_create_tenant, set_tenant
from models import Job, WebhookAttempt, WebhookDelivery, session_scope
from models.db import make_session_factory
from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.stack import Stack, fresh_database, running_stack
from tests.integration.test_pages import csrf_token, sign_in
from tests.integration.web_fixtures import Caller
from web.app import create_app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ENCRYPTION_KEY = Fernet.generate_key().decode()
ROWS = [
    {"id": "h1", "claim": "Rust 1.0 was released in May 2015.", "label": True},
    {"id": "h2", "claim": "The Linux kernel was first released in 1998.", "label": False},
]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class Receiver:
    """A webhook receiver: answers 500 to the first `fail_first` requests, 204 after; records them all."""

    fail_first: int = 1
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    status = 500 if len(receiver.requests) < receiver.fail_first else 204
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.requests.append(Received(self.path, headers, body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.requests)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), rec.handler())
    rec.port = server.server_port
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def stack_with(tmp: Path, concurrency: int = 4, **worker_env: str) -> Iterator[Stack]:
    """A stack (fresh database, the simulator, a worker whose sweeper runs every second)."""
    tmp.mkdir(parents=True, exist_ok=True)
    with (
        fresh_database() as (url, engine),
        run_in_thread(SimConfig(latency_s=0.01)) as sim,
        running_stack(
            url,
            engine,
            sim.base_url,
            tmp,
            **{
                "FACTGATE_ENCRYPTION_KEYS": ENCRYPTION_KEY,
                "FACTGATE_WEBHOOK_RETRY_BASE_S": "1",
                "FACTGATE_WEBHOOK_CONNECT_TIMEOUT_S": "2",
                "FACTGATE_WEBHOOK_TIMEOUT_S": "5",
                **worker_env,
            },
        ) as st,
    ):
        st.start_worker(concurrency=concurrency)
        yield st


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout:g} s")


def delivery_of(st: Stack, job_id: uuid.UUID) -> tuple[WebhookDelivery, list[WebhookAttempt]]:
    with Session(st.engine) as s:
        rows = list(s.scalars(select(WebhookDelivery).where(WebhookDelivery.job_id == job_id)))
        assert len(rows) == 1, rows
        attempts = list(
            s.scalars(
                select(WebhookAttempt)
                .where(WebhookAttempt.delivery_id == rows[0].id)
                .order_by(WebhookAttempt.attempt)
            )
        )
        s.expunge_all()
        return rows[0], attempts


def receiver_snippet() -> Callable[..., bool]:
    """`verify_webhook` exactly as docs/operations.md gives it to receivers (stdlib only)."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?def verify_webhook.*?)```", text, re.S)
    assert match, "docs/operations.md has no receiver snippet"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), "docs/operations.md", "exec"), namespace)
    verify: Callable[..., bool] = namespace["verify_webhook"]
    return verify


def test_a_failed_first_try_is_retried_with_the_same_id_signed_and_redelivered_from_the_page(
    tmp_path: Path, receiver: Receiver
) -> None:
    with stack_with(tmp_path / "stack", FACTGATE_WEBHOOK_ALLOW_PRIVATE="1") as st:
        # `localhost`: the worker resolves the name, checks the address and connects to it, Host kept.
        url = f"http://localhost:{receiver.port}/hooks/factgate?source=test"
        job_id = st.submit_claims(ROWS, {"mode": "grounded", "webhook_url": url}, tenant="acme")
        assert st.wait_job(job_id, timeout=120).status == "completed"
        got = wait_for(lambda: len(receiver.received()) >= 2 and receiver.received(), "two attempts")
        first, second = got[:2]
        assert (first.status, second.status) == (500, 204)
        assert first.path == second.path == "/hooks/factgate?source=test"
        assert first.headers["host"] == second.headers["host"] == f"localhost:{receiver.port}"
        assert first.headers["content-type"] == "application/json"
        assert first.headers["webhook-id"] == second.headers["webhook-id"]
        assert first.headers["webhook-id"].startswith("msg_")
        assert first.body == second.body

        # The tenant's secret as the operator hands it to the receiver; the docs' snippet verifies both tries.
        printed = subprocess.run(
            [sys.executable, "-m", "cli.main", "tenants", "webhook-secret", "acme"],
            cwd=ROOT, env={**os.environ, **st.env}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert printed.returncode == 0, printed.stderr
        secret = printed.stdout.strip()
        assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", secret)
        verify = receiver_snippet()
        for attempt in (first, second):
            assert verify(secret, attempt.headers, attempt.body)
            assert not verify(secret, attempt.headers, attempt.body + b" ")
            assert not verify("whsec_" + "A" * 43 + "=", attempt.headers, attempt.body)

        # The body is the job object at its end: its id, its final status, what GET /v1/jobs/{id} says.
        body = json.loads(second.body)
        assert body["id"] == str(job_id) and body["status"] == "completed"
        assert body["request_counts"]["completed"] == 2
        with Session(st.engine) as s:
            job = s.get(Job, job_id)
            assert job is not None
            assert body == job_model(s, job).as_json()

        # Every attempt is recorded: time, HTTP status, next try; the response body is not kept.
        delivery, attempts = wait_for(
            lambda: (d := delivery_of(st, job_id))[0].status == "delivered" and d, "delivery recorded"
        )
        assert delivery.webhook_id == first.headers["webhook-id"] and delivery.attempts == 2
        assert [(a.attempt, a.status_code) for a in attempts] == [(1, 500), (2, 204)]
        assert attempts[0].error == "HTTP 500" and attempts[0].next_attempt_at is not None
        assert attempts[1].error is None and attempts[1].next_attempt_at is None
        assert delivery.delivered_at is not None and delivery.next_attempt_at is None

        # Redeliver from the job page (signed in as the tenant, CSRF token and all): once more, same id.
        app = create_app(
            {
                "database_url": st.pg_url,
                "redis_url": st.env["REDIS_URL"],
                "perplexity_api_key": "sim-test-key",
                "instance_path": tmp_path / "web",
                "encryption_keys": (ENCRYPTION_KEY,),
            }
        )
        app.testing = True
        with session_scope(make_session_factory(st.engine)) as s:
            issued = create_token(s, "acme")
        client = app.test_client()
        sign_in(client, Caller(issued.tenant_id, issued.tenant_name, issued.token))
        page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
        assert "✓ delivered" in page and delivery.webhook_id in page and "2 attempts" in page
        resp = client.post(
            f"/jobs/{job_id}/webhooks/{delivery.id}/redeliver",
            data={"csrf_token": csrf_token(client, "/jobs")},
        )
        assert resp.status_code == 302
        third = wait_for(lambda: len(receiver.received()) >= 3 and receiver.received()[2], "the redelivery")
        assert third.headers["webhook-id"] == delivery.webhook_id and third.body == first.body
        assert verify(secret, third.headers, third.body)
        wait_for(lambda: delivery_of(st, job_id)[0].attempts == 3, "redelivery recorded")
        app.extensions["factgate"].engine.dispose()

        # The secret is stored encrypted: no dump holds it, nor any worker log line.
        pg = make_url(st.pg_url)
        dump = subprocess.run(
            ["pg_dump", "-h", pg.host or "127.0.0.1", "-p", str(pg.port or 5432),
             "-U", pg.username or "postgres", "--data-only", pg.database or ""],
            capture_output=True, text=True, check=True, env={**os.environ, "PGPASSWORD": pg.password or ""},
        )  # fmt: skip
        assert delivery.webhook_id in dump.stdout  # the dump is real: the delivery is in it
        assert secret not in dump.stdout and secret.removeprefix("whsec_") not in dump.stdout
        for worker in st.workers:
            log = worker.log.read_text(errors="replace")
            assert delivery.webhook_id in log  # the worker logged its attempts...
            assert secret.removeprefix("whsec_") not in log  # ...and never the secret
            assert first.headers["webhook-signature"] not in log


def test_a_private_target_is_refused_and_the_refusal_recorded(tmp_path: Path, receiver: Receiver) -> None:
    with stack_with(tmp_path / "stack") as st:
        factory = make_session_factory(st.engine)
        with session_scope(factory) as s:
            get_or_create_tenant(s, "acme")
            # The tenant's default URL: jobs without a webhook_url option send there.
            set_tenant(s, "acme", webhook_url=f"http://127.0.0.1:{receiver.port}/hook")
        job_id = st.submit_claims(ROWS, {"mode": "grounded"}, tenant="acme")
        assert st.wait_job(job_id, timeout=120).status == "completed"
        delivery, attempts = wait_for(
            lambda: (d := delivery_of(st, job_id))[0].status == "failed" and d, "the refusal"
        )
        assert delivery.url == f"http://127.0.0.1:{receiver.port}/hook"
        assert delivery.attempts == 1 and delivery.next_attempt_at is None
        assert delivery.last_status_code is None
        assert delivery.last_error is not None
        assert delivery.last_error.startswith("refused: 127.0.0.1 resolves to 127.0.0.1, a loopback address")
        assert "FACTGATE_WEBHOOK_ALLOW_PRIVATE" in delivery.last_error
        assert [(a.attempt, a.error) for a in attempts] == [(1, delivery.last_error)]
        assert attempts[0].next_attempt_at is None
        time.sleep(2.0)  # a couple of sweeps later: still nothing sent, nothing retried
        assert receiver.received() == []
        assert delivery_of(st, job_id)[0].attempts == 1


@pytest.fixture
def silent_receiver() -> Iterator[tuple[int, list[socket.socket]]]:
    """A receiver that accepts connections and never answers; yields its port and the open connections."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=serve, name="silent-receiver", daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], held
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        server.close()


def test_another_tenants_items_run_while_webhook_receivers_hang(
    tmp_path: Path, silent_receiver: tuple[int, list[socket.socket]]
) -> None:
    port, held = silent_receiver
    with stack_with(
        tmp_path / "stack",
        concurrency=1,  # one task thread: a webhook that took it would stop every item
        FACTGATE_WEBHOOK_ALLOW_PRIVATE="1",
        FACTGATE_WEBHOOK_TIMEOUT_S="600",  # the receivers hang for the whole test
    ) as st:
        hooked = [
            st.submit_claims(ROWS[:1], {"mode": "ungrounded", "webhook_url": f"http://127.0.0.1:{port}/h{n}"},
                             tenant="hangs")
            for n in range(2)
        ]  # fmt: skip
        for job_id in hooked:
            assert st.wait_job(job_id, timeout=120).status == "completed"
        wait_for(lambda: len(held) >= 1, "a sender connected to the silent receiver")

        other = st.submit_claims(ROWS, {"mode": "ungrounded"}, tenant="bystander")
        assert st.wait_job(other, timeout=90).status == "completed"
        for job_id in hooked:  # still being tried: nothing came back yet
            delivery, attempts = delivery_of(st, job_id)
            assert delivery.status == "pending" and attempts == []
