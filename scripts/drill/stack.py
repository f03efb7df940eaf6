"""The drill's deployment: which process runs on which host, started and stopped as a whole.

    db   10.231.0.2  Postgres (a cluster of the drill's own, in a temporary folder), Redis (the drill's own
                     redis-server instances: a primary, a replica and three Sentinels), the simulator at
                     10 Decisions requests/s
    web  10.231.0.3  gunicorn (the API the drill submits to) and beat (the sweeper)
    w1   10.231.0.4  a Celery worker
    w2   10.231.0.5  a Celery worker

None of it touches the machine's own Postgres or Redis: every server here is started by the drill, listens
on the drill's addresses only and lives in a temporary folder that is removed afterwards. Every process is
started in a session of its own, so that its whole process group can be ended (`stop_all`), and inside
its host's namespace, so that `netns.destroy_all` finds any that escaped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis as redis_lib

from scripts.drill import netns
from scripts.drill.netns import Host

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PG_BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), Path("/usr/bin"))
SKEW_DIR = Path(__file__).resolve().parent / "skew"  # its sitecustomize.py shifts a worker's wall clock

DB = Host("db", f"{netns.SUBNET}.2")
WEB = Host("web", f"{netns.SUBNET}.3")
W1 = Host("w1", f"{netns.SUBNET}.4")
W2 = Host("w2", f"{netns.SUBNET}.5")
HOSTS = [DB, WEB, W1, W2]
WORKERS = [W1, W2]

PG_PORT = 5544
REDIS_PORT = 6391  # the primary at first; REPLICA_PORT takes over in the failover scenario
REPLICA_PORT = 6392
SENTINEL_PORTS = (26391, 26392, 26393)
MASTER_NAME = "fgdrill"
SIM_PORT = 8790
WEB_PORT = 8000
KEY = "drill-key"
SIM_RPS = 10.0
SIM_LATENCY_S = 0.3


@dataclass
class Stack:
    """The running deployment and its processes (one Popen per name)."""

    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fgdrill-")))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    sentinel: bool = False  # a replica and three Sentinels beside the primary; REDIS_URL names the Sentinels
    worker_env: dict[str, dict[str, str]] = field(default_factory=dict)

    # --- addresses ---------------------------------------------------------------------------------

    @property
    def database_url(self) -> str:
        return f"postgresql+psycopg://postgres@{DB.ip}:{PG_PORT}/factgate"

    @property
    def redis_url(self) -> str:
        """What the deployment is given as REDIS_URL: a Sentinel URL when Sentinels run."""
        if self.sentinel:
            hosts = ";".join(f"sentinel://{DB.ip}:{p}" for p in SENTINEL_PORTS)
            return f"{hosts}/0?master_name={MASTER_NAME}"
        return f"redis://{DB.ip}:{REDIS_PORT}/0"

    @property
    def sim(self) -> str:
        return f"http://{DB.ip}:{SIM_PORT}"

    @property
    def web(self) -> str:
        return f"http://{WEB.ip}:{WEB_PORT}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FACTGATE_", "PERPLEXITY_"))}
        env.update(
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            PERPLEXITY_API_KEY=KEY,
            PERPLEXITY_API_BASE=self.sim,
            FACTGATE_INSTANCE_PATH=str(self.tmp / "instance"),
            FACTGATE_SWEEP_INTERVAL_S="5",
            # A killed host's running items come back when their lease runs out: 60 s rather than 300 s
            # keeps a scenario within two minutes, and is still three times any fault the drill holds.
            FACTGATE_LEASE_S="60",
            FACTGATE_LOG_LEVEL="INFO",
            PYTHONPATH=str(ROOT),
        )
        return env

    # --- processes -----------------------------------------------------------------------------------

    def start(self, name: str, host: Host, argv: list[str], extra: dict[str, str] | None = None) -> None:
        log = (self.tmp / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            netns.in_ns(host, *argv),
            cwd=ROOT,
            env={**self.env(), **(extra or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: `signal_group` reaches all of it
        )

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def signal_group(self, name: str, sig: signal.Signals) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)

    def stop(self, name: str, *, kill: bool = False, grace_s: float = 15.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name, kill=True, grace_s=5.0)
        self.pg_ctl("stop", "-m", "immediate", check=False)

    # --- the database host ---------------------------------------------------------------------------

    def pg_ctl(self, *args: str, check: bool = True) -> None:
        data = self.tmp / "pg"
        argv = netns.in_ns(
            DB, "runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(data), *args
        )
        # Not captured: a started postmaster keeps its parent's stdout, so a pipe would never close.
        subprocess.run(argv, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=90)

    def start_postgres(self) -> None:
        data = self.tmp / "pg"
        data.mkdir()
        shutil.chown(self.tmp, "postgres")
        self.tmp.chmod(0o755)
        shutil.chown(data, "postgres")
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {netns.SUBNET}.0/24 trust\n")
        opts = (f"-p {PG_PORT} -k {self.tmp} -c listen_addresses={DB.ip} -c max_connections=300 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")  # fmt: skip
        self.pg_ctl("start", "-w", "-t", "60", "-l", str(self.tmp / "postgres.log"), "-o", opts)
        subprocess.run(
            netns.in_ns(DB, str(PG_BIN / "createdb"), "-h", DB.ip, "-p", str(PG_PORT), "-U", "postgres", "factgate"),
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def start_redis(self, port: int, *, replica_of: int | None = None) -> None:
        argv = ["redis-server", "--port", str(port), "--bind", DB.ip, "--save", "", "--appendonly", "no",
                "--protected-mode", "no", "--dir", str(self.tmp)]  # fmt: skip
        if replica_of is not None:
            argv += ["--replicaof", DB.ip, str(replica_of)]
        self.start(f"redis-{port}", DB, argv)
        self.wait_redis(port)

    def wait_redis(self, port: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis_lib.RedisError):
                if redis_lib.Redis(host=DB.ip, port=port, socket_timeout=1).ping():
                    return
            time.sleep(0.1)
        raise TimeoutError(f"redis on {port} did not answer")

    def start_sentinels(self) -> None:
        for port in SENTINEL_PORTS:
            conf = self.tmp / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind {DB.ip}\nprotected-mode no\ndir {self.tmp}\n"
                f"sentinel monitor {MASTER_NAME} {DB.ip} {REDIS_PORT} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} 5000\n"
                f"sentinel failover-timeout {MASTER_NAME} 10000\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            self.start(f"sentinel-{port}", DB, ["redis-server", str(conf), "--sentinel"])
        for port in SENTINEL_PORTS:
            self.wait_redis(port)

    def start_simulator(self) -> None:
        """The simulator at real-time priority (`chrt -r 10`, as bench/at_limit.py runs it): it stands in
        for the remote API, which this machine's load does not slow down. At normal priority on a busy
        2-core host (the drill's eight processes, or anyone else's work) it counted requests when its
        threads next got a core — up to 150 ms late in the bench — and that delay, not the limiter, drew
        429s: six in one slow-link run at a load average of 22."""
        self.start("simulator", DB, ["chrt", "-r", "10", str(BIN / "factgate"), "simulator", "--host", DB.ip, "--port", str(SIM_PORT),
                                     "--decisions-rps", str(SIM_RPS), "--latency", str(SIM_LATENCY_S)])  # fmt: skip
        wait_http(self.sim + "/stats")

    # --- the web host --------------------------------------------------------------------------------

    def migrate(self) -> None:
        subprocess.run([str(BIN / "factgate"), "db", "upgrade"], env=self.env(), cwd=ROOT, check=True,
                       capture_output=True, timeout=180)  # fmt: skip

    def token(self) -> str:
        out = subprocess.run([str(BIN / "factgate"), "tokens", "create", "drill"], env=self.env(), cwd=ROOT,
                             check=True, capture_output=True, text=True, timeout=120).stdout  # fmt: skip
        return out.strip().splitlines()[0]  # the token alone on stdout (its description is on stderr)

    def start_web(self) -> None:
        self.start("web", WEB, [str(BIN / "gunicorn"), "--config", "python:web.gunicorn_conf", "--bind",
                                f"{WEB.ip}:{WEB_PORT}", "--workers", "1", "--worker-class", "gthread",
                                "--threads", "4", "--timeout", "120", "web.app:create_app()"])  # fmt: skip
        wait_http(self.web + "/healthz", timeout=90)

    def start_beat(self) -> None:
        self.start("beat", WEB, [str(BIN / "celery"), "-A", "workers.app", "beat", "--schedule",
                                 str(self.tmp / "beat.db"), "--loglevel", "INFO"])  # fmt: skip

    # --- the worker hosts ----------------------------------------------------------------------------

    def start_worker(self, host: Host, *, clock_offset_s: int = 0) -> None:
        """A `celery worker` as the Procfile runs it, on `host`; with a clock offset its wall clock (and
        only that: monotonic time and sleeps stay true) is shifted (scripts/drill/skew/sitecustomize.py)."""
        extra: dict[str, str] = {}
        if clock_offset_s:
            extra = {"PYTHONPATH": f"{SKEW_DIR}:{ROOT}", "FACTGATE_DRILL_CLOCK_OFFSET_S": str(clock_offset_s)}
        self.worker_env[host.name] = extra
        self.start(
            host.name,
            host,
            [str(BIN / "celery"), "-A", "workers.app", "worker", "--pool", "threads", "--concurrency", "16",
             "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle", "--loglevel", "INFO",
             "--hostname", f"{host.name}@drill"],
            extra,
        )  # fmt: skip

    def wait_worker_ready(self, host: Host, timeout: float = 120.0) -> None:
        """Until the worker's log says it is ready (it consumes from then on)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tail = self.log(host.name).rsplit("--- drill: worker restarted", 1)[-1]
            if " ready." in tail:
                return
            proc = self.procs.get(host.name)
            if proc is None or proc.poll() is not None:
                raise RuntimeError(f"worker {host.name} exited:\n{self.log(host.name)[-3000:]}")
            time.sleep(0.3)
        raise TimeoutError(f"worker {host.name} not ready in {timeout:.0f} s")

    def restart_worker(self, host: Host, *, clock_offset_s: int = 0) -> None:
        self.stop(host.name)
        with (self.tmp / f"{host.name}.log").open("a") as log:
            log.write(f"--- drill: worker restarted (clock offset {clock_offset_s:+d} s) ---\n")
        self.start_worker(host, clock_offset_s=clock_offset_s)
        self.wait_worker_ready(host)


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code < 500:
                return
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer in {timeout:.0f} s")


@contextlib.contextmanager
def deployment(*, sentinel: bool = True) -> Iterator[Stack]:
    """The whole deployment, up; everything ended and removed on the way out, whatever happened."""
    netns.check_subnet_free()
    netns.destroy_all()  # what a killed earlier run left
    stack = Stack(sentinel=sentinel)
    try:
        netns.create(HOSTS)
        stack.start_postgres()
        stack.start_redis(REDIS_PORT)
        if sentinel:
            stack.start_redis(REPLICA_PORT, replica_of=REDIS_PORT)
            stack.start_sentinels()
        stack.start_simulator()
        stack.migrate()
        stack.start_web()
        stack.start_beat()
        for host in WORKERS:
            stack.start_worker(host)
        for host in WORKERS:
            stack.wait_worker_ready(host)
        yield stack
    finally:
        stack.stop_all()
        netns.destroy_all()
        if os.environ.get("FACTGATE_DRILL_KEEP_LOGS"):
            print(f"drill: logs kept in {stack.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(stack.tmp, ignore_errors=True)
