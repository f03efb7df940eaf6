"""Ceiling: how many claims per second the whole stack moves when upstream is free and instant.

The goal's stack, all on this machine: the web app under gunicorn, two Celery worker processes (the
dispatcher runs inside them: whichever holds the leader lock), Postgres and Redis; plus the simulator with
no limit and no latency in its own process, and our limiter set to unlimited. N claims are submitted as
NDJSON over HTTP; the figures are claims/s from submit to completed (goal: 200) and CPU ms per claim of
each process — web (gunicorn and its workers), each worker, the simulator, the Postgres backends of the
bench's database and the Redis server — with the workers' sum against its goal (5 ms). CPU comes from
/proc, so it is steadier than wall-clock time on a shared machine; the load average before and after the
run is printed beside it.

    .venv/bin/python bench/ceiling.py [--claims 10000] [--concurrency 16] [--loglevel info] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import (
    REDIS_URL,
    CpuSampler,
    Procs,
    flush_redis,
    free_port,
    fresh_database,
    pids_matching,
    redis_server_pid,
    tree_cpu_seconds,
)
from jobs.tenancy import create_token
from models import make_engine, make_session_factory, session_scope

GOAL = 200.0
WORKER_CPU_GOAL_MS = 5.0


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _start_py_spy(procs: Procs, out: Path, workers: list[str]) -> None:
    """Sample the workers' threads while they hold the GIL (≈ their Python CPU) for the whole run; the files are folded stacks."""
    out.mkdir(parents=True, exist_ok=True)
    for name in workers:
        argv = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--rate", "100", "--gil",
                "--threads", "--pid", str(procs.procs[name].pid), "--output", str(out / f"{name}.txt")]  # fmt: skip
        procs.start(f"py-spy-{name}", argv)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=16, help="threads per worker (the Procfile's 16)")
    ap.add_argument("--loglevel", default="info", help="the workers' log level (the Procfile's INFO)")
    ap.add_argument("--mode", default="ungrounded")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (one per core)")
    ap.add_argument(
        "--py-spy",
        metavar="DIR",
        help="also sample each worker with py-spy (if installed) into DIR/<worker>.txt (collapsed stacks)",
    )
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
                procs.start_worker(name=f"worker{n}", concurrency=args.concurrency, loglevel=args.loglevel)
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
            redis_pid = redis_server_pid()
            if redis_pid is not None:
                pids["redis"] = redis_pid
            db_name = db_url.rsplit("/", 1)[-1]
            postgres = CpuSampler(lambda: pids_matching(f" {db_name} "))
            load_before = _load()
            cpu0 = {name: tree_cpu_seconds(pid) for name, pid in pids.items()}
            if args.py_spy:
                _start_py_spy(procs, Path(args.py_spy), [n for n in pids if n.startswith("worker")])
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
                postgres.sample()
                time.sleep(0.5)
            elapsed = time.monotonic() - t0
            postgres.sample()
            cpu = {name: tree_cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
            cpu["postgres"] = postgres.seconds()
            load_after = _load()
            for name in [n for n in procs.procs if n.startswith("py-spy")]:
                procs.procs[name].send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                procs.procs[name].wait(30)
        finally:
            procs.stop()
    counts = status.get("request_counts", {})
    rate = args.claims / elapsed

    def ms(seconds: float) -> float:
        return 1000 * seconds / args.claims

    workers_ms = ms(sum(v for k, v in cpu.items() if k.startswith("worker")))
    print(
        f"ceiling: {args.claims} {args.mode} claims, simulator unlimited with no latency, web + "
        f"{args.workers} worker process(es) x {args.concurrency} threads, log level {args.loglevel}"
    )
    print(f"  load average          {load_before} before, {load_after} after (2 cores, shared)")
    print(f"  job status            {status['status']}  {counts}")
    print(f"  submit → 202          {t_accepted:.2f} s")
    print(f"  submit → completed    {elapsed:.2f} s")
    print(f"  claims/s end to end   {rate:.1f}   ratio to goal ({GOAL:g}/s) {rate / GOAL:.2f}")
    print(
        f"  worker CPU per claim  {workers_ms:.2f} ms   ratio to goal ({WORKER_CPU_GOAL_MS:g} ms) "
        f"{workers_ms / WORKER_CPU_GOAL_MS:.2f}"
    )
    print("  CPU ms per claim      " + ", ".join(f"{k} {ms(v):.2f}" for k, v in cpu.items()))
    total = sum(cpu.values())
    print(f"  CPU ms per claim, all {ms(total):.2f}   ({total / elapsed:.2f} cores busy on average)")


if __name__ == "__main__":
    main()
