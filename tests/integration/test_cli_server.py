"""The CLI as the HTTP client of a real server: `factgate serve` (gunicorn), `factgate worker` and
`factgate beat` as subprocesses on a fresh Postgres database and Redis, the simulator over HTTP with a key.
The client commands run in this process (`cli`, click's CliRunner) against that server.

Needs PostgreSQL and Redis (fails under CI=true when they are missing, see tests/services.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis as redis_lib

from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.test_cli_helpers import (
    EXAMPLE_CLAIMS,
    FACTGATE,
    background,
    clean_env,
    cli,
    free_port,
    wait_for,
)
from tests.services import create_pg_database, drop_pg_database, redis_db_url, unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REDIS_DB_URL = redis_db_url(11)


@dataclass
class Server:
    url: str
    token: str
    env: dict[str, str]  # talks to the server (FACTGATE_URL, FACTGATE_TOKEN)
    logs: Path

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    try:
        db_url = create_pg_database("factgate_cli")
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    rds = redis_lib.Redis.from_url(REDIS_DB_URL)
    try:
        rds.flushdb()
    except Exception as exc:
        drop_pg_database(db_url)
        unavailable("Redis", exc)
        raise
    tmp = tmp_path_factory.mktemp("cli-server")
    port = free_port()
    try:
        with run_in_thread(SimConfig(decisions_rps=0)) as sim:
            env = clean_env(
                DATABASE_URL=db_url,
                REDIS_URL=REDIS_DB_URL,
                PERPLEXITY_API_KEY="sim-test-key-123456",
                PERPLEXITY_API_BASE=sim.base_url,
                FACTGATE_SWEEP_INTERVAL_S="1",
                FACTGATE_INSTANCE_PATH=str(tmp / "instance"),
            )
            migrated = cli("db", "upgrade", env=env)
            assert migrated.returncode == 0, migrated.stderr
            argv_web = [FACTGATE, "serve", "--port", str(port), "--workers", "1"]
            argv_worker = [FACTGATE, "worker", "-c", "4", "--without-mingle", "--without-gossip"]
            argv_beat = [FACTGATE, "beat", "--schedule", str(tmp / "beat-schedule")]
            with (
                background(argv_web, env, tmp / "web.log"),
                background(argv_worker, env, tmp / "worker.log"),
                background(argv_beat, env, tmp / "beat.log"),
            ):
                base = f"http://127.0.0.1:{port}"
                wait_for(lambda: httpx.get(f"{base}/healthz").status_code == 200, timeout=60, what="web",
                         log=tmp / "web.log")  # fmt: skip
                wait_for(lambda: " ready." in (tmp / "worker.log").read_text(), timeout=60, what="worker",
                         log=tmp / "worker.log")  # fmt: skip
                created = cli("tokens", "create", "cli-test", env=env)
                assert created.returncode == 0, created.stderr
                token = created.stdout.strip()
                yield Server(base, token, {**env, "FACTGATE_URL": base, "FACTGATE_TOKEN": token}, tmp)
    finally:
        redis_lib.Redis.from_url(REDIS_DB_URL).flushdb()
        drop_pg_database(db_url)


def test_check_against_a_server_prints_the_results_and_the_job_page(server: Server) -> None:
    args = ("check", str(EXAMPLE_CLAIMS), "--mode", "both", "--server", server.url, "--token", server.token)
    run = cli(*args, env=clean_env())
    assert run.returncode == 0, run.stderr + server.log_text()[-3000:]
    lines = run.stdout.splitlines()
    assert len([line for line in lines[1:] if line[:1] in "sr" and line[1:3].isdigit()]) == 24
    assert any(line.startswith("grounded   correct 24/24") for line in lines)
    job_line = next(line for line in lines if line.startswith("job "))
    job_id = job_line.split()[1]
    assert "completed: 48 of 48 requests done" in job_line
    assert f"report: {server.url}/jobs/{job_id}" in lines
    # A real key (here the simulator's, over HTTP) means no simulator note.
    assert not any(line.startswith("note:") for line in lines)
    assert f"factgate at {server.url}" in run.stderr


def test_submit_status_results_and_idempotency(server: Server, tmp_path: Path) -> None:
    first = cli(
        "submit", str(EXAMPLE_CLAIMS), "--mode", "grounded", "--idempotency-key", "k-1", env=server.env
    )
    assert first.returncode == 0, first.stderr
    job_id = first.stdout.strip()
    again = cli(
        "submit", str(EXAMPLE_CLAIMS), "--mode", "grounded", "--idempotency-key", "k-1", env=server.env
    )
    assert again.stdout.strip() == job_id  # the same key returns the same job
    wait_for(lambda: "completed" in cli("status", job_id, env=server.env).stdout, timeout=90, what="job")
    status = cli("status", job_id, env=server.env)
    assert status.stdout.splitlines()[0] == (
        f"job {job_id} claims completed: 24 of 24 requests done, 0 failed, 0 skipped, 0 to go; "
        + status.stdout.splitlines()[0].split("0 to go; ", 1)[1]
    )
    assert f"page: {server.url}/jobs/{job_id}" in status.stdout
    out = tmp_path / "r.ndjson"
    got = cli("results", job_id, "-o", str(out), env=server.env)
    assert got.returncode == 0 and "wrote 24 lines" in got.stderr and "then the end line" in got.stderr
    *records, end = [json.loads(line) for line in out.read_text().splitlines()]
    assert end == {"_end": {"count": 24, "after": None, "last_id": records[-1]["custom_id"]}}
    assert {r["custom_id"] for r in records} >= {"s01", "r16"}


def test_cancel_a_running_job(server: Server) -> None:
    submitted = cli("submit", str(EXAMPLE_CLAIMS), "--mode", "both", env=server.env)
    job_id = submitted.stdout.strip()
    cancel = cli("cancel", job_id, env=server.env)
    if cancel.returncode == 1:  # it finished first (48 requests at 10/s is a few seconds)
        assert "only a validating, queued or running job can be cancelled" in cancel.stderr
        return
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.startswith(f"job {job_id} claims cancell")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = json.loads(cli("status", job_id, "--json", env=server.env).stdout)
        if status["status"] == "cancelled":
            break
        time.sleep(0.5)
    assert status["status"] == "cancelled"


def test_errors_against_a_server(server: Server, tmp_path: Path) -> None:
    bad_token = cli("status", "x", env={**server.env, "FACTGATE_TOKEN": "fg_wrong"})
    assert bad_token.returncode == 2
    assert bad_token.stderr.startswith(f"error: factgate at {server.url} rejected the token")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "claim": "ok"}\n{"id": "a", "claim": "dup"}\n')
    dup = cli("submit", str(bad), env=server.env)
    assert dup.returncode == 2 and dup.stderr.startswith(f"error: {bad} line 2: ")
    assert "duplicate" in dup.stderr
    unknown = cli("status", "00000000-0000-0000-0000-000000000000", env=server.env)
    assert unknown.returncode == 2 and "no such job" in unknown.stderr
    gone = cli("status", "x", env={**server.env, "FACTGATE_URL": f"http://127.0.0.1:{free_port()}"})
    assert gone.returncode == 1 and "cannot reach factgate" in gone.stderr


def test_beat_schedules_the_sweeper(server: Server) -> None:
    wait_for(lambda: "factgate.sweep" in (server.logs / "worker.log").read_text(), timeout=30, what="a sweep")
    assert "beat: Starting" in (server.logs / "beat.log").read_text()


@pytest.mark.parametrize("length", [8_200, 20_000])
def test_a_url_too_long_is_a_414_in_the_apis_json_shape(server: Server, length: int) -> None:
    """Refused by gunicorn itself, before the app — in the API's JSON error shape, never gunicorn's HTML."""
    url = f"{server.url}/v1/jobs?x={'a' * length}"
    resp = httpx.get(url, headers={"Authorization": f"Bearer {server.token}"}, timeout=10)
    assert resp.status_code == 414
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.json()["error"]["type"] == "uri_too_long_error"
    assert "a" * 100 not in resp.text  # the request line is not echoed back


DOCS = Path(__file__).resolve().parents[2] / "docs"
ROOT = DOCS.parent


def _block(markdown: str, language: str) -> str:
    """The first fenced block of `language` in a Markdown text."""
    start = markdown.index(f"```{language}\n") + len(f"```{language}\n")
    return markdown[start : markdown.index("```", start)]


def test_the_python_clients_documented_example_runs_and_prints_what_the_docs_show(
    server: Server, tmp_path: Path
) -> None:
    """docs/client.md's example, run as a user would (its own process, from a clone's root) against the
    server; its output is the one the page shows."""
    import subprocess
    import sys

    doc = (DOCS / "client.md").read_text()
    script = tmp_path / "example.py"
    script.write_text(_block(doc, "python"))
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:] + server.log_text()[-3000:]
    assert run.stdout == _block(doc, "text"), run.stdout
    # The progress callback saw the job end: 11 answers, 22 sentences, and the packing audit's 3 (the first
    # answer's packed sentences asked again alone, docs/spec.md §9.4).
    assert "completed 36/36" in run.stderr


def test_the_ci_example_gates_on_a_citations_job(server: Server) -> None:
    """examples/ci/test_factgate_gate.py, the pytest test a team copies, against the server: it passes at
    the example's bounds and fails when a bound is out of reach."""
    import subprocess
    import sys

    test = ROOT / "examples" / "ci" / "test_factgate_gate.py"
    argv = [sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider", "-p", "no:cov",
            "-o", "addopts=", "--rootdir", str(test.parent)]  # fmt: skip
    passing = subprocess.run(
        argv, cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=240, check=False
    )
    assert passing.returncode == 0, passing.stdout[-3000:] + passing.stderr[-2000:]
    strict = {**server.env, "FACTGATE_MIN_SUPPORTED_SHARE": "0.99"}
    failing = subprocess.run(
        argv, cwd=ROOT, env=strict, capture_output=True, text=True, timeout=240, check=False
    )
    assert failing.returncode == 1, failing.stdout[-3000:]
    assert "supported_share 0.8 is under 0.99" in failing.stdout
