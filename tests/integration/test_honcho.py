"""`honcho start` runs the repository's Procfile on this machine's Postgres and Redis and completes a job.

The Procfile is used as it is: release migrates a fresh database, web (gunicorn) serves the API, worker
(Celery, threads pool) runs items against the simulator over HTTP, beat schedules the sweeper. A job goes
in through HTTP and must complete; then honcho's whole process group is stopped and checked gone.

Needs PostgreSQL and Redis (fails under CI=true when they are missing, see tests/services.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis as redis_lib

from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.test_cli_helpers import (
    EXAMPLE_CLAIMS,
    ROOT,
    alive,
    background,
    clean_env,
    cli,
    descendants,
    free_port,
    kill_all,
    wait_for,
)
from tests.services import create_pg_database, drop_pg_database, redis_db_url, unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REDIS_DB_URL = redis_db_url(13)  # the queue stack's database: flushed before and after, like there
API_KEY = "pplx-honcho-smoke-key-0123456789abcdef"
SCRAPE_TOKEN = "honcho-scrape-token"
SCRAPE = {"Authorization": f"Bearer {SCRAPE_TOKEN}"}


def test_honcho_start_serves_the_api_and_completes_a_job(tmp_path: Path) -> None:
    try:
        db_url = create_pg_database("factgate_honcho")
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    try:
        redis_lib.Redis.from_url(REDIS_DB_URL).flushdb()
    except Exception as exc:
        drop_pg_database(db_url)
        unavailable("Redis", exc)
        raise
    bin_dir = Path(sys.executable).parent
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "honcho.log"
    started: set[int] = set()  # honcho puts each process in a session of its own: track them by pid
    try:
        with run_in_thread(SimConfig(decisions_rps=0)) as sim:
            env = clean_env(
                DATABASE_URL=db_url,
                REDIS_URL=REDIS_DB_URL,
                PERPLEXITY_API_KEY=API_KEY,
                PERPLEXITY_API_BASE=sim.base_url,
                PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                FACTGATE_INSTANCE_PATH=str(tmp_path / "instance"),
                FACTGATE_SWEEP_INTERVAL_S="1",
                FACTGATE_WORKER_CONCURRENCY="4",
                FACTGATE_BEAT_SCHEDULE=str(tmp_path / "beat-schedule"),
                WEB_CONCURRENCY="1",
                FACTGATE_METRICS_TOKEN=SCRAPE_TOKEN,  # /metrics is closed without one
            )
            argv = [str(bin_dir / "honcho"), "-f", str(ROOT / "Procfile"), "-d", str(ROOT),
                    "-e", str(tmp_path / "no.env"), "start", "-p", str(port)]  # fmt: skip
            with background(argv, env, log) as honcho:
                wait_for(
                    lambda: httpx.get(f"{base}/healthz").status_code == 200, timeout=90, what="web", log=log
                )
                # The release process migrates the fresh database; a token can be made once it has.
                created = None

                def token_created() -> bool:
                    nonlocal created
                    created = cli("tokens", "create", "honcho", env=env)
                    return created.returncode == 0

                wait_for(token_created, timeout=60, what="migrations", log=log)
                assert created is not None
                token = created.stdout.strip()
                headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
                resp = httpx.post(
                    f"{base}/v1/jobs", params={"kind": "claims", "mode": "both"},
                    content=EXAMPLE_CLAIMS.read_bytes(), headers=headers, timeout=30,
                )  # fmt: skip
                assert resp.status_code == 202, resp.text
                assert resp.headers["X-Request-Id"]
                job_id = resp.json()["id"]
                job: dict[str, object] = {}

                def completed() -> bool:
                    job.update(httpx.get(f"{base}/v1/jobs/{job_id}", headers=headers).json())
                    return job["status"] in ("completed", "failed", "cancelled")

                wait_for(completed, timeout=120, what="the job", log=log)
                assert job["status"] == "completed", job
                summary = job["summary"]
                assert isinstance(summary, dict)
                assert summary["scorecards"]["grounded"]["correct"] == 24
                assert job["request_counts"] == {  # type: ignore[comparison-overlap]
                    "total": 48, "completed": 48, "failed": 0, "skipped": 0, "pending": 0, "running": 0,
                }  # fmt: skip

                assert httpx.get(f"{base}/metrics").status_code == 401
                metrics = httpx.get(f"{base}/metrics", headers=SCRAPE).text
                assert 'factgate_jobs{status="completed"} 1.0' in metrics
                assert re.search(
                    r'factgate_upstream_calls\{endpoint="decisions",status="200",window_s="900"\} \d', metrics
                )
                assert 'factgate_queue_depth{queue="celery"}' in metrics

                def waits_counted() -> bool:
                    # Workers write their limiter waits once a second (workers/signals.py:LimiterWaits).
                    text = httpx.get(f"{base}/metrics", headers=SCRAPE).text
                    waits = re.search(
                        r'factgate_limiter_wait_seconds_count\{endpoint="decisions"\} (\S+)', text
                    )
                    return waits is not None and float(waits.group(1)) >= 48

                wait_for(waits_counted, timeout=30, what="the limiter waits in /metrics", log=log)

                started |= descendants(honcho.pid)
                assert len(started) >= 5  # web (master + worker), worker, beat, release
                honcho.send_signal(signal.SIGTERM)  # what Ctrl-C in the terminal does
                with contextlib.suppress(Exception):
                    honcho.wait(30)
                deadline = time.monotonic() + 15
                while any(alive(p) for p in started) and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert not [p for p in started if alive(p)], "honcho left processes behind"
    finally:
        kill_all(started)
        redis_lib.Redis.from_url(REDIS_DB_URL).flushdb()
        drop_pg_database(db_url)

    text = log.read_text(errors="replace")
    for process in ("web.1", "worker.1", "beat.1", "release.1"):
        assert process in text
    # Structured worker logs carry the job id; the upstream key is never written.
    assert f"job_id={job_id}" in text
    assert API_KEY not in text
