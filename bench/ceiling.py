"""Ceiling: how many claims per second the whole stack moves when upstream is free and instant.

Simulator with no limit and no latency (its own process), our limiter set to unlimited, the web app
under gunicorn, one Celery worker process, Postgres and Redis — all on this machine. N claims are
submitted as NDJSON over HTTP; the figure is claims/s from submit to completed, and CPU ms per claim
summed over the web, worker and simulator processes (Postgres and Redis CPU not included; printed
separately from /proc when readable).

    .venv/bin/python bench/ceiling.py [--claims 10000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, cpu_seconds, flush_redis, free_port, fresh_database
from jobs.tenancy import create_token
from models import make_engine, make_session_factory, session_scope

GOAL = 200.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--mode", default="ungrounded")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (one per core)")
    args = ap.parse_args()

    flush_redis()
    with fresh_database() as db_url:
        engine = make_engine(db_url)
        with session_scope(make_session_factory(engine)) as s:
            token = create_token(s, "bench").token
        engine.dispose()
        env = {
            "DATABASE_URL": db_url,
            "REDIS_URL": REDIS_URL,
            "PERPLEXITY_API_KEY": "bench-key",
            "FACTGATE_DECISIONS_RPS": "0",
            "FACTGATE_CHORD_SIZE": "500",
            "FACTGATE_SWEEP_INTERVAL_S": "10",
            "FACTGATE_SECRET_KEY": "bench-secret",
        }
        procs = Procs(env=env)
        try:
            sim = procs.start_simulator(free_port(), "--decisions-rps", "0", "--latency", "0")
            procs.env["PERPLEXITY_API_BASE"] = sim
            web = procs.start_web(free_port())
            for n in range(args.workers):
                procs.start_worker(name=f"worker{n}", concurrency=args.concurrency)
            body = "".join(
                json.dumps(
                    {
                        "id": f"c{i}",
                        "claim": f"Claim number {i}: the Linux kernel was first released in 1991.",
                    }
                )
                + "\n"
                for i in range(args.claims)
            )
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
            pids = {name: p.pid for name, p in procs.procs.items()}
            cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
            t0 = time.monotonic()
            r = httpx.post(
                f"{web}/v1/jobs?kind=claims&mode={args.mode}", content=body, headers=headers, timeout=120
            )
            r.raise_for_status()
            job_id = r.json()["id"]
            t_accepted = time.monotonic() - t0
            status: dict[str, object] = {}
            while True:
                status = httpx.get(f"{web}/v1/jobs/{job_id}", headers=headers, timeout=30).json()
                if status["status"] in ("completed", "failed", "cancelled"):
                    break
                time.sleep(0.5)
            elapsed = time.monotonic() - t0
            cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        finally:
            procs.stop()
    counts = status.get("request_counts", {})
    rate = args.claims / elapsed
    total_cpu = sum(cpu.values())
    print(
        f"ceiling: {args.claims} {args.mode} claims, simulator unlimited with no latency, {args.workers} worker process(es) x {args.concurrency} threads"
    )
    print(f"  job status            {status['status']}  {counts}")
    print(f"  submit → 202          {t_accepted:.2f} s")
    print(f"  submit → completed    {elapsed:.2f} s")
    print(f"  claims/s end to end   {rate:.1f}   ratio to goal ({GOAL:g}/s) {rate / GOAL:.2f}")
    print(
        f"  CPU ms per claim      {1000 * total_cpu / args.claims:.2f}  ("
        + ", ".join(f"{k} {1000 * v / args.claims:.2f}" for k, v in cpu.items())
        + ")"
    )


if __name__ == "__main__":
    main()
