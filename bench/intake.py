"""Intake and export at scale: a 100,000-row NDJSON batch through the web process (gunicorn).

Prints the time from POST to 202, the web worker's peak RSS, and the time to stream the 100,000
results back (after marking the items done directly in the database, so no upstream is involved),
with the RSS before and after the export to show memory stays flat. Goals: 202 in ≤ 5 s, RSS ≤ 300 MB,
export ≤ 5 s.

    .venv/bin/python bench/intake.py [--rows 100000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx
import psutil
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database, peak_rss_mb
from jobs.tenancy import create_token
from models import make_engine, make_session_factory, session_scope


def hwm_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of the gunicorn worker(s): the true peak, not a sample."""
    return max((peak_rss_mb(c.pid) for c in psutil.Process(pid).children(recursive=True)), default=0.0)


def rss_mb(pid: int) -> float:
    """Resident memory of the gunicorn worker(s) under `pid` (the arbiter forks them)."""
    parent = psutil.Process(pid)
    return max((c.memory_info().rss for c in parent.children(recursive=True)), default=0) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    args = ap.parse_args()
    flush_redis()
    with fresh_database() as db_url:
        engine = make_engine(db_url)
        with session_scope(make_session_factory(engine)) as s:
            token = create_token(s, "bench").token
        env = {
            "DATABASE_URL": db_url,
            "REDIS_URL": REDIS_URL,
            "PERPLEXITY_API_KEY": "unused",
            "FACTGATE_SECRET_KEY": "x",
        }
        procs = Procs(env=env)
        try:
            web = procs.start_web(free_port(), workers=1)
            pid = procs.procs["web"].pid
            body = "".join(
                json.dumps(
                    {
                        "id": f"row-{i:06d}",
                        "claim": f"Claim {i}: the Eiffel Tower is about 330 metres tall today.",
                        "label": i % 2 == 0,
                    }
                )
                + "\n"
                for i in range(args.rows)
            ).encode()
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
            rss_idle = rss_mb(pid)
            peak = rss_idle
            t0 = time.monotonic()
            with httpx.Client(timeout=300) as client:
                r = client.post(f"{web}/v1/jobs?kind=claims&mode=grounded", content=body, headers=headers)
                t_202 = time.monotonic() - t0
                peak = max(peak, hwm_mb(pid))
                r.raise_for_status()
                job_id = r.json()["id"]
                # Settle every item directly (benchmark setup, not measured): the export has real rows to stream.
                with engine.begin() as conn:
                    conn.execute(
                        text(
                            "UPDATE items SET status='done', output = jsonb_build_object('p', 0.91, 'request_id', "
                            "'req-' || id::text, 'request_ids', jsonb_build_array('req-' || id::text), 'attempts', 1, "
                            "'input_tokens', 420) WHERE job_id = :j"
                        ),
                        {"j": job_id},
                    )
                rss_before_export = rss_mb(pid)
                t1 = time.monotonic()
                lines = 0
                size = 0
                with client.stream("GET", f"{web}/v1/jobs/{job_id}/results", headers=headers) as resp:
                    resp.raise_for_status()
                    for chunk in resp.iter_lines():
                        lines += 1
                        size += len(chunk)
                        if lines % 20_000 == 0:
                            peak = max(peak, rss_mb(pid))
                t_export = time.monotonic() - t1
                rss_after_export = rss_mb(pid)
                peak = max(peak, rss_after_export, hwm_mb(pid))
        finally:
            procs.stop()
            engine.dispose()
    print(f"intake: {args.rows:,}-row NDJSON ({len(body) / 2**20:.1f} MiB) through gunicorn (1 worker)")
    print(f"  POST → 202               {t_202:.2f} s   ratio to goal (5 s) {t_202 / 5:.2f}")
    print(
        f"  web RSS idle / peak      {rss_idle:.0f} / {peak:.0f} MB   ratio to goal (300 MB) {peak / 300:.2f}"
    )
    print(f"export: {lines:,} result lines ({size / 2**20:.1f} MiB)")
    print(f"  stream time              {t_export:.2f} s   ratio to goal (5 s) {t_export / 5:.2f}")
    print(f"  web RSS before / after   {rss_before_export:.0f} / {rss_after_export:.0f} MB")


if __name__ == "__main__":
    main()
