"""Fair share of a scarce upstream: does a small job wait for a big one, do weights hold, how fast is cancel?

Runs the server stack as the Procfile starts it, with the shipped defaults — the simulator as its own
process limited to 10 Decisions requests/s with 0.3 s latency, two Celery worker processes, `celery beat`,
Postgres, Redis — and measures, in one run:

1. a 10-claim job of a second tenant submitted 5 s into a 1,500-claim job: seconds from submit to
   completed (goal ≤ 5 s), and how far the big job had got meanwhile;
2. cancel latency: the big job is cancelled; the last upstream POST of it that started after the cancel
   (goal: none later than 2 s after it);
3. three tenants with weights 1:1:2, each with a big job: each one's share of the calls while all three
   are backlogged (goal 25/25/50 % ± 10 %).

    .venv/bin/python bench/fairness.py [--big 1500] [--small 10] [--latency 0.3] [--window 300]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database
from checks import claims as claim_rules
from checks.options import parse_claims_options
from config import Settings
from jobs.claims import claim_units
from jobs.control import cancel_job
from jobs.intake import create_job
from jobs.tenancy import get_or_create_tenant, set_tenant
from models import ApiCall, Job, make_engine, make_session_factory, session_scope, utcnow
from workers.api import enqueue_start
from workers.app import make_celery

LIMIT = 10.0
ENDED = ("completed", "failed", "cancelled")


EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "claims.jsonl"


def claims(n: int, tag: str) -> list[dict[str, object]]:
    base = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    return [{"id": f"{tag}{i}", "claim": f"{base[i % len(base)]['claim']} ({tag}{i})"} for i in range(n)]


def submit(
    sessions: sessionmaker[Session],
    settings: Settings,
    tenant: str,
    n: int,
    tag: str,
    priority: str = "batch",
) -> uuid.UUID:
    rows = claim_rules.validate_rows(claims(n, tag))
    opts = parse_claims_options({"mode": "ungrounded", "priority": priority})
    units, _ = claim_units(rows, opts)
    with session_scope(sessions) as s:
        t = get_or_create_tenant(s, tenant)
        job, _ = create_job(s, tenant_id=t.id, kind="claims", options=opts.as_dict(), units=units)
        job_id = job.id
    celery = make_celery(settings, with_tasks=False)
    enqueue_start(celery, job_id)
    celery.close()
    return job_id


def status(engine: Engine, job_id: uuid.UUID) -> str:
    with Session(engine) as s:
        return str(s.scalar(select(Job.status).where(Job.id == job_id)))


def calls_of(engine: Engine, job_id: uuid.UUID) -> int:
    with Session(engine) as s:
        return int(s.scalar(select(func.count()).where(ApiCall.job_id == job_id)) or 0)


def wait_ended(engine: Engine, job_id: uuid.UUID, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if status(engine, job_id) in ENDED:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} did not end in {timeout}s")


def last_post_start(engine: Engine, job_id: uuid.UUID) -> datetime | None:
    """When the last upstream POST of the job began (rows are written after the answer: minus latency)."""
    with Session(engine) as s:
        rows = s.execute(select(ApiCall.created_at, ApiCall.latency_ms).where(ApiCall.job_id == job_id)).all()
    starts = [created.timestamp() - latency / 1000.0 for created, latency in rows]
    return datetime.fromtimestamp(max(starts)).astimezone() if starts else None


def cancel(sessions: sessionmaker[Session], job_id: uuid.UUID) -> datetime:
    with session_scope(sessions) as s:
        job = s.get(Job, job_id)
        assert job is not None
        cancel_job(s, job)
    return utcnow()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", type=int, default=1500)
    ap.add_argument("--small", type=int, default=10)
    ap.add_argument("--latency", type=float, default=0.3)
    ap.add_argument(
        "--window", type=int, default=300, help="calls over which the weighted shares are counted"
    )
    ap.add_argument("--concurrency", type=int, default=None, help="FACTGATE_WORKER_CONCURRENCY")
    args = ap.parse_args()
    overrides = {} if args.concurrency is None else {"FACTGATE_WORKER_CONCURRENCY": str(args.concurrency)}
    threads = Settings.from_env(overrides).worker_concurrency

    flush_redis()
    with fresh_database() as db_url:
        port = free_port()
        env = {
            "DATABASE_URL": db_url,
            "REDIS_URL": REDIS_URL,
            "PERPLEXITY_API_KEY": "bench-key",
            "FACTGATE_DECISIONS_RPS": str(LIMIT),
            **overrides,
        }
        procs = Procs(env=env)
        try:
            sim = procs.start_simulator(port, "--decisions-rps", str(LIMIT), "--latency", str(args.latency))
            procs.env["PERPLEXITY_API_BASE"] = sim
            # As the Procfile: worker processes (two, to show the dispatcher's leader election), beat apart.
            procs.start_worker("worker0", concurrency=threads, loglevel="info")
            procs.start_worker("worker1", concurrency=threads, loglevel="info")
            procs.start_beat(loglevel="info")
            settings = Settings.from_env(procs.env)
            engine = make_engine(db_url)
            sessions = make_session_factory(engine)

            # 1. a small job of another tenant, 5 s into a big one
            big = submit(sessions, settings, "nightly", args.big, "big")
            time.sleep(5.0)
            big_before = calls_of(engine, big)
            small = submit(sessions, settings, "cli", args.small, "small", priority="interactive")
            small_s = wait_ended(engine, small, 120)
            big_during = calls_of(engine, big) - big_before

            # 2. cancel the big job
            cancelled_at = cancel(sessions, big)
            cancel_s = wait_ended(engine, big, 60)
            last_start = last_post_start(engine, big)
            after = (last_start - cancelled_at).total_seconds() if last_start else float("nan")

            # 3. weights 1:1:2
            with session_scope(sessions) as s:
                for name, weight in (("a", 1.0), ("b", 1.0), ("c", 2.0)):
                    get_or_create_tenant(s, name)
                    set_tenant(s, name, weight=weight)
            jobs = {name: submit(sessions, settings, name, args.window, name) for name in ("a", "b", "c")}
            deadline = time.monotonic() + 300
            order: list[uuid.UUID] = []
            while time.monotonic() < deadline:
                with Session(engine) as s:
                    order = [
                        j
                        for (j,) in s.execute(
                            select(ApiCall.job_id)
                            .where(ApiCall.job_id.in_(list(jobs.values())))
                            .order_by(ApiCall.id)
                        )
                    ]
                started = [order.index(j) for j in jobs.values() if j in order]
                if len(started) == 3 and len(order) >= max(started) + 40 + args.window // 2:
                    break
                time.sleep(0.5)
            start = max(order.index(j) for j in jobs.values()) + 40  # past what was already in flight
            window = order[start : start + args.window // 2]
            counts = Counter(window)
            for job_id in jobs.values():
                cancel(sessions, job_id)
            engine.dispose()
        finally:
            procs.stop()
    studied = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "none (shipped defaults)"
    print(
        f"fairness: simulator {LIMIT:g} req/s, latency {args.latency}s, 2 worker processes × {threads} threads"
        f" + beat; settings under study: {studied}"
    )
    print(f"1. a {args.small}-claim job of a second tenant, submitted 5 s into a {args.big}-claim job")
    print(f"  submit → completed         {small_s:.2f} s   ratio to goal (5 s) {small_s / 5.0:.2f}")
    print(f"  big job calls meanwhile    {big_during}")
    print("2. cancel of the big job")
    print(f"  cancel → job cancelled     {cancel_s:.2f} s")
    print(f"  last POST start − cancel   {after:+.2f} s   (goal: nothing new starts later than +2 s)")
    print(f"3. weights 1:1:2, {len(window)} calls while all three jobs are backlogged")
    for name, target in (("a", 0.25), ("b", 0.25), ("c", 0.50)):
        share = counts[jobs[name]] / len(window) if window else 0.0
        print(f"  tenant {name} (weight {'2' if name == 'c' else '1'})       share {share:.3f}   target {target:.2f}   "
              f"ratio {share / target:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
