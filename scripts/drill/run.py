"""`make drill`: factgate as a deployment of separate hosts on one machine, one fault per job.

The hosts are network namespaces (scripts/drill/netns.py, scripts/drill/stack.py): a database host with
Postgres, Redis and the simulator at 10 Decisions requests/s, a web host with the API and beat, and two
worker hosts. For each scenario the drill submits a job of grounded claims through the API, waits until it
runs at full speed, injects one fault, heals it, and waits for the job to end. Meanwhile it samples the
job's progress, the items in flight and the dispatcher's leader lock every SAMPLE_S from the controller
(the root namespace), whose clock no fault touches.

One line per scenario: the job's status, items done/failed/total, the simulator's 200s and 429s during the
job, duplicate upstream calls (200s beyond one per item), items claimed more than once, the longest stall
in progress from the fault on, how long progress took to resume after the fault ended, the throughput
during the fault, for a fault on one worker host the items that host held and each host's round-trip
figure (its dispatcher's fitness beat), leader changes — and whether what should hold held. The exit
status is non-zero when any scenario did not hold.

Needs root (namespaces, iptables, tc) and Debian's iptables package; it starts its own
Postgres cluster and Redis servers on the drill's private addresses and removes everything on the way out,
on Ctrl-C too.

    .venv/bin/python -m scripts.drill.run [--quick] [--only NAME ...] [--claims N] [--redis MODE] [--list]

Redis runs as production should run it, a primary, a replica and three Sentinels, so that every scenario
(redis-failover among them) runs in one `make drill`; `--quick` (the smoke scenario alone) gets one plain
server, which is all it needs. `--redis plain|sentinel` overrides either.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

import httpx
import redis as redis_lib
from redis.sentinel import Sentinel
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from scripts.drill import netns
from scripts.drill.stack import (
    DB,
    MASTER_NAME,
    REDIS_PORT,
    SENTINEL_PORTS,
    SIM_RPS,
    WORKERS,
    Stack,
    deployment,
)
from tests.reference import reference_claims
from workers.fitness import FITNESS_KEY
from workers.leases import HOSTS_KEY, host_items

SAMPLE_S = 0.2
LIMIT = SIM_RPS
HOLD_RATIO = 0.8  # throughput during a fault with one worker host left, as a share of the limit
RESUME_GOAL_S = 2.0  # progress after Redis answers again
JOB_TIMEOUT_S = 150.0
WARM_ITEMS = 40  # the fault starts once this many items are done (the job runs at full speed by then)
LEADER_KEY = "factgate:dispatch:leader"


# --- what is measured ---------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    done: int | None = None
    failed: int | None = None
    in_flight: int | None = None
    leader: str | None = None
    held: dict[str, int] = field(default_factory=dict)  # worker host -> items it lists (running, received)
    rtt: dict[str, float] = field(default_factory=dict)  # worker host -> its dispatcher's fitness figure (s)


@dataclass
class Sampler:
    """Samples one job from the controller every SAMPLE_S; a fault only makes samples go missing."""

    engine: Engine
    redis_of: Callable[[], redis_lib.Redis]
    job_id: str
    hosts: Callable[[], dict[str, str]] = dict  # worker process ids' pid -> host name, read each sample
    samples: list[Sample] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            s = Sample(time.monotonic())
            with contextlib.suppress(Exception):
                with self.engine.connect() as c:
                    row = c.execute(
                        text(
                            "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = "
                            "'failed'), count(*) FILTER (WHERE enqueued_at IS NOT NULL AND status IN "
                            "('pending', 'running')) FROM items WHERE job_id = :j"
                        ),
                        {"j": self.job_id},
                    ).one()
                s.done, s.failed, s.in_flight = int(row[0]), int(row[1]), int(row[2])
            with contextlib.suppress(Exception):
                rds = self.redis_of()
                value = rds.get(LEADER_KEY)
                s.leader = value.decode() if value is not None else ""
                hosts = self.hosts()
                s.held = held_by_host(rds, hosts)
                s.rtt = rtt_by_host(rds, hosts)
            self.samples.append(s)

    def done_now(self) -> int:
        for s in reversed(self.samples):
            if s.done is not None:
                return s.done
        return 0


@dataclass
class Outcome:
    """What one scenario showed, and the checks that must hold."""

    name: str
    status: str = "?"
    done: int = 0
    failed: int = 0
    total: int = 0
    ok200: int = 0
    r429: int = 0
    duplicates: int = 0
    lost_calls: int = 0
    claimed_twice: int = 0
    stall_s: float = 0.0
    resume_s: float | None = None
    fault_rate: float | None = None
    in_flight_avg: float | None = None
    faulty_held_avg: float | None = None  # items the faulty host listed, mean over the fault
    rtt_ms: dict[str, tuple[float, float]] = field(default_factory=dict)  # host -> (mean, max) in the fault
    leader_changes: int = 0
    elapsed_s: float = 0.0
    failures: list[str] = field(default_factory=list)
    first_error: str | None = None

    def line(self) -> str:
        resume = "-" if self.resume_s is None else f"{self.resume_s:.1f}s"
        rate = "-" if self.fault_rate is None else f"{self.fault_rate:.1f}/s"
        flight = "" if self.in_flight_avg is None else f" inflight={self.in_flight_avg:.1f}"
        if self.faulty_held_avg is not None:
            flight += f" faulty_held={self.faulty_held_avg:.1f}"
        if self.rtt_ms:
            flight += " rtt_ms=" + ",".join(
                f"{h}:{a:.0f}/{m:.0f}" for h, (a, m) in sorted(self.rtt_ms.items())
            )
        verdict = "HOLDS" if not self.failures else "FAILS: " + "; ".join(self.failures)
        return (
            f"{self.name:<20} {self.status:<10} {self.done}/{self.failed}/{self.total} "
            f"200s={self.ok200} 429s={self.r429} dup={self.duplicates} lost={self.lost_calls} "
            f"twice={self.claimed_twice} "
            f"stall={self.stall_s:.1f}s resume={resume} fault_rate={rate}{flight} "
            f"leader_changes={self.leader_changes} job={self.elapsed_s:.0f}s  {verdict}"
        )


@dataclass
class Fault:
    """When a fault was on (controller monotonic time); `end` is when the faulty part was back."""

    start: float = 0.0
    end: float = 0.0
    host: str | None = None  # the worker host the fault is on, if one


@dataclass(frozen=True)
class Scenario:
    name: str
    doc: str
    inject: Callable[[Stack, Fault], None]
    rate_window_s: float | None = None  # for an instant fault: the throughput window after it
    want_rate: bool = False  # throughput during the fault ≥ HOLD_RATIO × the limit
    want_resume_s: float | None = None
    max_leader_changes: int | None = None
    needs_sentinel: bool = False
    loses_calls: bool = (
        False  # a killed process loses the answers of its calls in the air (billed, unrecorded)
    )


def held_by_host(rds: redis_lib.Redis, hosts: dict[str, str]) -> dict[str, int]:
    """How many items each worker host's last beat lists (workers/leases.py: held or received, not
    started); `hosts` maps a worker process's pid to its host name."""
    out: dict[str, int] = {}
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in rds.zrange(HOSTS_KEY, 0, -1)]
    for name, items in host_items(rds, names).items():
        host = hosts.get(name.split(":", 1)[0])
        if host is not None:
            out[host] = out.get(host, 0) + len(items)
    return out


def rtt_by_host(rds: redis_lib.Redis, hosts: dict[str, str]) -> dict[str, float]:
    """Each worker host's round-trip figure as its dispatcher beats it (workers/fitness.py FITNESS_KEY:
    "process id token" -> "µs:Redis ms")."""
    out: dict[str, float] = {}
    for field_name, raw in rds.hgetall(FITNESS_KEY).items():
        host = hosts.get(field_name.decode().split(":", 1)[0])
        with contextlib.suppress(ValueError):
            if host is not None:
                out[host] = int(raw.decode().split(":", 1)[0]) / 1e6
    return out


# --- the faults -----------------------------------------------------------------------------------------


def leader_host(stack: Stack) -> str:
    """The worker host whose dispatcher holds the lock (its process id leads the lock's value)."""
    value = redis_client(stack).get(LEADER_KEY)
    if value:
        head = value.decode().split(":", 1)[0]
        if head.isdigit():
            for host in WORKERS:
                proc = stack.procs.get(host.name)
                if proc is not None and proc.pid == int(head):
                    return host.name
    return WORKERS[0].name


def worker_pids(stack: Stack) -> dict[str, str]:
    """Each running worker's pid (what its process id in the host registry starts with) -> its host."""
    out: dict[str, str] = {}
    for host in WORKERS:
        proc = stack.procs.get(host.name)
        if proc is not None:
            out[str(proc.pid)] = host.name
    return out


def host_named(name: str) -> netns.Host:
    return next(h for h in WORKERS if h.name == name)


def postgres_restart(stack: Stack, fault: Fault) -> None:
    fault.start = time.monotonic()
    stack.pg_ctl("restart", "-m", "fast", "-w", "-t", "60", "-l", str(stack.tmp / "postgres.log"))
    fault.end = time.monotonic()


def redis_restart_empty(stack: Stack, fault: Fault) -> None:
    port = current_master_port(stack)
    fault.start = time.monotonic()
    stack.stop(f"redis-{port}", kill=True)
    time.sleep(2.0)  # shorter than the Sentinels' down-after: a restart, not a failover
    stack.start_redis(port)
    fault.end = time.monotonic()


def redis_failover(stack: Stack, fault: Fault) -> None:
    """Kill the primary; the Sentinels promote the replica. `end` is when the new primary is known."""
    old = current_master_port(stack)
    fault.start = time.monotonic()
    stack.stop(f"redis-{old}", kill=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if current_master_port(stack) != old:
                break
        time.sleep(0.1)
    fault.end = time.monotonic()
    stack.start_redis(old, replica_of=current_master_port(stack))  # the old primary comes back as a replica


def worker_killed(stack: Stack, fault: Fault) -> None:
    name = fault.host = leader_host(stack)
    fault.start = fault.end = time.monotonic()
    stack.signal_group(name, signal.SIGKILL)


def leader_partitioned(stack: Stack, fault: Fault, seconds: float = 20.0) -> None:
    fault.host = leader_host(stack)
    host = host_named(fault.host)
    fault.start = time.monotonic()
    netns.partition(host, [DB])
    time.sleep(seconds)
    netns.heal(host)
    fault.end = time.monotonic()


def leader_paused(stack: Stack, fault: Fault, seconds: float = 15.0) -> None:
    name = fault.host = leader_host(stack)
    fault.start = time.monotonic()
    stack.signal_group(name, signal.SIGSTOP)
    time.sleep(seconds)
    stack.signal_group(name, signal.SIGCONT)
    fault.end = time.monotonic()


def leader_paused_short(stack: Stack, fault: Fault) -> None:
    leader_paused(stack, fault, seconds=6.0)


def slow_link(stack: Stack, fault: Fault, seconds: float = 25.0) -> None:
    fault.host = leader_host(stack)
    host = host_named(fault.host)
    fault.start = time.monotonic()
    netns.slow_link(host, 256)
    time.sleep(seconds)
    netns.fast_link(host)
    fault.end = time.monotonic()


def clock_skew(stack: Stack, fault: Fault) -> None:
    """Both worker hosts' wall clocks off, one by +90 s and one by −90 s, for the whole job (set up before
    it, in `prepare`); the fault window is a stretch of the job."""
    fault.start = time.monotonic()
    time.sleep(15.0)
    fault.end = time.monotonic()


SCENARIOS = [
    Scenario("postgres-restart", "Postgres restarted (fast shutdown)", postgres_restart, rate_window_s=None),
    Scenario(
        "redis-restart", "Redis killed and restarted empty", redis_restart_empty, want_resume_s=RESUME_GOAL_S
    ),
    Scenario(
        "worker-killed",
        "the leader's worker host killed (SIGKILL)",
        worker_killed,
        rate_window_s=20.0,
        want_rate=True,
        loses_calls=True,
    ),
    Scenario("clock-skew", "worker wall clocks +90 s and −90 s", clock_skew, want_rate=True),
    Scenario(
        "leader-partitioned",
        "leader host cut off from the database host 20 s",
        leader_partitioned,
        want_rate=True,
        max_leader_changes=2,
    ),
    Scenario(
        "leader-paused", "leader worker SIGSTOPped 15 s", leader_paused, want_rate=True, max_leader_changes=2
    ),
    Scenario(
        "slow-link",
        "leader host on a 256 kbit/s link for 25 s",
        slow_link,
        want_rate=True,
        max_leader_changes=1,
    ),
    Scenario(
        "redis-failover",
        "Redis primary killed, the replica promoted by Sentinel",
        redis_failover,
        want_resume_s=RESUME_GOAL_S,
        needs_sentinel=True,
    ),
]
# CI's short run: the correctness checks only (a 6 s pause is mostly the lock's takeover, so its throughput
# says little); the full run holds the throughput.
SMOKE = Scenario("smoke", "leader worker SIGSTOPped 6 s (CI's short run)", leader_paused_short)


# --- Redis through the Sentinels or directly ------------------------------------------------------------


def current_master_port(stack: Stack) -> int:
    if not stack.sentinel:
        return REDIS_PORT
    sentinel = Sentinel([(DB.ip, p) for p in SENTINEL_PORTS], socket_timeout=1.0)
    _host, port = sentinel.discover_master(MASTER_NAME)
    return int(port)


def redis_client(stack: Stack) -> redis_lib.Redis:
    return redis_lib.Redis(
        host=DB.ip, port=current_master_port(stack), socket_timeout=1.0, socket_connect_timeout=1.0
    )


# --- one scenario -----------------------------------------------------------------------------------------


def decisions_counts(stack: Stack) -> tuple[int, int]:
    stats = httpx.get(stack.sim + "/stats", timeout=5).json()["endpoints"].get("decisions", {})
    return int(stats.get("200", 0)), int(stats.get("429", 0))


def submit(stack: Stack, token: str, n: int) -> str:
    tag = uuid.uuid4().hex[:6]
    base = reference_claims()
    items = [{"id": f"{tag}-{i}", "claim": f"{base[i % len(base)]['claim']} ({tag}-{i})"} for i in range(n)]
    resp = httpx.post(
        stack.web + "/v1/jobs",
        json={"kind": "claims", "options": {"mode": "grounded"}, "items": items},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    resp.raise_for_status()
    return str(resp.json()["id"])


def job_end(engine: Engine, job_id: str) -> tuple[str, int, int, int, int, int, int]:
    with engine.connect() as c:
        status = str(c.execute(text("SELECT status FROM jobs WHERE id = :j"), {"j": job_id}).scalar_one())
        done, failed, total, twice = c.execute(
            text(
                "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed'), "
                "count(*), count(*) FILTER (WHERE attempts > 1) FROM items WHERE job_id = :j"
            ),
            {"j": job_id},
        ).one()
        recorded_dups = c.execute(
            text(
                "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM api_calls WHERE job_id = :j "
                "AND status_code = 200 GROUP BY item_id HAVING count(*) > 1) d"
            ),
            {"j": job_id},
        ).scalar_one()
        recorded_200s = c.execute(
            text("SELECT count(*) FROM api_calls WHERE job_id = :j AND status_code = 200"), {"j": job_id}
        ).scalar_one()
    return status, int(done), int(failed), int(total), int(twice), int(recorded_dups), int(recorded_200s)


def measure(out: Outcome, samples: list[Sample], fault: Fault, sc: Scenario, t_end: float) -> None:
    good = [s for s in samples if s.done is not None]
    progress: list[float] = []
    last = -1
    for s in good:
        if s.done is not None and s.done > last:
            if last >= 0:
                progress.append(s.t)
            last = s.done
    window = [t for t in progress if t >= fault.start] + [t_end]
    edges = [fault.start, *window]
    out.stall_s = max((b - a for a, b in itertools.pairwise(edges)), default=0.0)
    after = [t for t in progress if t >= fault.end]
    out.resume_s = (after[0] - fault.end) if after else None
    start, end = fault.start, fault.end
    if sc.rate_window_s is not None:
        end = start + sc.rate_window_s
    if end - start >= 3.0:
        inside = [s for s in good if start <= s.t <= end]
        if len(inside) >= 2 and inside[0].done is not None and inside[-1].done is not None:
            span = inside[-1].t - inside[0].t
            out.fault_rate = (inside[-1].done - inside[0].done) / span if span > 0 else 0.0
        flights = [s.in_flight for s in inside if s.in_flight is not None]
        if flights:
            out.in_flight_avg = sum(flights) / len(flights)
        if fault.host is not None:
            held = [s.held.get(fault.host, 0) for s in inside if s.held]
            if held:
                out.faulty_held_avg = sum(held) / len(held)
        for host in WORKERS:
            figures = [s.rtt[host.name] * 1000 for s in inside if host.name in s.rtt]
            if figures:
                out.rtt_ms[host.name] = (sum(figures) / len(figures), max(figures))
    leaders = [s.leader for s in samples if s.leader]
    out.leader_changes = sum(1 for a, b in itertools.pairwise(leaders) if a != b)


def run_scenario(stack: Stack, engine: Engine, token: str, sc: Scenario, claims: int) -> Outcome:
    out = Outcome(sc.name)
    if sc.needs_sentinel and not stack.sentinel:
        out.failures.append("not run: the deployment has no Sentinels (--redis plain)")
        return out
    if sc.name == "clock-skew":
        stack.restart_worker(WORKERS[0], clock_offset_s=90)
        stack.restart_worker(WORKERS[1], clock_offset_s=-90)
    ok0, r0 = decisions_counts(stack)
    t0 = time.monotonic()
    job_id = submit(stack, token, claims)
    sampler = Sampler(engine, lambda: redis_client(stack), job_id, lambda: worker_pids(stack))
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    fault = Fault()
    try:
        deadline = time.monotonic() + 60
        while sampler.done_now() < min(WARM_ITEMS, claims // 3) and time.monotonic() < deadline:
            time.sleep(0.1)
        sc.inject(stack, fault)
        deadline = t0 + JOB_TIMEOUT_S
        status = "?"
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                with engine.connect() as c:
                    status = str(
                        c.execute(text("SELECT status FROM jobs WHERE id = :j"), {"j": job_id}).scalar_one()
                    )
                if status in ("completed", "failed", "cancelled"):
                    break
            time.sleep(0.2)
        t_end = time.monotonic()
    finally:
        sampler.stop.set()
        thread.join(2)
    out.elapsed_s = t_end - t0
    out.status, out.done, out.failed, out.total, out.claimed_twice, recorded_dups, recorded_200s = job_end(
        engine, job_id
    )
    ok1, r1 = decisions_counts(stack)
    out.ok200, out.r429 = ok1 - ok0, r1 - r0
    # A duplicate is an item sent again although an answer of it was stored; a lost call is a 200 the
    # simulator gave that no item recorded (its answer died with a killed process, or was never stored).
    out.duplicates = recorded_dups
    out.lost_calls = max(0, out.ok200 - recorded_200s)
    with engine.connect() as c:
        out.first_error = c.execute(
            text("SELECT error FROM items WHERE job_id = :j AND status = 'failed' ORDER BY id LIMIT 1"),
            {"j": job_id},
        ).scalar()
    measure(out, sampler.samples, fault, sc, t_end)
    check(out, sc)
    restore(stack, sc)
    return out


def check(out: Outcome, sc: Scenario) -> None:
    f = out.failures
    if out.status != "completed":
        f.append(f"job {out.status} after {out.elapsed_s:.0f} s")
    if out.done != out.total or out.failed:
        why = f" (first error: {out.first_error[:160]})" if out.first_error else ""
        f.append(f"{out.total - out.done} items not done{why}")
    if out.duplicates:
        f.append(f"{out.duplicates} duplicate upstream calls")
    if out.lost_calls and not sc.loses_calls:
        f.append(f"{out.lost_calls} answered calls not recorded")
    if out.r429 and sc.name.startswith("redis"):  # elsewhere printed: a loaded machine's jitter draws one
        f.append(f"{out.r429} upstream 429s (the limiter burst after Redis came back)")
    if sc.want_rate and out.fault_rate is not None and out.fault_rate < HOLD_RATIO * LIMIT:
        f.append(f"{out.fault_rate:.1f} items/s during the fault < {HOLD_RATIO * LIMIT:.0f}")
    if sc.want_resume_s is not None and (out.resume_s is None or out.resume_s > sc.want_resume_s):
        f.append(f"resumed {out.resume_s if out.resume_s is not None else '?'} s after the fault > "
                 f"{sc.want_resume_s:g} s")  # fmt: skip
    if sc.max_leader_changes is not None and out.leader_changes > sc.max_leader_changes:
        f.append(f"the lock changed hands {out.leader_changes} times")


def restore(stack: Stack, sc: Scenario) -> None:
    """Every host healthy again, both workers running with true clocks, before the next scenario."""
    for host in WORKERS:
        netns.heal(host)
        netns.fast_link(host)
        stack.signal_group(host.name, signal.SIGCONT)
    for host in WORKERS:
        proc = stack.procs.get(host.name)
        if sc.name == "clock-skew" or proc is None or proc.poll() is not None:
            stack.restart_worker(host)


# --- the command -----------------------------------------------------------------------------------------


def _interrupted(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def preflight() -> None:
    missing = [
        tool for tool in ("ip", "iptables", "tc", "redis-server", "runuser") if shutil.which(tool) is None
    ]
    from scripts.drill.stack import PG_BIN

    if not (PG_BIN / "initdb").exists():
        missing.append("postgresql (initdb)")
    if missing:
        raise SystemExit(
            f"drill: missing {', '.join(missing)} (apt-get install iptables postgresql redis-server)"
        )
    import os

    if os.geteuid() != 0:
        raise SystemExit("drill: needs root (network namespaces, iptables, tc)")


def redis_mode_for(chosen: list[Scenario]) -> str:
    """The deployment a run gets unless --redis says otherwise: Sentinels (production's setting,
    docs/operations.md) whenever a chosen scenario needs them or more than the smoke runs, so a plain
    `make drill` runs every scenario; one plain Redis for the smoke alone (`--quick`, CI's cheap run)."""
    return "plain" if all(sc is SMOKE and not sc.needs_sentinel for sc in chosen) else "sentinel"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the smoke scenario only, a smaller job (CI)")
    ap.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    ap.add_argument("--claims", type=int, default=None, help="claims per job (350; 150 with --quick)")
    ap.add_argument(
        "--redis",
        choices=("sentinel", "plain"),
        default=None,
        help="Redis as a primary, a replica and three Sentinels (the default: production's setting, and "
        "what redis-failover needs) or one plain server (the default with --quick: its one scenario "
        "needs no Sentinel, and the smoke stays cheap)",
    )
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for sc in [*SCENARIOS, SMOKE]:
            print(f"{sc.name:<20} {sc.doc}")
        return 0
    preflight()
    chosen = [SMOKE] if args.quick else [s for s in SCENARIOS if args.only is None or s.name in args.only]
    claims = args.claims or (150 if args.quick else 350)
    redis_mode = args.redis or redis_mode_for(chosen)
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGHUP, _interrupted)
    outcomes: list[Outcome] = []
    started = time.monotonic()
    with deployment(sentinel=redis_mode == "sentinel") as stack:
        engine = create_engine(stack.database_url, pool_pre_ping=True, connect_args={"connect_timeout": 2})
        token = stack.token()
        print(f"drill: {len(chosen)} scenarios, {claims} grounded claims each, simulator {LIMIT:g} req/s, "
              f"Redis {redis_mode}, deployment up in {time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
        for sc in chosen:
            try:
                out = run_scenario(stack, engine, token, sc, claims)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                out = Outcome(sc.name, failures=[f"drill error: {type(exc).__name__}: {exc}"])
                with contextlib.suppress(Exception):
                    restore(stack, sc)
            outcomes.append(out)
            print(out.line(), flush=True)
        engine.dispose()
    failed = [o.name for o in outcomes if o.failures]
    # Not "N passed, M failed": CI reads such a line as a test runner's count.
    verdict = "every scenario held" if not failed else f"{len(failed)} of {len(outcomes)} did not hold"
    print(f"drill: {verdict} ({time.monotonic() - started:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("drill: interrupted; everything it started has been stopped and removed", file=sys.stderr)
        sys.exit(130)
