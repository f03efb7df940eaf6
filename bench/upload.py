"""Large uploads through the New job page against the API, in one run: a 100,000-row batch as NDJSON and as
CSV through `/jobs/new` (multipart form, signed-in page session) and as NDJSON through `POST /v1/jobs`.

Each submission runs in a fresh web process (gunicorn, 1 worker) so that its peak RSS (VmHWM) is its own.
Prints the time from the POST to the 303 (page) or 202 (API), the web worker's peak RSS, and the page's
ratio to the API's time. Goals: the page within 1.5× the API's time for the same rows (it reads the same
lines; the multipart parse and CSV conversion are the difference), and peak RSS ≤ 300 MB (the file is
spooled to disk and read line by line, never held whole).

    .venv/bin/python bench/upload.py [--rows 100000]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database, peak_rss_mb
from jobs.tenancy import create_token
from models import make_engine, make_session_factory, session_scope

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
CLAIM = "Claim {i}: the Eiffel Tower is about 330 metres tall today."
TIME_GOAL_RATIO = 1.5
RSS_GOAL_MB = 300.0


def hwm_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of the gunicorn worker(s): the true peak, not a sample."""
    return max((peak_rss_mb(c.pid) for c in psutil.Process(pid).children(recursive=True)), default=0.0)


def ndjson_body(rows: int) -> bytes:
    lines = (
        json.dumps({"id": f"row-{i:06d}", "claim": CLAIM.format(i=i), "label": i % 2 == 0}) + "\n"
        for i in range(rows)
    )
    return "".join(lines).encode()


def csv_body(rows: int) -> bytes:
    lines = (f"row-{i:06d},{CLAIM.format(i=i)},{'true' if i % 2 == 0 else 'false'}\n" for i in range(rows))
    return ("id,claim,label\n" + "".join(lines)).encode()


def csrf(client: httpx.Client, url: str) -> str:
    match = CSRF_RE.search(client.get(url).text)
    assert match, f"no CSRF token on {url}"
    return match.group(1)


def measure(env: dict[str, str], token: str, how: str, body: bytes) -> tuple[float, float]:
    """(seconds from POST to the job's creation answer, peak web RSS in MB) in a fresh web process."""
    procs = Procs(env=env)
    try:
        web = procs.start_web(free_port(), workers=1)
        pid = procs.procs["web"].pid
        with httpx.Client(timeout=300, base_url=web) as client:
            if how == "api":
                headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
                t0 = time.monotonic()
                r = client.post("/v1/jobs?kind=claims&mode=grounded", content=body, headers=headers)
                elapsed = time.monotonic() - t0
                assert r.status_code == 202, r.text[:500]
            else:
                r = client.post("/sign-in", data={"token": token, "csrf_token": csrf(client, "/sign-in")})
                assert r.status_code == 302, r.text[:500]
                form = {"csrf_token": csrf(client, "/jobs/new"), "kind": "claims", "mode": "grounded"}
                name = "claims.csv" if how == "page csv" else "claims.ndjson"
                t0 = time.monotonic()
                r = client.post("/jobs/new", data=form, files={"file": (name, body)})
                elapsed = time.monotonic() - t0
                assert r.status_code == 303, r.text[:800]
        return elapsed, hwm_mb(pid)
    finally:
        procs.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    args = ap.parse_args()
    flush_redis()
    ndjson, csv = ndjson_body(args.rows), csv_body(args.rows)
    with fresh_database() as db_url:
        engine = make_engine(db_url)
        try:
            with session_scope(make_session_factory(engine)) as s:
                token = create_token(s, "bench-upload").token
            env = {
                "DATABASE_URL": db_url,
                "REDIS_URL": REDIS_URL,
                "PERPLEXITY_API_KEY": "unused",
                "FACTGATE_SECRET_KEY": "x",
            }
            results = {
                "api ndjson": measure(env, token, "api", ndjson),
                "page ndjson": measure(env, token, "page ndjson", ndjson),
                "page csv": measure(env, token, "page csv", csv),
            }
        finally:
            engine.dispose()
    api_time = results["api ndjson"][0]
    print(
        f"upload: {args.rows:,} claims, NDJSON {len(ndjson) / 2**20:.1f} MiB, CSV {len(csv) / 2**20:.1f} MiB; "
        "gunicorn, 1 worker, a fresh process each"
    )
    for name, (seconds, peak) in results.items():
        ratio = seconds / api_time
        print(
            f"  {name:<12} {seconds:6.2f} s   page/API {ratio:.2f} (goal ≤ {TIME_GOAL_RATIO})   "
            f"peak RSS {peak:4.0f} MB   ratio to goal ({RSS_GOAL_MB:.0f} MB) {peak / RSS_GOAL_MB:.2f}"
        )


if __name__ == "__main__":
    main()
