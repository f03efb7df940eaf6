"""Packing: how many sentences a Decisions request carries, and what that does to a night's work.

Runs the stack as the README starts it (the simulator as its own process at 10 Decisions requests/s with
its latency model — 0.3 s a request plus 65 ms and 92 input tokens per question beyond the first —, one
`celery worker` with the shipped defaults, `celery beat`, Postgres, Redis) and sends, one after the other:

1. ANSWERS realistic answers (bench/_answers.py: about 5 sentences and 4 sources each, some long sources)
   as a `citations` job with the shipped defaults: packed, audited;
2. the same answers with `pack_size: 1` (one request a sentence, the reference recipes' shape);
3. CLAIMS ungrounded claims at `pack_size` 20.

It prints, for 1 and 2: sentences, requests, sentences per request, the time from submit to completed,
sentences per second and its ratio to the goal, input tokens per sentence (for answers whose sources are
all snippet-sized and for those with a document-sized source), and the label agreement between the two
runs, sentence by sentence; the packed job's own audit; the projected time for 200,000 answers at each
rate. For 3: requests and claims per second. Then one line: are the goals met — ≥ 4 sentences a request,
≥ 38 sentences/s at the 10 requests/s limit, labels agreeing on ≥ 99 %, fewer input tokens a sentence
packed than unpacked?

    .venv/bin/python bench/packing.py [--answers 2000] [--claims 20000] [--skip-unpacked]

Redis: FACTGATE_BENCH_REDIS_URL (its database is flushed); Postgres: FACTGATE_BENCH_PG_ADMIN_URL (a fresh
database of its own, dropped afterwards).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._answers import answers as make_answers
from bench._answers import ndjson
from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database
from checks import claims as claim_rules
from checks.citation_passages import PASSAGE_MAX_CHARS
from checks.citation_rows import parse_citation_lines
from checks.kinds.citations import parse_options as parse_citations_options
from checks.options import parse_claims_options
from config import Settings
from jobs.citations import citation_units
from jobs.claims import claim_units
from jobs.intake import UnitSpec, create_job
from jobs.tenancy import get_or_create_tenant
from models import ApiCall, Item, Job, make_engine, make_session_factory, session_scope
from tests.reference import reference_claims
from workers.api import enqueue_start
from workers.app import make_celery

LIMIT = 10.0
KEY = "bench-key"
GOAL_PER_REQUEST = 4.0
GOAL_SENTENCES_S = 38.0
GOAL_AGREEMENT = 0.99
NIGHT_ANSWERS = 200_000


@dataclass
class Run:
    job_id: uuid.UUID
    elapsed: float
    requests: int = 0
    sentences: int = 0
    tokens_short: list[int] = field(default_factory=lambda: [0, 0])  # input tokens, sentences
    tokens_long: list[int] = field(default_factory=lambda: [0, 0])
    labels: dict[str, str | None] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def submit(
    engine: Engine, sessions: sessionmaker[Session], kind: str, units: list[UnitSpec], options: dict[str, Any]
) -> tuple[uuid.UUID, float]:
    """Store the job and start it; wait for its end; (job id, seconds from submit to completed)."""
    celery = make_celery(Settings.from_env(), with_tasks=False)
    t0 = time.time()
    with session_scope(sessions) as s:
        tenant = get_or_create_tenant(s, "bench")
        job, _ = create_job(s, tenant_id=tenant.id, kind=kind, options=options, units=units)
        job_id = job.id
    enqueue_start(celery, job_id)
    while True:
        with Session(engine) as s:
            row = s.get(Job, job_id)
            assert row is not None
            if row.status in ("completed", "failed", "cancelled"):
                ended = row.completed_at or row.failed_at or row.cancelled_at
                assert row.status == "completed", (row.status, row.error)
                return job_id, (ended.timestamp() if ended else time.time()) - t0
        time.sleep(0.2)


def long_answers(rows: list[dict[str, Any]]) -> set[str]:
    """Ids of the answers with a document-sized source (one cut into several passages)."""
    return {r["id"] for r in rows if any(len(s["text"]) > PASSAGE_MAX_CHARS for s in r["sources"])}


def citations_run(
    engine: Engine, sessions: sessionmaker[Session], rows: list[dict[str, Any]], options: dict[str, Any]
) -> Run:
    parsed = parse_citations_options(options)
    units, _ = citation_units(
        parse_citation_lines(ndjson(rows).decode().splitlines(), max_rows=len(rows)), parsed
    )
    job_id, elapsed = submit(engine, sessions, "citations", units, parsed.as_dict())
    run = Run(job_id, elapsed)
    longs = long_answers(rows)
    with Session(engine) as s:
        run.requests = (
            s.scalar(select(func.count()).select_from(ApiCall).where(ApiCall.job_id == job_id)) or 0
        )
        entries = dict(
            s.execute(
                select(Item.id, Item.custom_id).where(Item.job_id == job_id, Item.parent_id.is_(None))
            ).all()
        )
        for parent, output in s.execute(
            select(Item.parent_id, Item.output).where(Item.job_id == job_id, Item.stage == "cited_sentence")
        ):
            run.sentences += 1
            tokens = int((output or {}).get("input_tokens") or 0)
            bucket = run.tokens_long if entries.get(parent) in longs else run.tokens_short
            bucket[0] += tokens
            bucket[1] += 1
        for custom_id, report in s.execute(
            select(Item.custom_id, Item.output["report"]).where(
                Item.job_id == job_id, Item.parent_id.is_(None)
            )
        ):
            for sentence in (report or {}).get("sentences") or []:
                run.labels[f"{custom_id}:{sentence['number']}"] = sentence.get("label")
        job = s.get(Job, job_id)
        assert job is not None
        run.summary = dict(job.summary or {})
    return run


def per(bucket: list[int]) -> str:
    return f"{bucket[0] / bucket[1]:.0f}" if bucket[1] else "—"


def show(name: str, run: Run) -> None:
    rate = run.sentences / run.elapsed
    night_h = (
        NIGHT_ANSWERS * run.sentences / max(1, len({k.rsplit(":", 1)[0] for k in run.labels})) / rate / 3600
    )
    print(f"{name}")
    print(f"  sentences {run.sentences}, requests {run.requests} (with the audit's), "
          f"{run.sentences / max(1, run.requests):.2f} sentences a request")  # fmt: skip
    print(f"  submit → completed {run.elapsed:.1f} s: {rate:.1f} sentences/s "
          f"(ratio to the {GOAL_SENTENCES_S:g}/s goal {rate / GOAL_SENTENCES_S:.2f}), "
          f"{run.requests / run.elapsed:.2f} requests/s (ratio to the limit {run.requests / run.elapsed / LIMIT:.3f})")  # fmt: skip
    print(f"  input tokens a sentence: snippet-sized sources {per(run.tokens_short)}, "
          f"with a document-sized source {per(run.tokens_long)}")  # fmt: skip
    print(f"  projected for {NIGHT_ANSWERS:,} answers: {night_h:.1f} h")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=2000)
    ap.add_argument("--claims", type=int, default=20000)
    ap.add_argument("--claims-pack", type=int, default=20)
    ap.add_argument("--latency", type=float, default=0.3)
    ap.add_argument(
        "--skip-unpacked", action="store_true", help="skip the pack_size 1 run (slow: 1 request a sentence)"
    )
    args = ap.parse_args()

    flush_redis()
    rows = make_answers(args.answers)
    with fresh_database() as db_url:
        env = {"DATABASE_URL": db_url, "REDIS_URL": REDIS_URL, "PERPLEXITY_API_KEY": KEY}
        procs = Procs(env=env)
        try:
            sim = procs.start_recording_simulator(
                free_port(), "--decisions-rps", str(LIMIT), "--latency", str(args.latency)
            )
            procs.env["PERPLEXITY_API_BASE"] = sim
            shipped = Settings.from_env(procs.env)
            procs.start_worker("worker1", concurrency=shipped.worker_concurrency, loglevel="info")
            procs.start_beat(loglevel="info")
            engine = make_engine(db_url)
            sessions = make_session_factory(engine)
            sim_line = procs.log("simulator").strip().splitlines()[-1]
            print(f"packing: {args.answers} answers (bench/_answers.py), simulator {LIMIT:g} req/s "
                  f"({sim_line.partition(' at ')[2]}); 1 worker × {shipped.worker_concurrency} threads + beat")  # fmt: skip
            packed = citations_run(engine, sessions, rows, {"reuse": "none"})
            show("packed (shipped defaults: pack_size 128, audit_share 0.02)", packed)
            audit = packed.summary.get("packing_audit") or {}
            print(f"  its audit: {audit.get('sentences')} sentences asked alone, label agreement "
                  f"{audit.get('label_agreement')}, mean |Δp| {audit.get('mean_abs_delta')}, max {audit.get('max_abs_delta')}, "
                  f"warning {audit.get('warning')}")  # fmt: skip
            single = None
            if not args.skip_unpacked:
                single = citations_run(engine, sessions, rows, {"pack_size": 1, "reuse": "none"})
                show("unpacked (pack_size 1)", single)
                both = [k for k in packed.labels if k in single.labels]
                agree = sum(packed.labels[k] == single.labels[k] for k in both) / max(1, len(both))
                print(f"labels, packed against unpacked: {agree:.4f} of {len(both)} sentences agree "
                      f"(ratio to the {GOAL_AGREEMENT} goal {agree / GOAL_AGREEMENT:.3f})")  # fmt: skip
                saved = 1 - (packed.tokens_short[0] + packed.tokens_long[0]) / max(
                    1, single.tokens_short[0] + single.tokens_long[0]
                )
                print(f"input tokens a sentence, packed ÷ unpacked: snippet-sized "
                      f"{packed.tokens_short[0] / max(1, single.tokens_short[0]):.2f}, document-sized "
                      f"{packed.tokens_long[0] / max(1, single.tokens_long[0]):.2f} ({saved:.0%} fewer in all)")  # fmt: skip
            if args.claims:
                base = reference_claims()
                claim_rows = claim_rules.validate_rows(
                    [
                        {"id": f"c{i}", "claim": f"{base[i % len(base)]['claim']} (record {i})"}
                        for i in range(args.claims)
                    ]
                )
                opts = parse_claims_options(
                    {"mode": "ungrounded", "pack_size": args.claims_pack, "reuse": "none"}
                )
                units, _ = claim_units(claim_rows, opts)
                job_id, elapsed = submit(engine, sessions, "claims", units, opts.as_dict())
                with Session(engine) as s:
                    requests = (
                        s.scalar(select(func.count()).select_from(ApiCall).where(ApiCall.job_id == job_id))
                        or 0
                    )
                print(f"claims: {args.claims} ungrounded at pack_size {args.claims_pack}: {requests} requests, "
                      f"{elapsed:.1f} s, {args.claims / elapsed:.1f} claims/s ({args.claims / requests:.1f} a request)")  # fmt: skip
            engine.dispose()
        finally:
            procs.stop()

    per_request = packed.sentences / max(1, packed.requests)
    rate = packed.sentences / packed.elapsed
    goals = [
        (
            f"≥ {GOAL_PER_REQUEST:g} sentences a request",
            per_request >= GOAL_PER_REQUEST,
            f"{per_request:.2f}",
        ),
        (f"≥ {GOAL_SENTENCES_S:g} sentences/s", rate >= GOAL_SENTENCES_S, f"{rate:.1f}"),
    ]
    if single is not None:
        both = [k for k in packed.labels if k in single.labels]
        agree = sum(packed.labels[k] == single.labels[k] for k in both) / max(1, len(both))
        fewer = (
            packed.tokens_short[0] + packed.tokens_long[0] < single.tokens_short[0] + single.tokens_long[0]
        )
        goals += [
            (f"labels agree ≥ {GOAL_AGREEMENT}", agree >= GOAL_AGREEMENT, f"{agree:.4f}"),
            ("fewer input tokens a sentence packed", fewer, "yes" if fewer else "no"),
        ]
    met = all(ok for _, ok, _ in goals)
    print(
        f"goals: {'MET' if met else 'NOT MET'} — "
        + "; ".join(f"{n}: {v} {'✓' if ok else '✗'}" for n, ok, v in goals)
    )


if __name__ == "__main__":
    main()
