"""At the limit: does a batch use the upstream's 10 requests/s fully without ever exceeding it?

Runs the real stack as the Procfile starts it, with the shipped defaults — the simulator as its own
process limited to 10 Decisions requests/s with 0.3 s latency, WORKERS Celery worker processes (threads
pool, FACTGATE_WORKER_CONCURRENCY threads each, prefetch 1), `celery beat`, Postgres, Redis — and pushes
RUNS consecutive jobs of N grounded claims through it (same key). A setting differs from the shipped
default only when its flag is given, and the first line then names it. For each run it prints the
achieved request rate (claims ÷ submit → completed, the job's own completed_at) and its ratio to the
limit, what the simulator answered (200s and 429s), when requests arrived at its rate limiter (the worst
window: the closest 11 consecutive arrivals — under 1 s is a 429 — and the most arrivals in any 1 s), the
start and tail around the steady part, gaps where the limiter had nobody waiting, and how often the
wire gate held a request back. Then one line: is the goal — at least 0.97 of the limit with 0 upstream
429s in every run — met?

`--kind citations` runs packed citations jobs instead (the shipped default: an answer's sentences in one
request, docs/spec.md §9): RUNS jobs of N answers (examples/citations.jsonl cycled, each with its own id and
text), the rate counted in upstream requests, since a request now answers several sentences.

`--cpu-hog N` keeps N extra processes spinning on the CPU for the whole bench (on a 2-core host, 2 keeps
both cores busy with unrelated work), to show the pacing holds on a busy host.

Afterwards, against the same simulator (another key, so another bucket), the peer: one claim at a time in
a loop, the way a laptop script does it.

    .venv/bin/python bench/at_limit.py [--claims 600] [--runs 3] [--workers 1] [--cpu-hog 0]
        [--kind claims|citations] [--answers 600]
        [--concurrency C] [--headroom H] [--margin M] [--peer-claims 60]

Redis: FACTGATE_BENCH_REDIS_URL (its database is flushed); Postgres: FACTGATE_BENCH_PG_ADMIN_URL (a fresh
database of its own, dropped afterwards).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis as redis_lib

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database
from checks import claims as claim_rules
from checks.citation_rows import parse_citation_lines
from checks.kinds.citations import CitationsOptions
from checks.kinds.citations import parse_options as parse_citations_options
from checks.options import ClaimsOptions, parse_claims_options
from clients.perplexity import PerplexityClient
from config import Settings
from jobs.citations import citation_units
from jobs.claims import claim_units
from jobs.intake import create_job
from jobs.tenancy import get_or_create_tenant
from models import ApiCall, Job, make_engine, make_session_factory, session_scope
from tests.reference import reference_claims
from workers.api import enqueue_start
from workers.app import make_celery
from workers.metrics import METRICS_KEY

LIMIT = 10.0
GOAL_RATIO = 0.97
KEY = "bench-key"


EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "citations.jsonl"


def answers(n: int, tag: str) -> list[str]:
    """`n` answers as NDJSON lines: the examples cycled, each with an id and a sentence of its own (so no
    two requests are the same)."""
    base = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    out = []
    for i in range(n):
        row = dict(base[i % len(base)])
        row["id"] = f"{tag}{i}"
        row["answer"] = f"{row['answer']} Answer {tag}{i} ends here."
        out.append(json.dumps(row))
    return out


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
    wire_held: int = 0
    wire_held_s: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)  # the host's 1-minute load average at the start and the end

    def rate(self, n: int) -> float:
        """Requests per second end to end: one per claim, or (packed citations) the requests sent."""
        return (n if n else self.attempts) / self.elapsed


def decisions_429s(sim: str) -> int:
    stats = httpx.get(sim + "/stats").json()
    return int(stats.get("endpoints", {}).get("decisions", {}).get("429", 0))


def wire_held() -> tuple[int, float]:
    """Requests the wire gate held back so far, and for how long (the workers' counters in Redis)."""
    raw = redis_lib.Redis.from_url(REDIS_URL).hmget(
        METRICS_KEY, "decisions|wire_held", "decisions|wire_held_sum"
    )
    return int(raw[0] or 0), float(raw[1] or 0.0)


def run_job(
    sim: str,
    engine: Engine,
    sessions: sessionmaker[Session],
    settings: Settings,
    opts: ClaimsOptions | CitationsOptions,
    tag: str,
    n: int,
) -> Run:
    if isinstance(opts, CitationsOptions):
        kind = "citations"
        units, _ = citation_units(parse_citation_lines(answers(n, tag), max_rows=n), opts)
    else:
        kind = "claims"
        units, _ = claim_units(claim_rules.validate_rows(claims(n, tag)), opts)
    before_429 = decisions_429s(sim)
    held_before, held_s_before = wire_held()
    celery = make_celery(settings, with_tasks=False)
    # The clock starts before the job exists: the dispatcher picks a queued job up from its row, without
    # waiting for the message.
    load_before = os.getloadavg()[0]
    t0_wall, t0_mono = time.time(), time.monotonic()
    with session_scope(sessions) as s:
        tenant = get_or_create_tenant(s, "bench")
        job, _ = create_job(s, tenant_id=tenant.id, kind=kind, options=opts.as_dict(), units=units)
        job_id = job.id
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
    time.sleep(1.2)  # workers write their counters once a second
    held, held_s = wire_held()
    return Run(
        status=str(status),
        attempts=int(attempts),
        elapsed=elapsed,
        throttled=decisions_429s(sim) - before_429,
        arrivals=[(float(t), bool(ok)) for t, ok in arrivals],
        started_mono=t0_mono,
        wire_held=held - held_before,
        wire_held_s=held_s - held_s_before,
        load=(load_before, os.getloadavg()[0]),
    )


def report(i: int, run: Run, n: int, headroom: float) -> None:
    rate = run.rate(n)
    interval = 1 / (LIMIT * (1 - headroom))
    times = [t for t, _ok in run.arrivals]
    accepted = [t for t, ok in run.arrivals if ok]
    print(f"run {i}: {n or run.attempts} {'claims' if n else 'requests'}, job {run.status}, {run.attempts} upstream attempts; host load "
          f"{run.load[0]:.1f} → {run.load[1]:.1f} (1-min average, {os.cpu_count()} cores)")  # fmt: skip
    print(f"  achieved                   {rate:.2f} req/s   ratio to limit {rate / LIMIT:.3f}   "
          f"submit → completed {run.elapsed:.2f} s")  # fmt: skip
    print(f"  simulator answered         {len(accepted)} accepted (200s), {len(times) - len(accepted)} refused (429s); "
          f"workers saw {run.throttled} 429s")  # fmt: skip
    print(f"  wire gate held back        {run.wire_held} requests, {run.wire_held_s * 1000:.0f} ms in all")
    if len(accepted) < 11:
        return
    steady = (len(accepted) - 1) / (accepted[-1] - accepted[0])
    closest = min(times[k + 10] - times[k] for k in range(len(times) - 10))
    most = max(bisect.bisect_left(times, t + 1.0) - k for k, t in enumerate(times))
    gaps = [b - a for a, b in itertools.pairwise(accepted)]
    idle = [g - interval for g in gaps if g > 1.5 * interval]
    print(f"  first → last arrival       {steady:.2f} req/s   ratio to limit {steady / LIMIT:.3f}   "
          f"start {accepted[0] - run.started_mono:.2f} s, tail {run.elapsed - (accepted[-1] - run.started_mono):.2f} s")  # fmt: skip
    print(f"  worst window               closest 11 arrivals {closest:.4f} s (a 429 below 1 s; slots ≥ "
          f"{10 * interval:.4f} s apart, {(10 * interval - closest) * 1000:.1f} ms of the "
          f"{(10 * interval - 1) * 1000:.1f} ms slack used); most arrivals in any 1 s: {most}")  # fmt: skip
    print(
        f"  gaps > 1.5 intervals       {len(idle)}, {sum(idle):.2f} s lost   (largest gap {max(gaps):.3f} s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=600)
    ap.add_argument("--kind", choices=("claims", "citations"), default="claims")
    ap.add_argument("--answers", type=int, default=600, help="answers per run with --kind citations")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peer-claims", type=int, default=60)
    ap.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--cpu-hog", type=int, default=0, help="processes spinning on the CPU meanwhile")
    ap.add_argument("--latency", type=float, default=0.3)
    ap.add_argument(
        "--sim-same-priority",
        action="store_true",
        help="run the simulator at normal priority: its own scheduling delay then counts as arrival jitter",
    )
    # Settings under study: each one is the shipped default unless given (and then named in the output).
    ap.add_argument("--concurrency", type=int, default=None, help="FACTGATE_WORKER_CONCURRENCY")
    ap.add_argument("--headroom", type=float, default=None, help="FACTGATE_LIMITER_HEADROOM")
    ap.add_argument("--margin", type=float, default=None, help="FACTGATE_LIMITER_ARRIVAL_MARGIN_S")
    args = ap.parse_args()
    overrides = {
        name: str(value)
        for name, value in (
            ("FACTGATE_WORKER_CONCURRENCY", args.concurrency),
            ("FACTGATE_LIMITER_HEADROOM", args.headroom),
            ("FACTGATE_LIMITER_ARRIVAL_MARGIN_S", args.margin),
        )
        if value is not None
    }
    shipped = Settings.from_env(overrides)
    headroom = shipped.limiter_headroom

    flush_redis()
    runs: list[Run] = []
    peer_rate = peer_429 = None
    with fresh_database() as db_url:
        port = free_port()
        env = {"DATABASE_URL": db_url, "REDIS_URL": REDIS_URL, "PERPLEXITY_API_KEY": KEY, **overrides}
        procs = Procs(env=env)
        try:
            procs.start_cpu_hogs(args.cpu_hog)
            sim = procs.start_recording_simulator(
                port,
                "--decisions-rps",
                str(LIMIT),
                "--latency",
                str(args.latency),
                *(["--same-priority"] if args.sim_same_priority else []),
            )
            procs.env["PERPLEXITY_API_BASE"] = sim
            for w in range(args.workers):
                # As the Procfile: --concurrency ${FACTGATE_WORKER_CONCURRENCY:-16}.
                procs.start_worker(f"worker{w + 1}", concurrency=shipped.worker_concurrency, loglevel="info")
            procs.start_beat(loglevel="info")
            settings = Settings.from_env(procs.env)
            engine = make_engine(db_url)
            sessions = make_session_factory(engine)
            citations = args.kind == "citations"
            opts: ClaimsOptions | CitationsOptions = (
                parse_citations_options({}) if citations else parse_claims_options({"mode": "grounded"})
            )
            size = args.answers if citations else args.claims
            per_run = 0 if citations else args.claims  # citations: counted in requests sent
            best = args.claims / ((args.claims - 1) / (LIMIT * (1 - headroom)) + args.latency) / LIMIT
            studied = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "none (shipped defaults)"
            what = (
                f"{args.answers} answers (citations, packed)"
                if citations
                else f"{args.claims} grounded claims"
            )
            print(f"at the limit: {args.runs} × {what}, simulator {LIMIT:g} req/s, "
                  f"latency {args.latency}s; {args.workers} worker process(es) × {shipped.worker_concurrency} "
                  f"threads + beat; cpu hogs {args.cpu_hog}")  # fmt: skip
            print(f"  settings under study: {studied}; headroom {headroom:g}, arrival margin "
                  f"{shipped.limiter_arrival_margin_s * 1000:g} ms, chord size {shipped.chord_size}, "
                  f"sweep every {shipped.sweep_interval_s:g} s")  # fmt: skip
            sim_line = procs.log("simulator").strip().splitlines()[-1]
            print(f"  simulator (stands in for the remote API): {sim_line.partition(' at ')[2]}")
            if not citations:
                print(f"  (ceiling with this headroom: {1 - headroom:.3f} steady; {best:.3f} end to end for "
                      f"{args.claims} claims, counting only the last answer's latency)")  # fmt: skip
            for i in range(1, args.runs + 1):
                run = run_job(sim, engine, sessions, settings, opts, f"r{i}-{uuid.uuid4().hex[:4]}-", size)
                runs.append(run)
                report(i, run, per_run, headroom)

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

    ratios = [r.rate(per_run) / LIMIT for r in runs]
    throttled = [r.throttled for r in runs]
    met = len(runs) == args.runs and all(x >= GOAL_RATIO for x in ratios) and not any(throttled)
    if peer_rate is not None:
        mean_rate = sum(r.rate(per_run) for r in runs) / len(runs)
        print(f"peer: one claim at a time, {args.peer_claims} claims against the same simulator")
        print(f"  achieved                   {peer_rate:.2f} req/s   ratio to limit {peer_rate / LIMIT:.3f}")
        print(f"  upstream 429s (peer)       {peer_429}")
        print(f"factgate ÷ peer              {mean_rate / peer_rate:.2f}×")
    print(f"goal: ≥ {GOAL_RATIO} of the limit with 0 upstream 429s in all {args.runs} runs — "
          f"{'MET' if met else 'NOT MET'} (ratios {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"429s {', '.join(map(str, throttled))})")  # fmt: skip


if __name__ == "__main__":
    main()
