"""Footprint: the Postgres bytes each kind's work costs per item, table + indexes + TOAST.

For each kind in turn, on a fresh database with the simulator (no limit, no latency) and one worker as the
README starts them: a job runs to its end, then `VACUUM FULL` compacts every table (so the figure is live
rows, not dead versions left by the item's state changes) and `pg_total_relation_size` of each table is
read. The difference against the sizes before the job, divided by the job's rows and by its items
(children included: sentences, results, rewrites), is printed per table, with the grounded claim's figure
against the goal (≤ 2,048 bytes per claim), and the verdict store's bytes per request it keeps (a job on a
pinned model keeps one entry per distinct Decisions request it sent, jobs/verdicts.py). The simulator's passages are shorter than real web snippets,
so real jobs cost more per item than this shows.

    FACTGATE_BENCH_REDIS_URL=redis://127.0.0.1:6394/12 .venv/bin/python bench/footprint.py [--claims 2000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import Connection, Engine, func, select, text
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database
from jobs.tenancy import create_token
from models import Item, Job, Verdict, make_engine, make_session_factory, session_scope

ROOT = Path(__file__).resolve().parents[1]
GOAL_CLAIM_BYTES = 2_048
TABLES = (
    "jobs",
    "items",
    "api_calls",
    "intake_rows",
    "webhook_deliveries",
    "webhook_attempts",
    "usage_days",
    "source_lists",
    "verdicts",
)


# A transaction of this database that began before the job ended may still see the items' earlier versions
# (pending, running), and VACUUM FULL keeps every version some snapshot can see: a snapshot held across a
# 2,000-claim job made items 2,506 bytes a claim instead of 1,118, and under load (average ~15) a run gave
# 1,708. So the sizes are read once no such transaction is left (or after this long, said so).
HOLDER_WAIT_S = 30.0
_HOLDERS = text(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    " AND backend_xmin IS NOT NULL AND xact_start < CAST(:since AS timestamptz)"
)


def wait_for_old_snapshots(conn: Connection, since: str) -> None:
    """Wait until no other session of this database runs a transaction that began before `since`."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while conn.execute(_HOLDERS, {"since": since}).scalar_one():
        if time.monotonic() > deadline:
            print(f"  (a transaction older than the job's end is still open after {HOLDER_WAIT_S:.0f} s: "
                  "the next figures may count dead row versions)", flush=True)  # fmt: skip
            return
        time.sleep(0.2)


def sizes(engine: Engine) -> dict[str, int]:
    """Each table's size with its indexes and TOAST, after VACUUM FULL (live rows only: read once no
    transaction that began before now is left, see `HOLDER_WAIT_S`)."""
    out: dict[str, int] = {}
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        wait_for_old_snapshots(conn, str(conn.execute(text("SELECT now()")).scalar_one()))
        for table in TABLES:
            exists = conn.execute(text("SELECT to_regclass(:t)"), {"t": table}).scalar()
            if exists is None:
                continue
            conn.execute(text(f"VACUUM FULL {table}"))
            out[table] = int(
                conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": table}).scalar_one()
            )
    return out


def rows_of(kind: str, n: int) -> tuple[str, bytes]:
    """(query string, NDJSON body) of an `n`-row job of `kind`, from the repository's examples."""
    if kind == "claims":
        base = [
            json.loads(x) for x in (ROOT / "examples" / "claims.jsonl").read_text().splitlines() if x.strip()
        ]
        body = [{"id": f"c{i}", "claim": f"{base[i % len(base)]['claim']} ({i})"} for i in range(n)]
        return "kind=claims&mode=grounded", "\n".join(json.dumps(r) for r in body).encode()
    if kind == "citations":
        base = [
            json.loads(x)
            for x in (ROOT / "examples" / "citations.jsonl").read_text().splitlines()
            if x.strip()
        ]
        body = [{**base[i % len(base)], "id": f"a{i}"} for i in range(n)]
        return "kind=citations", "\n".join(json.dumps(r) for r in body).encode()
    name = "answer-questions.jsonl" if kind == "answer" else "quote-questions.jsonl"
    base = [json.loads(x) for x in (ROOT / "examples" / name).read_text().splitlines() if x.strip()]
    body = [{"id": f"q{i}", "question": base[i % len(base)]["question"]} for i in range(n)]
    return f"kind={kind}", "\n".join(json.dumps(r) for r in body).encode()


def run(kind: str, n: int, web: str, token: str, engine: Engine) -> tuple[uuid.UUID, float]:
    query, body = rows_of(kind, n)
    t0 = time.monotonic()
    r = httpx.post(
        f"{web}/v1/jobs?{query}",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
        timeout=300,
    )
    if r.status_code != 202:
        raise SystemExit(f"{kind}: {r.status_code} {r.text[:400]}")
    job_id = uuid.UUID(r.json()["id"])
    while True:
        with Session(engine) as s:
            status = s.scalar(select(Job.status).where(Job.id == job_id))
        if status in ("completed", "failed", "cancelled"):
            if status != "completed":
                raise SystemExit(f"{kind}: job {status}")
            return job_id, time.monotonic() - t0
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=2_000)
    ap.add_argument("--questions", type=int, default=50, help="rows of each answer and quote job")
    ap.add_argument("--answers", type=int, default=300, help="rows of the citations job")
    args = ap.parse_args()
    flush_redis()
    plan = (("claims", args.claims), ("citations", args.answers), ("answer", args.questions),
            ("quote", args.questions))  # fmt: skip
    with fresh_database() as db_url:
        engine = make_engine(db_url)
        with session_scope(make_session_factory(engine)) as s:
            token = create_token(s, "bench").token
        env = {"DATABASE_URL": db_url, "REDIS_URL": REDIS_URL, "PERPLEXITY_API_KEY": "bench-key",
               "FACTGATE_SECRET_KEY": "x", "FACTGATE_DECISIONS_RPS": "0", "FACTGATE_AGENT_RPS": "0",
               "FACTGATE_SEARCH_RPS": "0"}  # fmt: skip
        procs = Procs(env=env)
        lines: list[str] = []
        try:
            sim = procs.start_simulator(
                free_port(), "--decisions-rps", "0", "--agent-rps", "0", "--search-rps", "0", "--latency", "0"
            )
            procs.env["PERPLEXITY_API_BASE"] = sim
            web = procs.start_web(free_port(), workers=1)
            procs.start_worker(concurrency=16, beat=True)
            for kind, n in plan:
                before = sizes(engine)
                job_id, took = run(kind, n, web, token, engine)
                after = sizes(engine)
                with Session(engine) as s:
                    items = int(
                        s.scalar(select(func.count()).select_from(Item).where(Item.job_id == job_id)) or 0
                    )
                grown = {t: after.get(t, 0) - before.get(t, 0) for t in after}
                total = sum(grown.values())
                per_row, per_item = total / n, total / max(items, 1)
                parts = ", ".join(f"{t} {v / n:,.0f}" for t, v in grown.items() if v)
                line = (
                    f"{kind:<9} {n:>6,} rows, {items:>6,} items ({took:.0f} s): {per_row:>8,.0f} bytes a row, "
                    f"{per_item:>7,.0f} an item   [{parts} bytes a row]"
                )
                if kind == "claims":
                    line += f"   ratio to goal ({GOAL_CLAIM_BYTES:,} bytes a grounded claim) {per_row / GOAL_CLAIM_BYTES:.2f}"
                print(line, flush=True)
                lines.append(line)
                with Session(engine) as s:
                    entries = int(s.scalar(select(func.count()).where(Verdict.job_id == job_id)) or 0)
                store = (
                    f"{grown.get('verdicts', 0) / entries:,.0f} bytes a request ({entries:,} entries)"
                    if entries
                    else "nothing kept (a moving model alias is never stored)"
                )
                line = f"{'':9} verdict store: {store}"
                print(line, flush=True)
                lines.append(line)
        finally:
            procs.stop()
            engine.dispose()
    print("\nsummary\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
