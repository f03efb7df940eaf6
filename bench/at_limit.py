"""At the limit: does a batch use the upstream's 10 requests/s fully without ever exceeding it?

Runs the real stack — the simulator as its own process limited to 10 Decisions requests/s with 0.3 s
latency, a Celery worker process, Postgres, Redis — pushes N grounded claims through it and prints
the achieved request rate ÷ 10 and the upstream 429 count. Beside it, in the same run and against
the same simulator (another key, so another bucket), the peer: one claim at a time in a loop, the
way a laptop script does it.

    .venv/bin/python bench/at_limit.py [--claims 600] [--peer-claims 60] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database
from checks import claims as claim_rules
from checks.options import parse_claims_options
from clients.perplexity import PerplexityClient
from config import Settings
from jobs.claims import claim_units
from jobs.intake import create_job
from jobs.tenancy import get_or_create_tenant
from models import ApiCall, Job, make_engine, make_session_factory, session_scope
from tests.reference import reference_claims
from workers.api import enqueue_start
from workers.app import make_celery

LIMIT = 10.0


def claims(n: int, tag: str) -> list[dict[str, object]]:
    base = reference_claims()
    return [{"id": f"{tag}{i}", "claim": f"{base[i % len(base)]['claim']} ({tag}{i})"} for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=600)
    ap.add_argument("--peer-claims", type=int, default=60)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.3)
    args = ap.parse_args()

    flush_redis()
    with fresh_database() as db_url:
        port = free_port()
        env = {
            "DATABASE_URL": db_url,
            "REDIS_URL": REDIS_URL,
            "PERPLEXITY_API_KEY": "bench-key",
            "FACTGATE_CHORD_SIZE": "200",
            "FACTGATE_SWEEP_INTERVAL_S": "5",
        }
        procs = Procs(env=env)
        try:
            sim = procs.start_simulator(port, "--decisions-rps", str(LIMIT), "--latency", str(args.latency))
            procs.env["PERPLEXITY_API_BASE"] = sim
            procs.start_worker(concurrency=args.concurrency)
            settings = Settings.from_env(procs.env)
            engine = make_engine(db_url)
            sessions = make_session_factory(engine)

            rows = claim_rules.validate_rows(claims(args.claims, "b"))
            opts = parse_claims_options({"mode": "grounded"})
            units, _ = claim_units(rows, opts)
            with session_scope(sessions) as s:
                tenant = get_or_create_tenant(s, "bench")
                job, _ = create_job(
                    s, tenant_id=tenant.id, kind="claims", options=opts.as_dict(), units=units
                )
                job_id = job.id
            celery = make_celery(settings, with_tasks=False)
            t0 = time.monotonic()
            enqueue_start(celery, job_id)
            while True:
                with Session(engine) as s:
                    status = s.scalar(select(Job.status).where(Job.id == job_id))
                if status in ("completed", "failed", "cancelled"):
                    break
                time.sleep(0.2)
            elapsed = time.monotonic() - t0
            with Session(engine) as s:
                attempts = (
                    s.scalar(select(func.count()).select_from(ApiCall).where(ApiCall.job_id == job_id)) or 0
                )
                first, last = s.execute(
                    select(func.min(ApiCall.created_at), func.max(ApiCall.created_at)).where(
                        ApiCall.job_id == job_id
                    )
                ).one()
            stats = httpx.get(sim + "/stats").json()
            batch_429 = stats.get("endpoints", {}).get("decisions", {}).get("429", 0)

            # The peer: one claim at a time, like the reference script, same simulator, its own key.
            peer_rows = claims(args.peer_claims, "p")
            client = PerplexityClient(sim, "peer-key", timeout=30)
            tp = time.monotonic()
            for row in peer_rows:
                client.decide(claim_rules.request_body(str(row["claim"]), model=opts.model, mode="grounded"))
            peer_elapsed = time.monotonic() - tp
            client.close()
            stats = httpx.get(sim + "/stats").json()
            total_429 = stats.get("endpoints", {}).get("decisions", {}).get("429", 0)
            engine.dispose()
        finally:
            procs.stop()
    span = (last - first).total_seconds() if first and last else elapsed
    rate_wall = args.claims / elapsed
    rate_span = (attempts - 1) / span if span > 0 else float("nan")
    peer_rate = args.peer_claims / peer_elapsed
    print(f"at the limit: {args.claims} grounded claims, simulator {LIMIT:g} req/s, latency {args.latency}s, "
          f"worker threads {args.concurrency}")  # fmt: skip
    print(f"  job status                 {status}")
    print(f"  upstream attempts          {attempts}")
    print(f"  submit → completed         {elapsed:.2f} s")
    print(f"  achieved (end to end)      {rate_wall:.2f} req/s   ratio to limit {rate_wall / LIMIT:.3f}")
    print(f"  achieved (first→last call) {rate_span:.2f} req/s   ratio to limit {rate_span / LIMIT:.3f}")
    print(f"  upstream 429s (batch)      {batch_429}")
    print(f"peer: one claim at a time, {args.peer_claims} claims against the same simulator")
    print(f"  achieved                   {peer_rate:.2f} req/s   ratio to limit {peer_rate / LIMIT:.3f}")
    print(f"  upstream 429s (peer)       {total_429 - batch_429}")
    print(f"factgate ÷ peer              {rate_wall / peer_rate:.2f}×")


if __name__ == "__main__":
    main()
