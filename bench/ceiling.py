"""Ceiling: how many claims per second the whole stack moves when upstream is free and instant.

The stack runs exactly as the README and the Procfile start it, on this machine: the Procfile's `web`
(gunicorn with its defaults), its `worker` line twice (two worker processes, one per core: `honcho start -c
worker=2`; the dispatcher runs inside them, in whichever holds the leader lock) and its `beat`, every one
with the shipped defaults — plus Postgres and Redis, and the simulator in its own process with no limit, no
latency and fixed answers (`--decisions-rps 0 --latency 0 --engine fake`: its instant path, no corpus).
The one setting that differs from a deployment is the one under study, and it is printed: our limiter is
unlimited (`FACTGATE_DECISIONS_RPS=0`, a free upstream). Anything given with `--set NAME=VALUE` is printed
too.

N claims are submitted as NDJSON over HTTP. While they run, a client polls `GET /v1/jobs/{id}` every
`--poll-s` and times each answer (goal: p99 ≤ 50 ms). The figures are claims/s from submit to completed
(goal: 300) and CPU ms per claim of each process group — simulator, workers (both processes), beat, web
(gunicorn and its workers), the Postgres backends of the bench's database, and the Redis server — with the
workers' sum against its goal (3 ms). CPU comes from /proc, so it is steadier than wall-clock time on a
shared machine; the load average before and after the run is printed beside it.

    .venv/bin/python bench/ceiling.py [--claims 6000] [--workers 2] [--set FACTGATE_CHORD_SIZE=500]
        [--py-spy DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import signal
import statistics
import sys
import time
from multiprocessing.connection import Connection
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
    python_speed_s,
    redis_server_pid,
    tree_cpu_seconds,
)
from jobs.tenancy import create_token
from models import make_engine, make_session_factory, session_scope

GOAL = 300.0
WORKER_CPU_GOAL_MS = 3.0
POLL_P99_GOAL_MS = 50.0
# The only setting that is not the shipped default: a free upstream (the simulator answers at once).
UNDER_STUDY = {"FACTGATE_DECISIONS_RPS": "0"}


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _start_py_spy(procs: Procs, out: Path, names: list[str]) -> None:
    """Sample processes for the whole run into a flame graph (`<name>.svg`) and collapsed stacks
    (`<name>.txt`, to read or diff). Without --idle only stacks on the CPU are kept, so the widths are
    where the CPU went; --nolineno merges a function's lines, which keeps the SVGs small."""
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        for fmt, ext in (("flamegraph", "svg"), ("raw", "txt")):
            argv = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", fmt, "--rate", "50",
                    "--nolineno", "--gil", "--nonblocking", "--subprocesses", "--pid", str(procs.procs[name].pid),
                    "--output", str(out / f"{name}.{ext}")]  # fmt: skip
            procs.start(f"py-spy-{ext}-{name}", argv)


def _poll(url: str, headers: dict[str, str], every_s: float, out: Connection) -> None:
    """Poll the job's status until it ends, as a client watching it would, timing each answer; send the
    times and the last status back. Runs in a process of its own: in the bench's process a poll's answer
    waited for the interpreter behind the bench's own bookkeeping (scanning /proc for Postgres backends
    every half second), which showed up in the tail as if the web were slow."""
    times_ms: list[float] = []
    status: dict[str, object] = {}
    with httpx.Client(headers=headers, timeout=30) as client:
        while True:
            t0 = time.perf_counter()
            r = client.get(url)
            times_ms.append(1000 * (time.perf_counter() - t0))
            status = r.json()
            if status["status"] in ("completed", "failed", "cancelled"):
                break
            time.sleep(every_s)
    out.send((times_ms, status))
    out.close()


class Poller:
    """The status poller's process (`_poll`)."""

    def __init__(self, url: str, headers: dict[str, str], every_s: float) -> None:
        self._ours, theirs = multiprocessing.Pipe(duplex=False)
        self._process = multiprocessing.get_context("fork").Process(
            target=_poll, args=(url, headers, every_s, theirs), daemon=True
        )
        self._theirs = theirs
        self.times_ms: list[float] = []
        self.status: dict[str, object] = {}

    def start(self) -> None:
        self._process.start()
        self._theirs.close()

    def wait(self, timeout_s: float) -> bool:
        """True once the job has ended (the poller then sent what it saw)."""
        if not self._ours.poll(timeout_s):
            return False
        self.times_ms, self.status = self._ours.recv()
        self._process.join(5)
        return True


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=6_000)
    ap.add_argument("--mode", default="ungrounded")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (the Procfile's worker line)")
    ap.add_argument("--poll-s", type=float, default=0.2, help="time between status polls")
    ap.add_argument("--no-beat", action="store_true", help="leave the Procfile's beat out (printed)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="a setting under study (printed)"
    )
    ap.add_argument(
        "--py-spy", metavar="DIR", help="also sample every process with py-spy (if installed) into DIR"
    )
    args = ap.parse_args()
    extra = dict(item.split("=", 1) for item in args.set)

    flush_redis()
    with fresh_database() as db_url:
        engine = make_engine(db_url)
        with session_scope(make_session_factory(engine)) as s:
            token = create_token(s, "bench").token
        engine.dispose()
        procs = Procs(env={})
        procs.env.update(
            {
                "DATABASE_URL": db_url,
                "REDIS_URL": REDIS_URL,
                "PERPLEXITY_API_KEY": "bench-key",
                "FACTGATE_SECRET_KEY": "bench-secret",
                # Where beat keeps its schedule: the bench's own folder, not a file another stack may use.
                "FACTGATE_BEAT_SCHEDULE": str(procs.logdir / "beat-schedule"),
                **UNDER_STUDY,
                **extra,
            }
        )
        try:
            sim = procs.start_simulator(
                free_port(), "--decisions-rps", "0", "--latency", "0", "--engine", "fake"
            )
            procs.env["PERPLEXITY_API_BASE"] = sim
            port = free_port()
            procs.start_procfile("web", env={"PORT": str(port)})
            web = f"http://127.0.0.1:{port}"
            for n in range(args.workers):
                procs.start_procfile("worker", name=f"worker{n}")
            if not args.no_beat:
                procs.start_procfile("beat")
            procs.wait_http(web + "/readyz")
            for n in range(args.workers):
                procs.wait_log(f"worker{n}", "ready.")
            body = "".join(
                json.dumps({"id": f"c{i}", "claim": f"Claim number {i}: the Linux kernel was first released in 1991."})
                + "\n"
                for i in range(args.claims)
            )  # fmt: skip
            headers = {"Authorization": f"Bearer {token}"}
            httpx.get(f"{web}/v1/jobs", headers=headers, timeout=30).raise_for_status()  # warm both
            pids = {name: p.pid for name, p in procs.procs.items()}
            redis_pid = redis_server_pid()
            if redis_pid is not None:
                pids["redis"] = redis_pid
            db_name = db_url.rsplit("/", 1)[-1]
            postgres = CpuSampler(lambda: pids_matching(f" {db_name} "))
            speed_before = python_speed_s()  # the stack is up and idle
            load_before = _load()
            cpu0 = {name: tree_cpu_seconds(pid) for name, pid in pids.items()}
            if args.py_spy:
                _start_py_spy(procs, Path(args.py_spy), [n for n in pids if n != "redis"])
            t0 = time.monotonic()
            r = httpx.post(
                f"{web}/v1/jobs?kind=claims&mode={args.mode}",
                content=body,
                headers={**headers, "Content-Type": "application/x-ndjson"},
                timeout=120,
            )
            r.raise_for_status()
            t_accepted = time.monotonic() - t0
            poller = Poller(f"{web}/v1/jobs/{r.json()['id']}", headers, args.poll_s)
            poller.start()
            while not poller.wait(0.5):
                postgres.sample()
            elapsed = time.monotonic() - t0
            postgres.sample()
            cpu = {name: tree_cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
            cpu["postgres"] = postgres.seconds()
            load_after = _load()
            for name in [n for n in procs.procs if n.startswith("py-spy")]:
                procs.procs[name].send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                procs.procs[name].wait(60)
        finally:
            procs.stop()
    status = poller.status
    rate = args.claims / elapsed

    def ms(seconds: float) -> float:
        return 1000 * seconds / args.claims

    groups = {
        "simulator": cpu.get("simulator", 0.0),
        "workers": sum(v for k, v in cpu.items() if k.startswith("worker")),
        "beat": cpu.get("beat", 0.0),
        "web": cpu.get("web", 0.0),
        "postgres": cpu["postgres"],
        "redis": cpu.get("redis", 0.0),
    }
    workers_ms = ms(groups["workers"])
    settings = ", ".join(f"{k}={v}" for k, v in {**UNDER_STUDY, **extra}.items())
    polls = poller.times_ms
    print(
        f"ceiling: {args.claims} {args.mode} claims; Procfile web + {args.workers} x worker"
        f"{'' if args.no_beat else ' + beat'} with the shipped defaults except {settings}; "
        "simulator unlimited, no latency, fixed answers (--engine fake)"
    )
    print(f"  load average          {load_before} before, {load_after} after (2 cores, shared)")
    print(
        f"  machine speed         a 10M-addition Python loop took {speed_before:.2f} s of CPU before the run, "
        f"{python_speed_s():.2f} s after (more seconds: a slower moment, and every CPU figure is higher)"
    )
    print(f"  job status            {status['status']}  {status.get('request_counts', {})}")
    print(f"  submit → 202          {t_accepted:.2f} s")
    print(f"  submit → completed    {elapsed:.2f} s")
    print(f"  claims/s end to end   {rate:.1f}   ratio to goal ({GOAL:g}/s) {rate / GOAL:.2f}")
    print(
        f"  worker CPU per claim  {workers_ms:.2f} ms   ratio to goal ({WORKER_CPU_GOAL_MS:g} ms) "
        f"{workers_ms / WORKER_CPU_GOAL_MS:.2f}   ("
        + ", ".join(f"{k} {ms(v):.2f}" for k, v in cpu.items() if k.startswith("worker"))
        + ")"
    )
    print("  CPU ms per claim      " + ", ".join(f"{k} {ms(v):.2f}" for k, v in groups.items()))
    total = sum(groups.values())
    print(f"  CPU ms per claim, all {ms(total):.2f}   ({total / elapsed:.2f} cores busy on average)")
    if polls:
        p99 = _pct(polls, 0.99)
        print(
            f"  status poll           {len(polls)} GETs every {args.poll_s:g} s while running: "
            f"p50 {statistics.median(polls):.1f} ms, p95 {_pct(polls, 0.95):.1f} ms, p99 {p99:.1f} ms, "
            f"max {max(polls):.1f} ms   p99 ratio to goal ({POLL_P99_GOAL_MS:g} ms) {p99 / POLL_P99_GOAL_MS:.2f}"
        )


if __name__ == "__main__":
    main()
