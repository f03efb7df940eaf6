"""Under gunicorn as deployed (gthread, web/gunicorn_conf.py): slow readers and slow senders never keep
/healthz and /readyz from answering.

One worker with four threads, a tenant whose two export slots are held by slow readers of a 5,000-row export
(sixteen of them: the rest are refused at once with a 429), unauthenticated page POSTs that announce a large
multipart body and send a few bytes of it, and API submissions that trickle theirs. Before, each page POST
held a thread reading the body for CSRF until the client finished (never), so four of them were enough to
make /healthz wait for ever; the API's trickled bodies were read for as long as the client kept sending.

Needs PostgreSQL and Redis (fails under CI=true when they are missing, see tests/services.py).
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from jobs.intake import UnitSpec, create_job
from jobs.tenancy import create_token
from models import make_engine, make_session_factory, session_scope
from tests.integration.test_cli_helpers import background, clean_env, free_port, wait_for
from tests.services import REDIS_BASE, SHARED_DB, create_pg_database, drop_pg_database, unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = 5_000
SLOTS = 2
READERS = 16
PAGE_SENDERS = 6
API_SENDERS = 2
THREADS = 4


def _request(port: int, head: str, body: bytes = b"", rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    sock.sendall(head.encode() + b"\r\n" + body)
    return sock


def _status(sock: socket.socket, timeout: float) -> tuple[int, bytes]:
    """The status code of the response on `sock`, and what of it arrived with the status line."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n" not in data:
        piece = sock.recv(4096)
        if not piece:
            break
        data += piece
    return int(data.split(b" ", 2)[1]), data


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """(base URL, token, job id of a 5,000-row job) of a gunicorn web process on a fresh database."""
    try:
        db_url = create_pg_database("factgate_webtier", migrated=True)
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    tmp = tmp_path_factory.mktemp("webtier")
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            issued = create_token(session, f"webtier-{uuid.uuid4().hex[:8]}")
            units = [
                UnitSpec("claims", f"r{i:05d}", "grounded", {"claim": f"claim {i}"}) for i in range(ROWS)
            ]
            job, _ = create_job(session, tenant_id=issued.tenant_id, kind="claims", options={}, units=units)
            job_id = str(job.id)
        engine.dispose()
        port = free_port()
        env = clean_env(
            DATABASE_URL=db_url,
            REDIS_URL=f"{REDIS_BASE}/{SHARED_DB}",
            FACTGATE_INSTANCE_PATH=str(tmp / "instance"),
            FACTGATE_SECRET_KEY="x" * 48,
            FACTGATE_MAX_EXPORTS_PER_TENANT=str(SLOTS),
            FACTGATE_BODY_GRACE_S="2",
            FACTGATE_SEND_TIMEOUT_S="30",
        )
        argv = [
            *(sys.executable, "-m", "gunicorn", "-c", "python:web.gunicorn_conf"),
            *("--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", str(THREADS)),
            "web.app:create_app()",
        ]
        with background(argv, env, tmp / "web.log"):
            base = f"http://127.0.0.1:{port}"
            wait_for(lambda: httpx.get(f"{base}/healthz").status_code == 200, timeout=60, what="web",
                     log=tmp / "web.log")  # fmt: skip
            yield base, issued.token, job_id
    finally:
        engine.dispose()
        drop_pg_database(db_url)


def test_health_answers_with_export_slots_full_and_slow_clients_connected(
    served: tuple[str, str, str],
) -> None:
    base, token, job_id = served
    port = int(base.rsplit(":", 1)[1])
    auth = f"Authorization: Bearer {token}\r\n"
    held: list[socket.socket] = []
    try:
        # Slow readers: each reads the status line and then nothing more.
        readers = [
            _request(port, f"GET /v1/jobs/{job_id}/results HTTP/1.1\r\nHost: x\r\n{auth}", rcvbuf=4096)
            for _ in range(READERS)
        ]
        held += readers
        statuses = [_status(sock, 30) for sock in readers]
        refused = [data for code, data in statuses if code == 429]
        assert {code for code, _ in statuses} <= {200, 429}
        assert len(refused) >= READERS - SLOTS - 2, [code for code, _ in statuses]
        # Slow senders: page POSTs without a session announcing 200 MB, and API submissions trickling.
        for _ in range(PAGE_SENDERS):
            held.append(
                _request(
                    port,
                    "POST /jobs/new HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                    f"Content-Length: {200 * 1024 * 1024}\r\n",
                    b"--b\r\n",
                )
            )
        api_senders = [
            _request(
                port,
                f"POST /v1/jobs?kind=claims HTTP/1.1\r\nHost: x\r\n{auth}"
                "Content-Type: application/x-ndjson\r\nContent-Length: 1000000\r\n",
                b'{"id": "a", "claim": "one"}\n',
            )
            for _ in range(API_SENDERS)
        ]
        held += api_senders
        with httpx.Client(timeout=30) as client:
            assert client.get(f"{base}/healthz").status_code == 200
            assert client.get(f"{base}/readyz").status_code == 200
            # Another export of the tenant is refused at once while its slots are held, in the API's shape.
            busy = client.get(f"{base}/v1/jobs/{job_id}/errors", headers={"Authorization": f"Bearer {token}"})
        if busy.status_code == 429:
            assert busy.json()["error"]["field"] == "max_exports_per_tenant"
            assert int(busy.headers["Retry-After"]) > 0
        # The trickled submissions are cut off: a 408 in the API's JSON shape, nothing stored.
        for sock in api_senders:
            code, data = _status(sock, 60)
            assert code == 408, data
            with contextlib.suppress(OSError):
                while b"}}" not in data and (piece := sock.recv(4096)):
                    data += piece
            assert b'"type":"invalid_request_error"' in data and b"too slowly" in data, data
    finally:
        for sock in held:
            sock.close()
    # With every slow client gone, the slots come back (leases released as the server notices).
    deadline = time.monotonic() + 60
    code = 0
    while time.monotonic() < deadline and code != 200:
        code = httpx.get(
            f"{base}/v1/jobs/{job_id}/errors", headers={"Authorization": f"Bearer {token}"}
        ).status_code
        if code != 200:
            time.sleep(0.5)
    assert code == 200
