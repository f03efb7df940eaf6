"""Verdict reuse across a tenant's jobs (issue 35): what a re-run costs when nothing, or a tenth, changed.

The stack as the README and Procfile start it — the simulator as its own process at 10 Decisions requests/s
with 0.3 s latency (plus 65 ms a question beyond the first), gunicorn, one `celery worker` (the shipped FACTGATE_WORKER_CONCURRENCY threads) and beat — and one tenant submitting
`citations` jobs over the API on the pinned model `pplx-decider-v1.2` (a `…-latest` alias is never reused):

1. first: N realistic answers (bench/_answers.py: ~5 sentences and 4 sources each, some sources 2–10 kB);
2. same: the same rows again — goal 0 upstream requests and a time ≤ 10 % of the first;
3. edited: the rows with 10 % of the answers edited (one sentence each) — goal requests ≤ 0.11 of the first;
4. none: the original rows with `reuse=none` — as many requests as the first.

For each run: the upstream requests (HTTP attempts the job sent, from `api_calls`; of them the 429s, sent
again; the simulator's own count beside it), the answers reused from the store, the time from POST to
completed, and the ratios to the first. Then the first run's request rate, and the same rows' time against
the least the first run could take (its requests at the full rate): a first run slower than the limit does
not flatter that ratio.

The simulator stands apart from the stack as in bench/at_limit.py (bench/_sim_recorder.py: real-time
priority, a short GIL switch interval): at normal priority, on two cores shared with the worker and
Postgres, its own handler threads stamp a packed request's arrival late now and then (the long bodies take
their GIL turns), past the limiter's 10 ms arrival margin; each 429 that draws blocks the scope for its
Retry-After second, and the first run measured the stand-in's scheduling more than our pacing (CHANGELOG.md).
`--sim-same-priority` runs it that way.

    FACTGATE_BENCH_REDIS_URL=redis://127.0.0.1:6379/12 .venv/bin/python bench/reuse.py [--answers 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._answers import answers, edit_answers, ndjson
from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database
from config import Settings
from jobs.tenancy import create_token
from models import ApiCall, Job, make_engine, make_session_factory, session_scope

LIMIT = 10.0
MODEL = "pplx-decider-v1.2"
EDITED_SHARE = 0.10


@dataclass(frozen=True)
class Run:
    name: str
    status: str
    requests: int  # HTTP attempts the job sent upstream
    refused: int  # of those, refused by the simulator's rate limiter (429) and sent again
    simulator: int  # Decisions requests the simulator saw meanwhile
    reused: int
    sentences: int
    seconds: float


def _sim_decisions(sim: str) -> int:
    stats = httpx.get(sim + "/stats").json().get("endpoints", {}).get("decisions", {})
    return int(sum(v for k, v in stats.items() if k.isdigit()))


def _run(
    name: str, engine: Engine, web: str, sim: str, token: str, rows: list[dict[str, Any]], query: str
) -> Run:
    before = _sim_decisions(sim)
    t0 = time.time()
    resp = httpx.post(
        f"{web}/v1/jobs?kind=citations&model={MODEL}{query}",
        content=ndjson(rows),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
        timeout=300,
    )
    if resp.status_code != 202:
        raise SystemExit(f"{name}: {resp.status_code} {resp.text[:500]}")
    job_id = uuid.UUID(resp.json()["id"])
    while True:
        with Session(engine) as s:
            job = s.get(Job, job_id)
            if job is not None and job.status in ("completed", "failed", "cancelled"):
                ended = job.completed_at or job.failed_at or job.cancelled_at
                status, summary = job.status, job.summary or {}
                break
        time.sleep(0.1)
    with Session(engine) as s:
        sent = s.scalar(select(func.count()).where(ApiCall.job_id == job_id, ApiCall.reused.is_(False)))
        reused = s.scalar(select(func.count()).where(ApiCall.job_id == job_id, ApiCall.reused.is_(True)))
        refused = s.scalar(select(func.count()).where(ApiCall.job_id == job_id, ApiCall.status_code == 429))
    seconds = (ended.timestamp() if ended is not None else time.time()) - t0
    metrics = summary.get("metrics")
    sentences = int(str(metrics.get("sentences") or 0)) if isinstance(metrics, dict) else 0
    return Run(
        name,
        status,
        int(sent or 0),
        int(refused or 0),
        _sim_decisions(sim) - before,
        int(reused or 0),
        sentences,
        seconds,
    )


def bench(n: int, same_priority: bool = False) -> list[str]:
    flush_redis()
    rows = answers(n)
    edited = edit_answers(rows, EDITED_SHARE)
    with fresh_database() as db_url:
        engine = make_engine(db_url)
        with session_scope(make_session_factory(engine)) as s:
            token = create_token(s, "bench").token
        env = {"DATABASE_URL": db_url, "REDIS_URL": REDIS_URL, "PERPLEXITY_API_KEY": "bench-key",
               "FACTGATE_SECRET_KEY": "x"}  # fmt: skip
        procs = Procs(env=env)
        try:
            sim = procs.start_recording_simulator(
                free_port(),
                "--decisions-rps",
                str(LIMIT),
                "--latency",
                "0.3",
                *(["--same-priority"] if same_priority else []),
            )
            priority = procs.log("simulator").strip().splitlines()[-1].partition(" at ")[2]
            procs.env["PERPLEXITY_API_BASE"] = sim
            web = procs.start_web(free_port(), workers=1)
            threads = Settings.from_env(procs.env).worker_concurrency
            procs.start_worker(concurrency=threads, beat=True)
            runs = [
                _run("first", engine, web, sim, token, rows, ""),
                _run("same", engine, web, sim, token, rows, ""),
                _run("edited", engine, web, sim, token, edited, ""),
                _run("none", engine, web, sim, token, rows, "&reuse=none"),
            ]
        finally:
            procs.stop()
            engine.dispose()
    first = runs[0]
    lines = [
        f"verdict reuse: {n:,} citations answers ({first.sentences:,} sentences), model {MODEL}, simulator "
        f"{LIMIT:g} req/s, latency 0.3 s, web + 1 worker ({Settings.from_env().worker_concurrency} threads) + beat, one tenant",
        f"  simulator (stands in for the remote API): {priority}",
        f"  {'run':8} {'status':10} {'requests':>9} {'(429s)':>7} {'(sim)':>7} {'reused':>7} {'time s':>8} "
        f"{'requests/first':>15} {'time/first':>11}",
    ]
    for r in runs:
        lines.append(
            f"  {r.name:8} {r.status:10} {r.requests:9,} {r.refused:7,} {r.simulator:7,} {r.reused:7,} "
            f"{r.seconds:8.1f} {r.requests / max(first.requests, 1):15.3f} "
            f"{r.seconds / max(first.seconds, 1e-9):11.3f}"
        )
    same, edit, none = runs[1], runs[2], runs[3]
    # The first run's time depends on how well it kept the limit busy; against the least it could take (its
    # requests at the full rate), the same-rows ratio does not gain from a first run that was slow.
    floor = first.requests / LIMIT
    lines.append(
        f"  first run {first.requests / max(first.seconds, 1e-9):.2f} requests/s ({first.requests:,} in "
        f"{first.seconds:.1f} s; at the full {LIMIT:g}/s it would take {floor:.1f} s); same rows ÷ that "
        f"floor {same.seconds / max(floor, 1e-9):.3f}"
    )
    goals = [
        ("same rows: 0 upstream requests", same.requests == 0 and same.simulator == 0),
        ("same rows: time ≤ 0.10 of the first", same.seconds <= 0.10 * first.seconds),
        (
            f"{EDITED_SHARE:.0%} edited: requests ≤ 0.11 of the first",
            edit.requests <= 0.11 * first.requests,
        ),
        (
            "reuse none: as many requests as the first (within 1 %: retried attempts vary), none reused",
            none.reused == 0 and abs(none.requests - first.requests) <= 0.01 * first.requests,
        ),
    ]
    lines += [f"  goal: {text} — {'MET' if met else 'NOT MET'}" for text, met in goals]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=2_000)
    ap.add_argument(
        "--sim-same-priority",
        action="store_true",
        help="run the simulator at normal priority: its own scheduling delay then counts as arrival jitter",
    )
    args = ap.parse_args()
    print("\n".join(bench(args.answers, args.sim_same_priority)), flush=True)


if __name__ == "__main__":
    main()
