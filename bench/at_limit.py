"""At the limit: does a batch use the upstream's 10 requests/s fully without ever exceeding it?

Runs the real stack — the simulator as its own process limited to 10 Decisions requests/s with 0.3 s
latency, a Celery worker process, Postgres, Redis — and pushes RUNS consecutive jobs of N grounded claims
through it (same worker, same key). For each run it prints the achieved request rate (claims ÷ submit →
completed, the job's own completed_at) and its ratio to the limit, the upstream 429s, and what the
simulator saw: when requests arrived at its rate limiter, the closest 11 consecutive arrivals (under 1 s
is a 429), the start and tail around the steady part, and gaps where the limiter had nobody waiting. Then
one line: is the goal — at least 0.97 of the limit with 0 upstream 429s in every run — met?

Afterwards, against the same simulator (another key, so another bucket), the peer: one claim at a time in
a loop, the way a laptop script does it.

    .venv/bin/python bench/at_limit.py [--claims 600] [--runs 3] [--concurrency 8] [--headroom H] [--peer-claims 60]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database
from checks import claims as claim_rules
from checks.options import ClaimsOptions, parse_claims_options
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
GOAL_RATIO = 0.97
KEY = "bench-key"


def claims(n: int, tag: str) -> list[dict[str, object]]:
    base = reference_claims()
    return [{"id": f"{tag}{i}", "claim": f"{base[i % len(base)]['claim']} ({tag}{i})"} for i in range(n)]


@dataclass
class Run:
    """One job's figures: the end-to-end rate, 429s, and what the simulator saw arrive."""

    status: str
    attempts: int
    elapsed: float
    throttled: int
    arrivals: list[tuple[float, bool]]
    started_mono: float

    def rate(self, n: int) -> float:
        return n / self.elapsed


def decisions_429s(sim: str) -> int:
    stats = httpx.get(sim + "/stats").json()
    return int(stats.get("endpoints", {}).get("decisions", {}).get("429", 0))


def run_job(
    sim: str,
    engine: Engine,
    sessions: sessionmaker[Session],
    settings: Settings,
    opts: ClaimsOptions,
    tag: str,
    n: int,
) -> Run:
    rows = claim_rules.validate_rows(claims(n, tag))
    units, _ = claim_units(rows, opts)
    with session_scope(sessions) as s:
        tenant = get_or_create_tenant(s, "bench")
        job, _ = create_job(s, tenant_id=tenant.id, kind="claims", options=opts.as_dict(), units=units)
        job_id = job.id
    before_429 = decisions_429s(sim)
    celery = make_celery(settings, with_tasks=False)
    t0_wall, t0_mono = time.time(), time.monotonic()
    enqueue_start(celery, job_id)
    while True:
        with Session(engine) as s:
            status = s.scalar(select(Job.status).where(Job.id == job_id))
        if status in ("completed", "failed", "cancelled"):
            break
        time.sleep(0.05)
    polled = time.time() - t0_wall
    with Session(engine) as s:
        job_row = s.get(Job, job_id)
        assert job_row is not None
        ended = job_row.completed_at or job_row.failed_at or job_row.cancelled_at
        attempts = s.scalar(select(func.count()).select_from(ApiCall).where(ApiCall.job_id == job_id)) or 0
    # The job's own end (set by the worker) rather than when this loop noticed it (up to 50 ms later).
    elapsed = ended.timestamp() - t0_wall if ended is not None else polled
    arrivals = httpx.get(sim + "/bench/arrivals", params={"key": KEY, "reset": "1"}).json()["arrivals"]
    return Run(
        status=str(status),
        attempts=int(attempts),
        elapsed=elapsed,
        throttled=decisions_429s(sim) - before_429,
        arrivals=[(float(t), bool(ok)) for t, ok in arrivals],
        started_mono=t0_mono,
    )


def report(i: int, run: Run, n: int, headroom: float) -> None:
    rate = run.rate(n)
    interval = 1 / (LIMIT * (1 - headroom))
    times = [t for t, _ok in run.arrivals]
    accepted = [t for t, ok in run.arrivals if ok]
    print(f"run {i}: {n} claims, job {run.status}, {run.attempts} upstream attempts")
    print(f"  achieved                   {rate:.2f} req/s   ratio to limit {rate / LIMIT:.3f}   "
          f"submit → completed {run.elapsed:.2f} s")  # fmt: skip
    print(f"  upstream 429s              {run.throttled}")
    if len(accepted) < 11:
        return
    steady = (len(accepted) - 1) / (accepted[-1] - accepted[0])
    closest = min(times[k + 10] - times[k] for k in range(len(times) - 10))
    gaps = [b - a for a, b in itertools.pairwise(accepted)]
    idle = [g - interval for g in gaps if g > 1.5 * interval]
    print(f"  first → last arrival       {steady:.2f} req/s   ratio to limit {steady / LIMIT:.3f}   "
          f"start {accepted[0] - run.started_mono:.2f} s, tail {run.elapsed - (accepted[-1] - run.started_mono):.2f} s")  # fmt: skip
    print(f"  closest 11 arrivals        {closest:.4f} s   (slots ≥ {10 * interval:.4f} s apart; "
          f"{(10 * interval - closest) * 1000:.1f} ms of the {(10 * interval - 1) * 1000:.1f} ms slack used)")  # fmt: skip
    print(
        f"  gaps > 1.5 intervals       {len(idle)}, {sum(idle):.2f} s lost   (largest gap {max(gaps):.3f} s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=600)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peer-claims", type=int, default=60)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.3)
    ap.add_argument("--headroom", type=float, default=None, help="FACTGATE_LIMITER_HEADROOM for the worker")
    args = ap.parse_args()
    headroom = Settings().limiter_headroom if args.headroom is None else args.headroom

    flush_redis()
    runs: list[Run] = []
    peer_rate = peer_429 = None
    with fresh_database() as db_url:
        port = free_port()
        env = {
            "DATABASE_URL": db_url,
            "REDIS_URL": REDIS_URL,
            "PERPLEXITY_API_KEY": KEY,
            "FACTGATE_CHORD_SIZE": "200",
            "FACTGATE_SWEEP_INTERVAL_S": "5",
        }
        if args.headroom is not None:
            env["FACTGATE_LIMITER_HEADROOM"] = str(args.headroom)
        procs = Procs(env=env)
        try:
            sim = procs.start_recording_simulator(
                port, "--decisions-rps", str(LIMIT), "--latency", str(args.latency)
            )
            procs.env["PERPLEXITY_API_BASE"] = sim
            procs.start_worker(concurrency=args.concurrency)
            settings = Settings.from_env(procs.env)
            engine = make_engine(db_url)
            sessions = make_session_factory(engine)
            opts = parse_claims_options({"mode": "grounded"})
            best = args.claims / ((args.claims - 1) / (LIMIT * (1 - headroom)) + args.latency) / LIMIT
            print(f"at the limit: {args.runs} × {args.claims} grounded claims, simulator {LIMIT:g} req/s, "
                  f"latency {args.latency}s, worker threads {args.concurrency}, headroom {headroom:g}")  # fmt: skip
            print(f"  (ceiling with this headroom: {1 - headroom:.3f} steady; {best:.3f} end to end for "
                  f"{args.claims} claims, counting only the last answer's latency)")  # fmt: skip
            for i in range(1, args.runs + 1):
                run = run_job(
                    sim, engine, sessions, settings, opts, f"r{i}-{uuid.uuid4().hex[:4]}-", args.claims
                )
                runs.append(run)
                report(i, run, args.claims, headroom)

            if args.peer_claims > 0:
                # The peer: one claim at a time, like the reference script, same simulator, its own key.
                before = decisions_429s(sim)
                client = PerplexityClient(sim, "peer-key", timeout=30)
                tp = time.monotonic()
                for row in claims(args.peer_claims, "p"):
                    client.decide(
                        claim_rules.request_body(str(row["claim"]), model=opts.model, mode="grounded")
                    )
                peer_rate = args.peer_claims / (time.monotonic() - tp)
                client.close()
                peer_429 = decisions_429s(sim) - before
            engine.dispose()
        finally:
            procs.stop()

    ratios = [r.rate(args.claims) / LIMIT for r in runs]
    throttled = [r.throttled for r in runs]
    met = len(runs) == args.runs and all(x >= GOAL_RATIO for x in ratios) and not any(throttled)
    if peer_rate is not None:
        mean_rate = sum(r.rate(args.claims) for r in runs) / len(runs)
        print(f"peer: one claim at a time, {args.peer_claims} claims against the same simulator")
        print(f"  achieved                   {peer_rate:.2f} req/s   ratio to limit {peer_rate / LIMIT:.3f}")
        print(f"  upstream 429s (peer)       {peer_429}")
        print(f"factgate ÷ peer              {mean_rate / peer_rate:.2f}×")
    print(f"goal: ≥ {GOAL_RATIO} of the limit with 0 upstream 429s in all {args.runs} runs — "
          f"{'MET' if met else 'NOT MET'} (ratios {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"429s {', '.join(map(str, throttled))})")  # fmt: skip


if __name__ == "__main__":
    main()
