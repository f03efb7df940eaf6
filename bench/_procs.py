"""Process helpers shared by the benchmarks: a fresh database, and the simulator, worker and web
processes started as real subprocesses on loopback, each stopped when the benchmark ends.

Benchmarks print figures; they assert nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis as redis_lib
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import migrations

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN = os.environ.get(
    "FACTGATE_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("FACTGATE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """A new migrated Postgres database, dropped afterwards."""
    name = f"factgate_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    try:
        migrations.upgrade(url)
        yield url
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def python_speed_s(additions: int = 10_000_000) -> float:
    """CPU seconds a fixed pure-Python loop takes in this process, now: the machine's speed, printed beside CPU
    figures so that runs can be compared.

    Why: on this shared 2-core VM the same code's CPU per claim moved by up to 40 % between consecutive
    runs of bench/ceiling.py (3.3 and 4.7 ms in the workers, with every other process's share moving the
    same way), and this loop from 0.28 to 0.50 s within an hour, in step with them: the CPU time itself
    inflates when the host is busy, so a figure far from its goal on a slow moment is not a regression by
    itself.
    """
    started = time.process_time()
    total = 0
    for i in range(additions):
        total += i
    return time.process_time() - started


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def descendants(pid: int) -> list[int]:
    """The live children of a process, their children and so on (gunicorn's workers, for instance)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                kids = [int(k) for k in (task / "children").read_text().split()]
                out += kids
                todo += kids
    return out


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and of every live descendant (a forking server's workers are not reaped until
    it exits, so `cpu_seconds` of the master alone misses them)."""
    total = cpu_seconds(pid)
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(child)
    return total


def pids_matching(needle: str) -> list[int]:
    """Processes whose command line contains `needle` (Postgres names each backend's database in it)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
    return found


class CpuSampler:
    """CPU of processes that come and go (the Postgres backends of one database): sampled now and then,
    so a backend that exits mid-run still counts what it used up to its last sample."""

    def __init__(self, find: Callable[[], list[int]]) -> None:
        self._find = find
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self.sample(initial=True)

    def sample(self, *, initial: bool = False) -> None:
        for pid in self._find():
            with contextlib.suppress(OSError):
                used = cpu_seconds(pid)
                if initial:
                    self._first[pid] = used
                self._first.setdefault(pid, 0.0)  # started during the run: all its CPU is ours
                self._last[pid] = used

    def seconds(self) -> float:
        return sum(self._last[pid] - self._first[pid] for pid in self._last)


def redis_server_pid(url: str = REDIS_URL) -> int | None:
    """The pid of the Redis server behind `url`, if it runs on this machine."""
    try:
        pid = int(redis_lib.Redis.from_url(url).info("server")["process_id"])
    except Exception:
        return None
    return pid if Path(f"/proc/{pid}/stat").exists() else None


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Procs:
    """Started subprocesses; `stop()` ends them all."""

    env: dict[str, str]
    logdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="factgate-bench-")))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(
        self, name: str, argv: list[str], extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = (self.logdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**os.environ, **self.env, **(extra_env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.logdir / f"{name}.log").read_text(errors="replace")

    def wait_log(self, name: str, needle: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log(name):
                return
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited:\n{self.log(name)[-3000:]}")
            time.sleep(0.2)
        raise TimeoutError(f"{name}: no {needle!r} in {timeout}s:\n{self.log(name)[-3000:]}")

    def wait_http(self, url: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code < 500:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"{url} did not answer in {timeout}s")

    def start_simulator(self, port: int, *args: str) -> str:
        self.start("simulator", [str(BIN / "factgate"), "simulator", "--port", str(port), *args])
        base = f"http://127.0.0.1:{port}"
        self.wait_http(base + "/stats")
        return base

    def start_recording_simulator(self, port: int, *args: str) -> str:
        """The simulator with a record of when each request reached its rate limiter (bench/_sim_recorder.py)."""
        self.start("simulator", [sys.executable, "-m", "bench._sim_recorder", "--port", str(port), *args])
        base = f"http://127.0.0.1:{port}"
        self.wait_http(base + "/stats")
        return base

    def start_worker(
        self, name: str = "worker", concurrency: int = 8, beat: bool = False, loglevel: str = "warning"
    ) -> None:
        """A `celery worker` as the Procfile runs it (threads pool, prefetch 1), at `loglevel`."""
        argv = [str(BIN / "celery"), "-A", "workers.app", "worker", "--pool", "threads",
                "--concurrency", str(concurrency), "--prefetch-multiplier", "1", "--loglevel", loglevel,
                "--without-mingle", "--without-gossip",
                "--hostname", f"{name}-{uuid.uuid4().hex[:6]}@%h"]  # fmt: skip
        if beat:
            argv += ["-B", "--schedule", str(self.logdir / f"{name}-beat.db")]
        self.start(name, argv)
        if loglevel.lower() in ("info", "debug"):
            # Celery says "ready." once it consumes; on a busy host that can take well over 3 s, and a job
            # enqueued before it would count the start-up against the run.
            self.wait_log(name, " ready.", timeout=180)
            return
        # --loglevel warning hides the "ready" line; poll the broker for a live worker instead.
        time.sleep(3.0)

    def start_beat(self, name: str = "beat", loglevel: str = "warning") -> None:
        """`celery beat` as the Procfile runs it (the sweeper schedule), with its schedule file in the logs."""
        argv = [str(BIN / "celery"), "-A", "workers.app", "beat", "--loglevel", loglevel,
                "--schedule", str(self.logdir / f"{name}.db")]  # fmt: skip
        self.start(name, argv)

    def start_cpu_hogs(self, n: int) -> None:
        """`n` processes that only burn CPU (one core each), unrelated to the stack: a busy host."""
        for i in range(n):
            self.start(f"cpu-hog-{i}", [sys.executable, "-c", "while True: pass"])

    def start_web(self, port: int, workers: int = 1) -> str:
        self.start(
            "web",
            [str(BIN / "gunicorn"), "--config", "python:web.gunicorn_conf", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
             "--worker-class", "gthread", "--threads", "4", "--timeout", "120", "web.app:create_app()"],
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        self.wait_http(base + "/readyz")  # serving, with its database and Redis reachable
        return base

    def start_procfile(
        self, process: str, name: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        """Start one process type of the Procfile exactly as `honcho start` would (its command line, its
        `${VAR:-default}`s filled from this environment, so unset variables take the Procfile's defaults),
        with the installed executables of this venv. `name` tells several processes of one type apart
        (`honcho start -c worker=2`)."""
        argv = procfile_argv(process, {**os.environ, **self.env, **(env or {})})
        self.start(name or process, argv, env)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")


def procfile_argv(process: str, env: dict[str, str]) -> list[str]:
    """The argv of one Procfile line, variables expanded as the shell would (`${X:-d}`: X if set and not
    empty, else d) and the first word resolved to this venv's executable when it has one."""
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.startswith(f"{process}:"):
            command = line.split(":", 1)[1].strip()
            break
    else:
        raise KeyError(f"no {process!r} process in the Procfile")

    def fill(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        value = env.get(name, "")
        return value if value else (m.group(2) or "")

    argv = shlex.split(_VAR.sub(fill, command))
    exe = BIN / argv[0]
    if exe.exists():
        argv[0] = str(exe)
    return argv


def flush_redis() -> None:
    redis_lib.Redis.from_url(REDIS_URL).flushdb()
