"""The dispatcher: one loop per deployment that decides which items reach the upstream next.

Why it exists: the upstream is one scarce resource per key and endpoint (a scope), shared by every tenant
and job. With a FIFO broker holding whole windows of a big job, a small job waited minutes behind it, and a
cancel waited for the windows already queued. Here the database decides the order and the broker holds
little: each scope keeps only about as many items in flight as keep its rate limit busy, and whenever slots
free up a fair round picks which jobs the next items come from (workers/allocation.py). Each job's picks go
out as small windows of `run_item` tasks whose body (`after_window`) moves the job's questions on and
finalizes it when done (workers/publishing.py, workers/windows.py).

This module is the loop and one round of it (`Dispatcher.tick`); its parts are services of their own,
each with its config and a typed result of a run: leadership.py (the lock and the fenced terms),
fitness.py (each host's figure; when an unfit leader steps aside), hosts.py (silent, slow and dead hosts),
holds.py (budget holds), allocation.py (in-flight targets, scopes, fair rounds), windows.py and
publishing.py (the windows sent and closed; the messages), schedules.py (what status pages show).

A tick re-checks leadership before it marks and before it sends, and undoes its marks when the lock may
have lapsed meanwhile. Redis stays a hint: an epoch key that vanishes (Redis flushed or restarted empty)
means every queued message is gone, so the leader forgets every pending dispatch at once and sends those
items again. A running job with nothing left open is finalized by the leader's request
(`Dispatcher._finalize_finished`), not only by its windows' bodies.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from celery import Celery

from checks.fairness import Backlog
from jobs import scheduling
from jobs.driver import Executor, statement_scope
from jobs.scheduling import LiveJob, Ready
from models import session_scope
from workers.allocation import (
    DEFAULT_LATENCY_S,
    ENDPOINTS,
    EXTRA_IN_FLIGHT,
    LEAD_S,
    MIN_IN_FLIGHT,
    QUIET_RECHECK_S,
    Allocation,
    AllocationConfig,
    target_in_flight,
)
from workers.context import WorkerContext
from workers.faults import is_infrastructure_fault
from workers.fitness import (
    CONSUME_HOLD_S,
    FITNESS_KEY,
    MIN_TENURE_S,
    RTT_MARGIN,
    RTT_SLACK_S,
    UNFIT_FOR_S,
    Fitness,
    FitnessConfig,
    keeps_consuming,
    should_step_aside,
    slow_host,
)
from workers.holds import BudgetHolds, HoldsConfig
from workers.hosts import HostWatch, HostWatchConfig
from workers.leadership import (
    LEADER_KEY,
    STEP_ASIDE_HOLD_S,
    TERM_KEY,
    Leadership,
    LeadershipConfig,
    current_term,
    refuse_stale_dispatch,
)
from workers.publishing import Publisher, PublishingConfig, Send
from workers.schedules import ScheduleConfig, ScheduleRun, Schedules
from workers.windows import OpenWindow, WindowBook

# Re-exported: what other modules and tests import from here.
__all__ = [
    "CONSUME_HOLD_S",
    "DEFAULT_LATENCY_S",
    "ENDPOINTS",
    "EPOCH_KEY",
    "EXTRA_IN_FLIGHT",
    "FITNESS_KEY",
    "LEADER_KEY",
    "LEAD_S",
    "MIN_IN_FLIGHT",
    "MIN_TENURE_S",
    "QUIET_RECHECK_S",
    "RTT_MARGIN",
    "RTT_SLACK_S",
    "STEP_ASIDE_HOLD_S",
    "TERM_KEY",
    "UNFIT_FOR_S",
    "Dispatcher",
    "DispatcherConfig",
    "current_term",
    "keeps_consuming",
    "refuse_stale_dispatch",
    "should_step_aside",
    "slow_host",
    "target_in_flight",
]

log = logging.getLogger("factgate.workers")

EPOCH_KEY = "factgate:dispatch:epoch"


@dataclass(frozen=True)
class DispatcherConfig:
    """Each part's config (each validates its own figures). The allocation's comes from the settings
    (FACTGATE_DISPATCH_MAX_IN_FLIGHT, FACTGATE_CHORD_SIZE) unless given."""

    leadership: LeadershipConfig = field(default_factory=LeadershipConfig)
    fitness: FitnessConfig = field(default_factory=FitnessConfig)
    hosts: HostWatchConfig = field(default_factory=HostWatchConfig)
    holds: HoldsConfig = field(default_factory=HoldsConfig)
    allocation: AllocationConfig | None = None
    publishing: PublishingConfig = field(default_factory=PublishingConfig)
    schedules: ScheduleConfig = field(default_factory=ScheduleConfig)


class Dispatcher:
    """The leader-elected loop (`start`/`stop`), and `tick`, one round over every scope (tests call it).

    `send` replaces the sending of one window and `finalize` the request to finalize a job (tests record
    them)."""

    def __init__(
        self,
        ctx: WorkerContext,
        app: Celery,
        *,
        interval_s: float | None = None,
        idle_interval_s: float = 0.1,
        send: Send | None = None,
        finalize: Callable[[uuid.UUID], None] | None = None,
        config: DispatcherConfig | None = None,
    ) -> None:
        self.ctx = ctx
        self.app = app
        settings = ctx.settings
        self.interval_s = interval_s if interval_s is not None else settings.dispatch_interval_s
        self.idle_interval_s = max(idle_interval_s, self.interval_s)
        config = config or DispatcherConfig()
        token = f"{os.getpid()}:{secrets.token_hex(8)}"
        self.leadership = Leadership(ctx.redis, token, config.leadership)
        self.fitness = Fitness(ctx.redis, f"{ctx.leases.name} {token}", config.fitness)
        self.hosts = HostWatch(ctx, config.hosts)
        self.holds = BudgetHolds(ctx, config.holds)
        self.allocation = Allocation(ctx, config.allocation or AllocationConfig.from_settings(settings))
        self.publisher = Publisher(app, config.publishing)
        self.schedules = Schedules(ctx, config.schedules)
        self.windows = WindowBook()
        self.send: Send = send or self._send_chord
        self.finalize = finalize or self.publisher.send_finalize
        self.stepped_aside = 0  # how many times this dispatcher handed the lock over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- what the worker host and tests read ---------------------------------------------------------

    @property
    def leading(self) -> bool:
        return self.leadership.leading

    @property
    def term(self) -> int:
        """This reign's term, carried by every message it sends."""
        return self.leadership.term

    @property
    def rtt_s(self) -> float | None:
        """This host's smoothed round trip to Postgres and Redis (workers/bootsteps.py reads it)."""
        return self.fitness.rtt_s

    @property
    def others_rtt_s(self) -> dict[str, float]:
        """The other live dispatchers' figures."""
        return self.fitness.others_rtt_s

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Dispatcher:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="factgate-dispatcher", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.leadership.release()
        self.fitness.forget()

    def _run(self) -> None:
        while not self._stop.is_set():
            busy = False
            try:
                self.beat_fitness()
                if self.lead():
                    busy = self.tick()
                    self.assess()
            except Exception as exc:
                if is_infrastructure_fault(exc):
                    log.warning("dispatcher: infrastructure fault; trying again shortly", exc_info=True)
                else:
                    log.exception("dispatcher tick failed")
                self._stop.wait(1.0)
                continue
            self._stop.wait(self.interval_s if busy else self.idle_interval_s)

    # --- leadership and fitness --------------------------------------------------------------------

    def lead(self) -> bool:
        """Take or keep the leader lock; True while this process leads. A new reign starts a fresh round."""
        result = self.leadership.lead(others_alive=bool(self.fitness.others_rtt_s))
        if result.new_reign:
            self.allocation.new_round()
            self.fitness.new_reign()
        return result.leading

    def still_leading(self) -> bool:
        """Whether the lock is surely still ours, by this host's monotonic clock since the last renewal."""
        return self.leadership.still_leading()

    def probe_rtt(self) -> float:
        """One round trip to Postgres and one to Redis, in seconds: what every tick pays many times over."""
        started = time.monotonic()
        with self.ctx.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        self.ctx.redis.ping()
        return time.monotonic() - started

    def beat_fitness(self, now: float | None = None) -> None:
        """Every beat: measure the round trip, publish it, and read the other hosts' figures."""
        self.fitness.beat(self.probe_rtt, now)

    def assess(self, now: float | None = None) -> bool:
        """After a tick: track how long this leader has been unfit, and step aside when the rule says so
        (workers/fitness.py:should_step_aside). True when it stepped aside."""
        if not self.leading:
            return False
        moment = time.monotonic() if now is None else now
        assessment = self.fitness.assess(moment - self.leadership.since, moment)
        if not assessment.step_aside:
            return False
        self.step_aside(moment, assessment.fill, assessment.rtt_s)
        return True

    def step_aside(self, now: float, fill: float | None, rtt: float) -> None:
        """Release the lock (if still ours) and leave it to the fitter host for a while."""
        self.leadership.step_aside(now)
        self.fitness.unfit_since = None
        self.stepped_aside += 1
        log.warning(
            "dispatcher: stepping aside (term %d): scopes %s full, round trip %.0f ms; another host's is "
            "%.0f ms",
            self.term,
            "-" if fill is None else f"{fill:.0%}",
            rtt * 1000,
            min(self.fitness.others_rtt_s.values(), default=0.0) * 1000,
        )

    # --- allocation (tests fix the target) ---------------------------------------------------------

    def target(self, endpoint: str) -> int:
        return self.allocation.target(endpoint)

    def batch_of(self, endpoint: str, target: int) -> int:
        return self.allocation.batch_of(endpoint, target)

    # --- one round --------------------------------------------------------------------------------

    def _check_epoch(self) -> None:
        """A vanished epoch key means Redis lost everything, queued messages included: resend them all."""
        rds = self.ctx.redis
        if rds.get(EPOCH_KEY) is not None:
            return
        with session_scope(self.ctx.sessions) as session:
            forgotten = scheduling.forget_stale_dispatches(session, 0.0)
        rds.set(EPOCH_KEY, secrets.token_hex(8), nx=True)
        if forgotten:
            log.warning("dispatcher: Redis lost its state; %d dispatched items will be sent again", forgotten)

    def _statements(self) -> AbstractContextManager[Executor]:
        """What a tick's statements run on. On Postgres a bare connection in autocommit: each statement is
        atomic by itself (the reads need no snapshot in common, and marking is one conditional UPDATE whose
        conditions are what keeps a cancelled job's items from being sent), and a read then costs one round
        trip instead of BEGIN, the read and COMMIT. Elsewhere (SQLite, embedded mode) a session."""
        if self.ctx.engine.dialect.driver == "psycopg":
            return statement_scope(self.ctx.engine)
        return session_scope(self.ctx.sessions)

    def tick(self) -> bool:
        """One round: for each scope with free slots, allocate them fairly and send the picks.

        Returns True while any job is live (the loop then keeps its short interval).
        """
        self._check_epoch()
        now = time.monotonic()
        self.allocation.refresh_latency(now)
        with self._statements() as conn:
            jobs = scheduling.live_jobs(conn)
        self.windows.looked.clear()
        if not jobs:
            self.allocation.new_round()
            self._close_elsewhere()
            return False
        self.holds.refresh(jobs, now)
        self.hosts.refresh(now, lambda: self.fitness.slow_hosts(self.ctx.leases.name))
        weights = {str(j.tenant_id): j.weight for j in jobs}
        by_scope = self.allocation.by_scope(jobs, self.holds.holds)
        for scope, (endpoint, scope_jobs) in by_scope.items():
            if self.allocation.is_quiet(scope, scope_jobs, now):
                continue
            self._dispatch_scope(scope, endpoint, scope_jobs, weights)
        if self.schedules.due(now):
            run = self.schedules.write(
                now,
                jobs,
                weights=weights,
                scopes=self.allocation.scopes,
                holds=self.holds.holds,
                rate=self.allocation.rate,
            )
            self._finalize_finished(jobs, run)
        self.allocation.forget_unlive(set(by_scope))
        self._close_elsewhere()
        return True

    def _finalize_finished(self, jobs: list[LiveJob], run: ScheduleRun) -> None:
        """A running job with nothing left open is finished, but its finalize may wait on a window that
        will not close soon: one whose item's first copy is on a slow, paused or dead host (the copy that
        settled it ran elsewhere) joins only when that copy returns, if ever. Ask for it here, as often as
        the schedule views count what is left, rather than leaving it to the sweep."""
        for job in jobs:
            if job.status == "in_progress" and run.remaining.get(job.id, 0) == 0:
                self.finalize(job.id)

    def _close_elsewhere(self) -> None:
        """Close the windows of scopes this tick did not look at (a held tenant's, one whose jobs ended, a
        tick cut short), then send the bodies of every window closed this tick."""
        for scope in self.windows.unlooked():
            if not self.still_leading():
                break
            with self._statements() as conn:
                self.windows.close(
                    scope, {item for item, _running in scheduling.in_flight_items(conn, scope)}
                )
        self.publisher.send_bodies(self.windows.take_closed())

    def _dispatch_scope(
        self, scope: str, endpoint: str, jobs: list[LiveJob], weights: Mapping[str, float]
    ) -> int:
        if not self.still_leading():
            return 0  # the lock may have lapsed during this tick (a pause, a stall): mark nothing
        with self._statements() as session:
            target = self.target(endpoint)
            flights = scheduling.in_flight_items(session, scope)
            self.windows.looked.add(scope)
            self.windows.close(scope, {item for item, _running in flights})
            # A silent or slow host's running items take no slot (workers/hosts.py).
            lost = self.hosts.lost
            flying = sum(1 for item, running in flights if not (running and item in lost))
            free = target - flying
            # An unlimited scope sends in batches (`batch_of`): nothing paces it but the in-flight bound,
            # so topping it up every tick only made many small windows.
            batch = self.batch_of(endpoint, target)
            if free <= 0 or (flying > 0 and free < batch):
                self.fitness.note_fill(flying + batch - 1, target, backlogged=True)
                return 0
            # One more than can be sent: a job that gets every free slot and still has work must not look
            # drained to the policy, or it would leave its round and lose the rest of its quantum (its
            # weight would then count for nothing while slots come one or two at a time).
            ready = scheduling.ready_items(session, [j.id for j in jobs], endpoint, free + 1)
            self.fitness.note_fill(
                flying + batch - 1, target, backlogged=sum(len(r) for r in ready.values()) > free
            )
            backlogs = [
                Backlog(
                    job_id=str(j.id),
                    tenant=str(j.tenant_id),
                    priority=j.priority,
                    ready=len(ready[j.id]),
                    order=j.order,
                )
                for j in jobs
                if ready.get(j.id)
            ]
            grant = self.allocation.allocate(scope, backlogs, weights, free)
            if not backlogs:
                if flying == 0:
                    self.allocation.note_quiet(scope, jobs)
                return 0
            picks: dict[uuid.UUID, list[Ready]] = {}
            for job_key, n in grant.items():
                job_id = uuid.UUID(job_key)
                picks[job_id] = ready[job_id][:n]
            marked = scheduling.mark_dispatched(session, [r.id for rs in picks.values() for r in rs], scope)
            queued = {j.id for j in jobs if j.status == "queued"}  # a job in progress needs no write
            scheduling.mark_started(
                session, [j for j, rs in picks.items() if j in queued and any(r.id in marked for r in rs)]
            )
        size = self.allocation.config.window
        windows: list[tuple[uuid.UUID, list[Ready]]] = []
        for job_id, items in picks.items():
            mine = [r for r in items if r.id in marked]
            windows += [(job_id, mine[i : i + size]) for i in range(0, len(mine), size)]
        return self._send_windows(windows, scope)

    def _send_windows(self, windows: list[tuple[uuid.UUID, list[Ready]]], scope: str) -> int:
        """Send the tick's windows of a scope in one batch, if this process surely still leads. If sending
        fails, the windows' items are dispatchable again (any message that did go out finds its item
        already taken or done: claims are conditional)."""
        if not windows:
            return 0
        if not self.still_leading():
            # Marked while leading, but the lock may have passed on since: send nothing, undo the marks.
            self._forget(windows)
            log.warning("dispatcher: the lock may have lapsed; %d windows not sent", len(windows))
            return 0
        try:
            self.publisher.send_windows(windows, self.send)
        except Exception:
            log.warning("dispatcher: could not send %d windows", len(windows), exc_info=True)
            self._forget(windows)
            return 0
        now = time.monotonic()
        for job_id, window in windows:
            self.schedules.note_sent(now, job_id, len(window))
            if self.publisher.closes_windows:
                questions = tuple(sorted({r.parent_id for r in window if r.parent_id is not None}))
                self.windows.add(scope, OpenWindow(job_id, questions, frozenset(r.id for r in window)))
        return sum(len(window) for _job, window in windows)

    def _forget(self, windows: list[tuple[uuid.UUID, list[Ready]]]) -> None:
        with session_scope(self.ctx.sessions) as session:
            scheduling.forget_dispatches(session, [r.id for _job, window in windows for r in window])

    def _send_chord(self, job_id: uuid.UUID, window: list[Ready], producer: object) -> None:
        self.publisher.send_chord(job_id, window, producer, self.term)
