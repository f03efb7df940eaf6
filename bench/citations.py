"""Citations at scale: 100,000 answers' intake through the web process, and 300 answers at the limit.

Part 1, intake: a 100,000-answer NDJSON body (the rows of examples/citations.jsonl, cycled with ids of
their own) POSTed to gunicorn (1 worker, as `factgate serve` runs it): the time to the 202 and the web
worker's peak RSS (VmHWM), with their ratios to the goals (202 in ≤ 30 s, RSS ≤ 300 MB); above
FACTGATE_INTAKE_DEFER_ROWS the job answers `validating` and the bench builds its items the way `start_job`
does (`jobs/bulk_load.py:build_staged`), printing the time until they exist. No worker runs in this part.

Part 2, at the limit: the stack as the README and Procfile start it — the simulator as its own process at
10 Decisions requests/s with 0.3 s latency, gunicorn, one `celery worker` with every default (16 threads,
the default chord size) and beat — takes 300 answers (about 1,000 sentences, one Decisions request each)
over the API. It prints the Decisions requests per second from submit to completed and their ratio to the
limit, the upstream 429s, and whether the goal (≥ 0.97 of the limit, 0 upstream 429s) is met. The answers'
own items make no request, so they cost only the time before the first sentence is planned.

    .venv/bin/python bench/citations.py [--answers 100000] [--limit-answers 300] [--part intake,limit]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

import httpx
import psutil
from sqlalchemy import func, select
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database, peak_rss_mb
from jobs.bulk_load import build_staged
from jobs.tenancy import create_token
from models import ApiCall, Job, make_engine, make_session_factory, session_scope

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "citations.jsonl"
LIMIT = 10.0
GOAL_RATIO = 0.97
GOAL_202_S = 30.0
GOAL_RSS_MB = 300.0


def answers_body(n: int) -> bytes:
    """`n` NDJSON rows: the examples cycled, each with an id of its own and its first sentence tagged so
    no two requests are the same."""
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    out: list[str] = []
    for i in range(n):
        row = dict(rows[i % len(rows)])
        row["id"] = f"a{i:07d}-{row['id']}"
        row["answer"] = f"Answer {i} follows. {row['answer']}"
        out.append(json.dumps(row, ensure_ascii=False))
    return ("\n".join(out) + "\n").encode()


def web_hwm_mb(pid: int) -> float:
    return max((peak_rss_mb(c.pid) for c in psutil.Process(pid).children(recursive=True)), default=0.0)


def intake(n: int) -> list[str]:
    body = answers_body(n)
    with fresh_database() as db_url:
        engine = make_engine(db_url)
        sessions = make_session_factory(engine)
        with session_scope(sessions) as s:
            token = create_token(s, "bench").token
        env = {"DATABASE_URL": db_url, "REDIS_URL": REDIS_URL, "PERPLEXITY_API_KEY": "unused",
               "FACTGATE_SECRET_KEY": "x"}  # fmt: skip
        procs = Procs(env=env)
        try:
            web = procs.start_web(free_port(), workers=1)
            pid = procs.procs["web"].pid
            with httpx.Client(timeout=1800) as client:
                t0 = time.monotonic()
                r = client.post(
                    f"{web}/v1/jobs?kind=citations",
                    content=body,
                    headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
                )
                t_202 = time.monotonic() - t0
                peak = web_hwm_mb(pid)
            if r.status_code != 202:
                raise SystemExit(f"intake: {r.status_code} {r.text[:500]}")
            job_id = uuid.UUID(r.json()["id"])
            status = r.json()["status"]
            t_b = time.monotonic()
            with session_scope(sessions) as s:
                built = build_staged(s, job_id)
            t_built = time.monotonic() - t0
            with Session(engine) as s:
                total = s.scalar(select(Job.total_items).where(Job.id == job_id))
        finally:
            procs.stop()
            engine.dispose()
    return [
        f"intake: {n:,} answers as NDJSON ({len(body) / 2**20:.1f} MiB, {total:,} entry items) through gunicorn "
        "(1 worker)",
        f"  POST → 202               {t_202:.2f} s   ratio to goal ({GOAL_202_S:.0f} s) {t_202 / GOAL_202_S:.2f}",
        f"  web RSS peak             {peak:.0f} MB   ratio to goal ({GOAL_RSS_MB:.0f} MB) {peak / GOAL_RSS_MB:.2f}",
        f"  status at 202            {status}; build_staged: {built} ({time.monotonic() - t_b:.2f} s)",
        f"  POST → items built       {t_built:.2f} s",
    ]


def at_limit(n: int) -> list[str]:
    flush_redis()
    with fresh_database() as db_url:
        engine = make_engine(db_url)
        sessions = make_session_factory(engine)
        with session_scope(sessions) as s:
            token = create_token(s, "bench").token
        env = {"DATABASE_URL": db_url, "REDIS_URL": REDIS_URL, "PERPLEXITY_API_KEY": "bench-key",
               "FACTGATE_SECRET_KEY": "x"}  # fmt: skip
        procs = Procs(env=env)
        try:
            sim = procs.start_simulator(free_port(), "--decisions-rps", str(LIMIT), "--latency", "0.3")
            procs.env["PERPLEXITY_API_BASE"] = sim
            web = procs.start_web(free_port(), workers=1)
            procs.start_worker(concurrency=16, beat=True)
            before = httpx.get(sim + "/stats").json().get("endpoints", {}).get("decisions", {}).get("429", 0)
            t0 = time.time()
            r = httpx.post(
                f"{web}/v1/jobs?kind=citations",
                content=answers_body(n),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
                timeout=120,
            )
            if r.status_code != 202:
                raise SystemExit(f"at the limit: {r.status_code} {r.text[:500]}")
            job_id = uuid.UUID(r.json()["id"])
            while True:
                with Session(engine) as s:
                    job = s.get(Job, job_id)
                    if job is not None and job.status in ("completed", "failed", "cancelled"):
                        ended = job.completed_at or job.failed_at or job.cancelled_at
                        status = job.status
                        metrics = (job.summary or {}).get("metrics") or {}
                        break
                time.sleep(0.1)
            with Session(engine) as s:
                requests = s.scalar(
                    select(func.count())
                    .select_from(ApiCall)
                    .where(ApiCall.job_id == job_id, ApiCall.status_code == 200)
                )
                attempts = s.scalar(select(func.count()).select_from(ApiCall).where(ApiCall.job_id == job_id))
            after = httpx.get(sim + "/stats").json().get("endpoints", {}).get("decisions", {}).get("429", 0)
        finally:
            procs.stop()
            engine.dispose()
    elapsed = (ended.timestamp() if ended is not None else time.time()) - t0
    rate = (requests or 0) / elapsed
    throttled = int(after) - int(before)
    met = rate / LIMIT >= GOAL_RATIO and throttled == 0 and status == "completed"
    return [
        f"at the limit: {n} answers ({metrics.get('sentences', '?')} sentences), simulator {LIMIT:g} req/s, "
        "latency 0.3 s, web + 1 worker (defaults) + beat",
        f"  job {status}: {requests} Decisions requests answered 200 of {attempts} attempts in {elapsed:.1f} s",
        f"  achieved                 {rate:.2f} req/s   ratio to limit {rate / LIMIT:.3f}",
        f"  upstream 429s            {throttled}",
        f"  goal: ≥ {GOAL_RATIO} of the limit with 0 upstream 429s — {'MET' if met else 'NOT MET'}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=100_000)
    ap.add_argument("--limit-answers", type=int, default=300)
    ap.add_argument("--part", default="intake,limit", help="comma-separated: intake, limit")
    args = ap.parse_args()
    parts = {p.strip() for p in args.part.split(",")}
    report: list[str] = []
    if "intake" in parts:
        lines = intake(args.answers)
        print("\n".join(lines), flush=True)
        report += lines
    if "limit" in parts:
        lines = at_limit(args.limit_answers)
        print("\n".join(lines), flush=True)
        report += lines
    print("\nsummary\n" + "\n".join(report))


if __name__ == "__main__":
    main()
