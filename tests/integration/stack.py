"""The real server stack for integration tests: Postgres, Redis, a Celery worker subprocess, the simulator.

The worker is a real `celery worker` process (threads pool) pointed at a real simulator over HTTP, and
beat is Celery's real beat service sending the sweep every second — nothing is eager. Beat runs in a
thread of the test process (`BeatThread`), not inside the worker: a worker started with `-B` forks beat
while its own threads (consumer, dispatcher) hold locks, and the forked beat now and then hung before its
first tick. Nor as a `celery beat` process of its own, as in production: beat only publishes a message on
a timer, and each such process spent ~4 s of CPU importing the app on this 2-core machine, once per queue
test — about a sixth of the suite's CPU. The worker, whose behaviour the tests are about, stays a process
of its own (it is killed, stopped and restarted by the tests).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis as redis_lib
from celery.beat import Service as BeatService
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from checks import claims as claim_rules
from checks.options import parse_claims_options, parse_questions_options
from checks.questions import validate_question_rows
from config import Settings
from jobs.claims import claim_units
from jobs.intake import create_job
from jobs.stages import question_units
from jobs.tenancy import get_or_create_tenant
from models import Job, make_engine, make_session_factory, session_scope
from tests.services import create_pg_database, drop_pg_database, redis_db_url, unavailable
from workers.api import enqueue_start
from workers.app import make_celery

ROOT = Path(__file__).resolve().parents[2]
STACK_REDIS_DB = 13
# A module's shared stack lives beside its tests' own stacks, so it needs another database. 12 is the metrics
# test's, which is in another module: pytest ends a module's fixtures before the next module's tests start.
SHARED_STACK_REDIS_DB = 12
ENDED = ("completed", "cancelled", "failed")


@dataclass
class WorkerProc:
    """A running `celery worker` subprocess and its log file."""

    proc: subprocess.Popen[bytes]
    log: Path

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            if " ready." in text:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{text[-4000:]}")
            time.sleep(0.2)
        raise TimeoutError(
            f"worker not ready after {timeout}s:\n{self.log.read_text(errors='replace')[-4000:]}"
        )

    def kill(self) -> None:
        """SIGKILL to the whole process group (the process and any child): no cleanup, no acks."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(15)
        self.kill()  # whatever is left of the group


class BeatThread(threading.Thread):
    """Celery beat (its real scheduler and `Service`) in a thread of the test process, sending the
    stack's schedule (the sweep) to its broker. `log` only says that beat ran here: a timeout's message
    lists every log of the stack, and the worker's shows the sweeps it received."""

    def __init__(self, settings: Settings, schedule: Path, log: Path) -> None:
        super().__init__(name=f"beat-{schedule.stem}", daemon=True)
        self.app = make_celery(settings)
        # max_interval 1 s: the service notices `stop` within a second (celery's own threaded beat does so).
        self.service = BeatService(self.app, max_interval=1, schedule_filename=str(schedule))
        self.log = log
        self.log.write_text("beat: Starting (in the test process)\n")

    def run(self) -> None:
        self.service.start()

    def kill(self) -> None:
        """Stop ticking (waits for the current tick) and close the app's broker connections."""
        if self.is_alive():
            self.service.stop(wait=True)
            self.join(5)
        self.app.close()

    stop = kill


@dataclass
class Stack:
    """Everything a queue test needs; `env` is what the worker processes see."""

    pg_url: str
    engine: Engine
    env: dict[str, str]
    tmp: Path
    workers: list[WorkerProc] = field(default_factory=list)
    beat: BeatThread | None = None
    tenant: str = "acme"  # whose jobs `submit_*` creates when the caller names no tenant

    @property
    def settings(self) -> Settings:
        return Settings.from_env(self.env)

    def redis(self) -> redis_lib.Redis:
        return redis_lib.Redis.from_url(self.env["REDIS_URL"])

    def start_worker(
        self,
        *,
        concurrency: int = 8,
        beat: bool = True,
        extra_env: dict[str, str] | None = None,
        app: str = "workers.app",
    ) -> WorkerProc:
        """Start a worker (with `beat`, also the stack's beat if it has none) and wait until it is ready.
        `app` is the Celery app module (a test's own, to load a toy job kind first)."""
        n = len(self.workers)
        argv = [
            sys.executable, "-m", "celery", "-A", app, "worker",
            "--pool", "threads", "--concurrency", str(concurrency), "--loglevel", "info",
            "--hostname", f"w{n}-{uuid.uuid4().hex[:6]}@%h", "--without-mingle", "--without-gossip",
        ]  # fmt: skip
        env = {**os.environ, **self.env, **(extra_env or {})}
        if beat and (self.beat is None or not self.beat.is_alive()):
            self.beat = BeatThread(self.settings, self.tmp / f"beat{n}.db", self.tmp / f"beat{n}.log")
            self.beat.start()
        worker = self._spawn(argv, env, self.tmp / f"worker{n}.log")
        self.workers.append(worker)
        worker.wait_ready()
        return worker

    def _spawn(self, argv: list[str], env: dict[str, str], log: Path) -> WorkerProc:
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            )
        return WorkerProc(proc, log)

    def submit_claims(
        self, rows: Sequence[dict[str, Any]], options: dict[str, Any], tenant: str | None = None
    ) -> uuid.UUID:
        """Validate, store and enqueue a claims job the way the intake API does."""
        parsed = claim_rules.validate_rows(list(rows), max_rows=100_000, max_claim_bytes=4096)
        opts = parse_claims_options(options)
        units, warnings = claim_units(parsed, opts)
        factory = make_session_factory(self.engine)
        with session_scope(factory) as session:
            t = get_or_create_tenant(session, tenant or self.tenant)
            job, _ = create_job(
                session, tenant_id=t.id, kind="claims", options=opts.as_dict(), units=units, warnings=warnings
            )
            job_id = job.id
        celery = make_celery(self.settings)
        enqueue_start(celery, job_id)
        celery.close()
        return job_id

    def submit_questions(
        self,
        kind: str,
        rows: Sequence[dict[str, Any]],
        options: dict[str, Any] | None = None,
        tenant: str | None = None,
    ) -> uuid.UUID:
        """Validate, store and enqueue an `answer` or `quote` job the way the intake API does."""
        parsed = validate_question_rows(list(rows), max_rows=100_000)
        opts = parse_questions_options(options or {})
        factory = make_session_factory(self.engine)
        with session_scope(factory) as session:
            t = get_or_create_tenant(session, tenant or self.tenant)
            job, _ = create_job(
                session, tenant_id=t.id, kind=kind, options=opts.as_dict(), units=question_units(parsed, kind)
            )
            job_id = job.id
        celery = make_celery(self.settings)
        enqueue_start(celery, job_id)
        celery.close()
        return job_id

    def submit_answer(
        self, rows: Sequence[dict[str, Any]], options: dict[str, Any] | None = None
    ) -> uuid.UUID:
        return self.submit_questions("answer", rows, options)

    def submit_quote(
        self, rows: Sequence[dict[str, Any]], options: dict[str, Any] | None = None
    ) -> uuid.UUID:
        return self.submit_questions("quote", rows, options)

    def wait_job(self, job_id: uuid.UUID, timeout: float = 120.0) -> Job:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with Session(self.engine) as session:
                job = session.scalar(select(Job).where(Job.id == job_id))
                if job is not None and job.status in ENDED:
                    session.expunge(job)
                    return job
            time.sleep(0.25)
        log_files = [w.log for w in self.workers] + ([self.beat.log] if self.beat is not None else [])
        logs = "\n".join(log.read_text(errors="replace")[-3000:] for log in log_files)
        raise TimeoutError(f"job {job_id} did not finish in {timeout}s\n{logs}")


@contextmanager
def fresh_database() -> Iterator[tuple[str, Engine]]:
    """A database of its own for one queue test: a worker's sweeper then sees only that test's jobs."""
    try:
        url = create_pg_database("factgate_queue", migrated=True)
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    engine = make_engine(url)
    try:
        yield url, engine
    finally:
        engine.dispose()
        drop_pg_database(url)


class SharedStack(Stack):
    """A stack whose workers serve every test of a module (`shared_stack`).

    `start_worker` with the settings the first call used returns the running worker instead of starting
    another one; other settings are a mistake (such a test needs a stack of its own). The worker sees every
    job in the database, so each test submits as a tenant of its own (`for_test`) and waits for its own job:
    the dispatcher serves live jobs fairly, and the earlier tests' jobs have ended.
    """

    _started: tuple[int, bool, tuple[tuple[str, str], ...]] | None = None

    def start_worker(
        self,
        *,
        concurrency: int = 8,
        beat: bool = True,
        extra_env: dict[str, str] | None = None,
        app: str = "workers.app",
    ) -> WorkerProc:
        wanted = (concurrency, beat, tuple(sorted({**(extra_env or {}), "app": app}.items())))
        if self._started is None:
            worker = super().start_worker(concurrency=concurrency, beat=beat, extra_env=extra_env, app=app)
            self._started = wanted
            return worker
        if wanted != self._started:
            raise AssertionError(f"a shared stack runs one worker {self._started}; this test wants {wanted}")
        return self.workers[0]

    def for_test(self, name: str) -> SharedStack:
        """This stack, submitting as a tenant named after the test."""
        self.tenant = f"t-{uuid.uuid4().hex[:8]}-{name[:40]}"
        return self


@contextmanager
def shared_stack(sim_url: str, tmp: Path, **env: str) -> Iterator[SharedStack]:
    """A database, a clean Redis database and (once a test asks) a worker for all the tests of a module."""
    with (
        fresh_database() as (url, engine),
        running_stack(url, engine, sim_url, tmp, redis_db=SHARED_STACK_REDIS_DB, **env) as stack,
    ):
        shared = SharedStack(pg_url=stack.pg_url, engine=stack.engine, env=stack.env, tmp=stack.tmp)
        try:
            yield shared
        finally:
            for w in shared.workers:
                w.kill()
            if shared.beat is not None:
                shared.beat.kill()


@contextmanager
def running_stack(
    pg_url: str, engine: Engine, sim_url: str, tmp: Path, *, redis_db: int = STACK_REDIS_DB, **env: str
) -> Iterator[Stack]:
    """A stack with a clean Redis database (this xdist worker's own); every worker is killed on exit."""
    redis_url = redis_db_url(redis_db)
    redis_lib.Redis.from_url(redis_url).flushdb()
    base_env = {
        "DATABASE_URL": pg_url,
        "REDIS_URL": redis_url,
        "PERPLEXITY_API_KEY": "sim-test-key",
        "PERPLEXITY_API_BASE": sim_url,
        "FACTGATE_SWEEP_INTERVAL_S": "1",
        "FACTGATE_LEASE_S": "20",
        "FACTGATE_DISPATCH_STALE_S": "10",
        "FACTGATE_MAX_ITEM_ATTEMPTS": "3",
        "FACTGATE_HTTP_TIMEOUT_S": "5",
        "FACTGATE_CHORD_SIZE": "10",
        "FACTGATE_WORKER_CONCURRENCY": "8",
        # Our limiter's rates (defaults 10/s Decisions, 3/s Agent) would make every test wait on them; tests
        # about pacing, throttling or fairness set their own. Search stays at the simulator's default 50/s.
        "FACTGATE_DECISIONS_RPS": "100",
        "FACTGATE_AGENT_RPS": "100",
    }
    stack = Stack(pg_url=pg_url, engine=engine, env={**base_env, **env}, tmp=tmp)
    try:
        yield stack
    finally:
        # The test is over: a warm shutdown (SIGTERM, about a second) would check nothing, so the workers
        # are killed. Tests that need a graceful stop call `WorkerProc.stop()` themselves.
        for w in stack.workers:
            w.kill()
        if stack.beat is not None:
            stack.beat.kill()
        redis_lib.Redis.from_url(redis_url).flushdb()
