"""Intake and export at scale: a 1,000,000-row batch as NDJSON and as CSV through the web process (gunicorn).

For each body format, in a fresh web process: the time from POST to 202 and the web worker's peak RSS
(VmHWM, the true peak), with their ratios to the goals (202 in ≤ 30 s, RSS ≤ 300 MB). A body of more than
FACTGATE_INTAKE_DEFER_ROWS rows answers `validating` before its items exist; the bench then builds them the
way the `start_job` task does, by calling `jobs/bulk_load.py:build_staged` itself right after the 202 (no
worker runs: one would also dispatch the million items upstream while the next format is measured), and
prints the time from POST until the job left `validating`, with the build's own time. Then the results of
the NDJSON job are streamed back (after marking its items done directly in the database, so no upstream
is involved): the export's time and the RSS before and after it, which stays flat (keyset chunks).

    FACTGATE_BENCH_REDIS_URL=redis://127.0.0.1:6394/12 .venv/bin/python bench/intake.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
import uuid
from pathlib import Path

import httpx
import psutil
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database, peak_rss_mb
from jobs.bulk_load import build_staged
from jobs.tenancy import create_token
from models import make_engine, make_session_factory, session_scope

GOAL_202_S = 30.0
GOAL_RSS_MB = 300.0
GOAL_EXPORT_S = 30.0
GOAL_BUILT_S = 30.0  # the 202's goal, also shown for the time until the items exist


def hwm_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of the gunicorn worker(s): the true peak, not a sample."""
    return max((peak_rss_mb(c.pid) for c in psutil.Process(pid).children(recursive=True)), default=0.0)


def rss_mb(pid: int) -> float:
    """Resident memory of the gunicorn worker(s) under `pid` (the arbiter forks them)."""
    parent = psutil.Process(pid)
    return max((c.memory_info().rss for c in parent.children(recursive=True)), default=0) / 2**20


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by the gunicorn worker(s) under `pid`: the work the 202
    cost, which, unlike its wall time, does not grow when other processes share the cores."""
    total = 0.0
    for child in psutil.Process(pid).children(recursive=True):
        times = child.cpu_times()
        total += times.user + times.system
    return total


def claim(i: int) -> str:
    return f"Claim {i}: the Eiffel Tower is about 330 metres tall today."


def ndjson_body(rows: int) -> bytes:
    return "".join(
        json.dumps({"id": f"row-{i:07d}", "claim": claim(i), "label": i % 2 == 0}) + "\n" for i in range(rows)
    ).encode()


def csv_body(rows: int) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("id", "claim", "label"))
    for i in range(rows):
        writer.writerow((f"row-{i:07d}", claim(i), "true" if i % 2 == 0 else "false"))
    return out.getvalue().encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--formats", default="ndjson,csv", help="comma-separated: ndjson, csv (default both)")
    args = ap.parse_args()
    flush_redis()
    report: list[str] = []
    with fresh_database() as db_url:
        engine = make_engine(db_url)
        sessions = make_session_factory(engine)
        with session_scope(sessions) as s:
            token = create_token(s, "bench").token
        env = {
            "DATABASE_URL": db_url,
            "REDIS_URL": REDIS_URL,
            "PERPLEXITY_API_KEY": "unused",
            "FACTGATE_SECRET_KEY": "x",
        }
        auth = {"Authorization": f"Bearer {token}"}
        ndjson_job = ""
        wanted = {f.strip().upper() for f in args.formats.split(",")}
        for fmt, content_type, make in (
            ("NDJSON", "application/x-ndjson", ndjson_body),
            ("CSV", "text/csv", csv_body),
        ):
            if fmt not in wanted:
                continue
            body = make(args.rows)
            procs = Procs(env=env)
            try:
                web = procs.start_web(free_port(), workers=1)
                pid = procs.procs["web"].pid
                rss_idle = rss_mb(pid)
                cpu0 = cpu_s(pid)
                load0 = psutil.getloadavg()[0]
                with httpx.Client(timeout=1800) as client:
                    t0 = time.monotonic()
                    r = client.post(
                        f"{web}/v1/jobs?kind=claims&mode=grounded",
                        content=body,
                        headers={**auth, "Content-Type": content_type},
                    )
                    t_202 = time.monotonic() - t0
                    cpu = cpu_s(pid) - cpu0
                    peak = hwm_mb(pid)
                    if r.status_code != 202:
                        raise SystemExit(f"{fmt}: {r.status_code} {r.text[:500]}")
                    status_202 = r.json()["status"]
                    t_b = time.monotonic()
                    with session_scope(sessions) as s:  # what start_job does first
                        built = build_staged(s, uuid.UUID(r.json()["id"]))
                    t_built, build_s = time.monotonic() - t0, time.monotonic() - t_b
                    with engine.connect() as conn:
                        total = conn.execute(
                            text("SELECT total_items FROM jobs WHERE id = :j"), {"j": r.json()["id"]}
                        ).scalar_one()
                    lines = [
                        f"intake: {args.rows:,}-row {fmt} ({len(body) / 2**20:.1f} MiB, {total:,} items) "
                        "through gunicorn (1 worker)",
                        f"  POST → 202               {t_202:.2f} s   ratio to goal ({GOAL_202_S:.0f} s) "
                        f"{t_202 / GOAL_202_S:.2f}",
                        f"  web CPU to 202           {cpu:.2f} s   ratio to goal ({GOAL_202_S:.0f} s) "
                        f"{cpu / GOAL_202_S:.2f}   (load average {load0:.1f} → {psutil.getloadavg()[0]:.1f} "
                        f"on {psutil.cpu_count()} cores)",
                        f"  web RSS idle / peak      {rss_idle:.0f} / {peak:.0f} MB   ratio to goal "
                        f"({GOAL_RSS_MB:.0f} MB) {peak / GOAL_RSS_MB:.2f}",
                        f"  status at 202            {status_202}; build_staged: {built}",
                        f"  POST → items built       {t_built:.2f} s   ratio to goal ({GOAL_BUILT_S:.0f} s) "
                        f"{t_built / GOAL_BUILT_S:.2f}   (build_staged alone {build_s:.2f} s, called by the "
                        "bench right after the 202, as start_job would)",
                    ]
                    print("\n".join(lines), flush=True)
                    report += lines
                    if fmt == "NDJSON":
                        ndjson_job = r.json()["id"]
                        lines = export(client, web, auth, engine, pid, ndjson_job)
                        print("\n".join(lines), flush=True)
                        report += lines
            finally:
                procs.stop()
            del body
        engine.dispose()
    print("\nsummary\n" + "\n".join(report))


def export(
    client: httpx.Client, web: str, auth: dict[str, str], engine: object, pid: int, job_id: str
) -> list[str]:
    """Settle every item (setup, not measured), then stream the results back and count the lines."""
    with engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(
            text(
                "UPDATE items SET status='done', output = jsonb_build_object('p', 0.91, 'request_id', "
                "'req-' || id::text, 'request_ids', jsonb_build_array('req-' || id::text), 'attempts', 1, "
                "'input_tokens', 420) WHERE job_id = :j"
            ),
            {"j": job_id},
        )
    rss_before = rss_mb(pid)
    peak = rss_before
    t1 = time.monotonic()
    lines = 0
    size = 0
    last = ""
    with client.stream("GET", f"{web}/v1/jobs/{job_id}/results", headers=auth) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            lines += 1
            size += len(line)
            last = line
            if lines % 100_000 == 0:
                peak = max(peak, rss_mb(pid))
    t_export = time.monotonic() - t1
    rss_after = rss_mb(pid)
    return [
        f"export: {lines:,} lines ({size / 2**20:.1f} MiB), trailer {last[:80]}",
        f"  stream time              {t_export:.2f} s   ratio to goal ({GOAL_EXPORT_S:.0f} s) "
        f"{t_export / GOAL_EXPORT_S:.2f}",
        f"  web RSS before / peak / after  {rss_before:.0f} / {peak:.0f} / {rss_after:.0f} MB",
    ]


if __name__ == "__main__":
    main()
