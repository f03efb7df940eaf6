"""The dispatcher: one loop per deployment that decides which items reach the upstream next.

Why it exists: the upstream is one scarce resource per key and endpoint (a scope), shared by every tenant
and job. With a FIFO broker holding whole windows of a big job, a small job waited minutes behind it, and a
cancel waited for the windows already queued. Here the database decides the order and the broker holds
little: for each scope the dispatcher keeps only about as many items in flight as keep that scope's rate
limit busy (its rate × the observed upstream latency, plus a little lead, bounded), and whenever slots free
up it lets `checks.fairness.allocate` — weighted deficit round robin over tenants, then priority classes,
then jobs — pick which jobs the next items come from. Each job's picks go out as one small chord of
`run_item` tasks whose body (`after_window`) moves the job's questions on and finalizes it when done.

One dispatcher leads at a time: every worker process runs this loop, and a Redis lock with a short expiry
elects the leader, so a killed worker's loop is replaced within seconds. The fairness state lives in the
leader's memory; a new leader starts a fresh round, which costs nothing but one round of perfect fairness.
Redis stays a hint: an epoch key that vanishes (Redis flushed or restarted empty) means every queued
message is gone, so the leader forgets every pending dispatch at once and sends those items again.

Scopes never block each other: each has its own bound, so a burst of Agent work can hold at most its own
scope's few items and threads, and Decisions work keeps flowing beside it.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from celery import Celery, chord
from celery.backends.redis import RedisBackend

from checks.fairness import Backlog, FairState, allocate, shares, wait_bounds
from jobs import scheduling
from jobs.quotas import Hold
from jobs.quotas import holds as scheduling_holds
from jobs.scheduling import LiveJob, Ready
from models import session_scope, utcnow
from workers.context import WorkerContext
from workers.faults import is_infrastructure_fault
from workers.limiter import scope_for, with_headroom

log = logging.getLogger("factgate.workers")

ENDPOINTS = ("decisions", "agent", "search")
LEADER_KEY = "factgate:dispatch:leader"
EPOCH_KEY = "factgate:dispatch:epoch"
LEADER_TTL_MS = 5_000
# Time from dispatch to the POST (broker hop, claim, limiter hand-off, a hold at the wire gate): items in
# flight beyond rate × latency so that a slot never opens with nobody ready to take it. 0.5 s left the
# limiter with nobody waiting for up to a second at a time on a 2-core host kept busy by two CPU hogs
# (bench/at_limit.py --cpu-hog 2: gaps of 0.9-1.1 s, ratios 0.90-0.97); 1.0 s kept the largest gaps at
# 0.25-0.5 s. It costs one more second of work in flight: a cancel or a newcomer's first call waits for it.
LEAD_S = 1.0
EXTRA_IN_FLIGHT = 2
MIN_IN_FLIGHT = 2
LATENCY_REFRESH_S = 2.0
SCHEDULE_REFRESH_S = 2.0
HOLDS_REFRESH_S = 2.0  # how often budgeted tenants' spend is summed (a budget reached mid-run holds work)
RATE_WINDOW_S = 20.0
DEFAULT_LATENCY_S = 1.0

# Renew the lock only if we still hold it (compare-and-expire in one step).
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


def target_in_flight(rate_per_s: float, latency_s: float, max_in_flight: int) -> int:
    """How many items a scope keeps in flight: enough that a slot never opens with nobody ready for it.

    At `rate` requests/s with `latency` s each, rate × latency requests are in the air at once; LEAD_S more
    seconds of work cover the hop from dispatch to POST, and a couple more absorb jitter. An unlimited scope
    (rate ≤ 0) is bounded by `max_in_flight` alone. Never more than `max_in_flight`: the broker holds little.
    """
    if rate_per_s <= 0:
        return max_in_flight
    need = math.ceil(rate_per_s * (max(latency_s, 0.0) + LEAD_S)) + EXTRA_IN_FLIGHT
    return max(MIN_IN_FLIGHT, min(max_in_flight, need))


@dataclass
class _Scope:
    """What the leader keeps per scope between ticks."""

    state: FairState = field(default_factory=FairState)
    last_backlogs: list[Backlog] = field(default_factory=list)


class Dispatcher:
    """The leader-elected loop (`start`/`stop`), and `tick`, one round over every scope (tests call it)."""

    def __init__(
        self,
        ctx: WorkerContext,
        app: Celery,
        *,
        interval_s: float | None = None,
        idle_interval_s: float = 0.1,
        send: Callable[[uuid.UUID, list[Ready], Any], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.app = app
        settings = ctx.settings
        self.interval_s = interval_s if interval_s is not None else settings.dispatch_interval_s
        self.idle_interval_s = max(idle_interval_s, self.interval_s)
        self.max_in_flight = settings.dispatch_max_in_flight
        self.window = max(1, settings.chord_size)
        self._send = send or self._send_chord
        self._token = secrets.token_hex(8)
        self._scopes: dict[str, _Scope] = {}
        self._latency: dict[str, float] = {}
        self._latency_at = 0.0
        self._schedule_at = 0.0
        self._holds: dict[uuid.UUID, Hold] = {}
        self._holds_at = 0.0
        self._sent: deque[tuple[float, uuid.UUID, int]] = deque()  # (monotonic time, job, items) for rates
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renew = ctx.redis.register_script(_RENEW)
        self.leading = False
        # An item task returns nothing anyone reads: its outcome is in the database. Storing it cost a
        # GET, a SET and a PUBLISH per item. The Redis backend joins a chord from the header's own
        # returns (its chord counter), so there the results need not be stored (`ignore_result`); the
        # in-memory backend of embedded mode joins by reading each stored result, so there they must be.
        self._redis_backend = isinstance(app.backend, RedisBackend)

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
        if self.leading:
            try:
                if self.ctx.redis.get(LEADER_KEY) == self._token.encode():
                    self.ctx.redis.delete(LEADER_KEY)
            except Exception:
                log.debug("could not release the dispatcher lock", exc_info=True)
        self.leading = False

    def _run(self) -> None:
        while not self._stop.is_set():
            busy = False
            try:
                if self.lead():
                    busy = self.tick()
            except Exception as exc:
                if is_infrastructure_fault(exc):
                    log.warning("dispatcher: infrastructure fault; trying again shortly", exc_info=True)
                else:
                    log.exception("dispatcher tick failed")
                self._stop.wait(1.0)
                continue
            self._stop.wait(self.interval_s if busy else self.idle_interval_s)

    def lead(self) -> bool:
        """Take or keep the leader lock; True while this process leads."""
        rds = self.ctx.redis
        if self.leading and self._renew(keys=[LEADER_KEY], args=[self._token, LEADER_TTL_MS]):
            return True
        self.leading = bool(rds.set(LEADER_KEY, self._token, nx=True, px=LEADER_TTL_MS))
        if self.leading:
            self._scopes.clear()  # a new reign starts a fresh round
            log.info("dispatcher: this worker now leads")
        return self.leading

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

    def _rate(self, endpoint: str) -> float:
        """The rate the limiter grants in a scope of this endpoint (the configured rate less its headroom)."""
        return with_headroom(self.ctx.rate_for(endpoint), self.ctx.settings.limiter_headroom)

    def _refresh_latency(self, now: float) -> None:
        if now - self._latency_at < LATENCY_REFRESH_S and self._latency:
            return
        with self.ctx.sessions() as session:
            for endpoint in ENDPOINTS:
                observed = scheduling.observed_latency_s(session, endpoint)
                if observed is not None:
                    self._latency[endpoint] = observed
        self._latency_at = now

    def target(self, endpoint: str) -> int:
        latency = self._latency.get(endpoint, DEFAULT_LATENCY_S)
        return target_in_flight(self._rate(endpoint), latency, self.max_in_flight)

    def scope_of(self, job: LiveJob, endpoint: str) -> str:
        """The rate-limit scope a job's items of `endpoint` use: its tenant's own key if it has one (its own
        rate limit, and its own fair share among that key's jobs), else the operator's."""
        if job.key_fingerprint:
            return f"{job.key_fingerprint}:{endpoint}"
        return scope_for(self.ctx.settings.perplexity_api_key, endpoint)

    def _refresh_holds(self, jobs: list[LiveJob], now: float) -> None:
        """Which budgeted tenants have spent their budget (their work waits; nothing fails)."""
        if now - self._holds_at < HOLDS_REFRESH_S:
            return
        budgeted = sorted({j.tenant_id for j in jobs if j.budgeted})
        with self.ctx.sessions() as session:
            self._holds = scheduling_holds(session, budgeted, utcnow())
        self._holds_at = now

    def tick(self) -> bool:
        """One round: for each scope with free slots, allocate them fairly and send the picks.

        Returns True while any job is live (the loop then keeps its short interval).
        """
        self._check_epoch()
        now = time.monotonic()
        self._refresh_latency(now)
        with self.ctx.sessions() as session:
            jobs = scheduling.live_jobs(session)
        if not jobs:
            self._scopes.clear()
            return False
        self._refresh_holds(jobs, now)
        weights = {str(j.tenant_id): j.weight for j in jobs}
        by_scope: dict[str, tuple[str, list[LiveJob]]] = {}
        for endpoint in ENDPOINTS:
            for job in jobs:
                if job.tenant_id in self._holds:
                    continue  # held: its items stay pending until the budget resets or is raised
                scope = self.scope_of(job, endpoint)
                by_scope.setdefault(scope, (endpoint, []))[1].append(job)
        for scope, (endpoint, scope_jobs) in by_scope.items():
            self._dispatch_scope(scope, endpoint, scope_jobs, weights)
        if now - self._schedule_at >= SCHEDULE_REFRESH_S:
            self._write_schedules(jobs, weights)
            self._schedule_at = now
        # Forget scopes with no live job (bounded memory).
        live_scopes = set(by_scope)
        for scope in list(self._scopes):
            if scope not in live_scopes:
                del self._scopes[scope]
        return True

    def _dispatch_scope(
        self, scope: str, endpoint: str, jobs: list[LiveJob], weights: Mapping[str, float]
    ) -> int:
        with session_scope(self.ctx.sessions) as session:
            free = self.target(endpoint) - scheduling.in_flight(session, scope)
            if free <= 0:
                return 0
            # One more than can be sent: a job that gets every free slot and still has work must not look
            # drained to the policy, or it would leave its round and lose the rest of its quantum (its
            # weight would then count for nothing while slots come one or two at a time).
            ready = scheduling.ready_items(session, [j.id for j in jobs], endpoint, free + 1)
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
            slot = self._scopes.setdefault(scope, _Scope())
            slot.last_backlogs = backlogs
            if not backlogs:
                return 0
            grant = allocate(backlogs, weights, free, slot.state)
            picks: dict[uuid.UUID, list[Ready]] = {}
            for job_key, n in grant.items():
                job_id = uuid.UUID(job_key)
                picks[job_id] = ready[job_id][:n]
            marked = scheduling.mark_dispatched(session, [r.id for rs in picks.values() for r in rs], scope)
            queued = {j.id for j in jobs if j.status == "queued"}  # a job in progress needs no write
            scheduling.mark_started(
                session, [j for j, rs in picks.items() if j in queued and any(r.id in marked for r in rs)]
            )
        windows: list[tuple[uuid.UUID, list[Ready]]] = []
        for job_id, items in picks.items():
            mine = [r for r in items if r.id in marked]
            windows += [(job_id, mine[i : i + self.window]) for i in range(0, len(mine), self.window)]
        return self._send_windows(windows)

    def _send_windows(self, windows: list[tuple[uuid.UUID, list[Ready]]]) -> int:
        """Send every window's chord in one producer batch: on Redis all their messages go out in one
        pipeline (one round trip per tick instead of one per item; transports without batches send each
        message at once). If sending fails, the windows' items are dispatchable again (any message that did
        go out finds its item already taken or done: claims are conditional)."""
        if not windows:
            return 0
        try:
            with self.app.producer_or_acquire() as producer, producer.batch():
                for job_id, window in windows:
                    self._send(job_id, window, producer)
        except Exception:
            log.warning("dispatcher: could not send %d windows", len(windows), exc_info=True)
            with session_scope(self.ctx.sessions) as session:
                scheduling.forget_dispatches(session, [r.id for _job, window in windows for r in window])
            return 0
        now = time.monotonic()
        for job_id, window in windows:
            self._sent.append((now, job_id, len(window)))
        return sum(len(window) for _job, window in windows)

    def _send_chord(self, job_id: uuid.UUID, window: list[Ready], producer: Any = None) -> None:
        """One chord per window: the items, then `after_window` with the questions they belong to.

        On Redis the chord is sent as its parts: the chord's size for the backend's counter, then each item
        task carrying the body, its group and its place in it — what `chord()` sends there, since the Redis
        backend's `apply_chord` stores nothing for plain tasks. `chord()` itself costs almost twice as much
        per item (it builds a group, freezes every signature and subscribes to every task's result, which
        item tasks never store) and does not pass a producer on, so its messages could not join the tick's
        batch. Other backends (embedded mode's) join on a saved group, so they get `chord()`."""
        body = self.app.signature(
            "factgate.after_window",
            args=(str(job_id), sorted({r.parent_id for r in window if r.parent_id is not None})),
            immutable=True,
        )
        if not self._redis_backend:
            chord([self.app.signature("factgate.run_item", args=(r.id,), immutable=True) for r in window])(
                body
            )
            return
        group_id = str(uuid.uuid4())
        self.app.backend.set_chord_size(group_id, len(window))
        for index, r in enumerate(window):
            self.app.send_task(
                "factgate.run_item",
                args=(r.id,),
                group_id=group_id,
                group_index=index,
                # The chord's body, as Celery's own group sends it (celery-types says `chord`).
                chord=body,  # type: ignore[arg-type]
                ignore_result=True,
                producer=producer,
                add_to_parent=False,
            )

    # --- what status pages show ------------------------------------------------------------------

    def _job_rates(self) -> dict[uuid.UUID, float]:
        """Items per second dispatched per job over the last RATE_WINDOW_S (≈ its completion rate)."""
        horizon = time.monotonic() - RATE_WINDOW_S
        while self._sent and self._sent[0][0] < horizon:
            self._sent.popleft()
        totals: dict[uuid.UUID, int] = {}
        for _t, job_id, n in self._sent:
            totals[job_id] = totals.get(job_id, 0) + n
        return {job_id: n / RATE_WINDOW_S for job_id, n in totals.items()}

    def _write_schedules(self, jobs: list[LiveJob], weights: Mapping[str, float]) -> None:
        """Each live job's share of its busiest scope, the rate that gives it, and when it should end."""
        observed = self._job_rates()
        views: dict[uuid.UUID, dict[str, Any]] = {}
        with self.ctx.sessions() as session:
            remaining = scheduling.remaining_items(session, [j.id for j in jobs])
        stamp = utcnow()
        for job in jobs:
            key = str(job.id)
            hold = self._holds.get(job.tenant_id)
            if hold is not None:
                views[job.id] = {
                    "state": "held",
                    "held_reason": hold.reason,
                    "quota": hold.quota,
                    "resumes_at": hold.resumes_at.isoformat(),
                    "remaining": remaining.get(job.id, 0),
                    "share": 0.0,
                    "rate_per_s": 0.0,
                    "eta_s": None,
                    "estimated_completion_at": None,
                    "estimated_start_at": hold.resumes_at.isoformat(),
                    "updated_at": stamp.isoformat(),
                }
                continue
            share = 0.0
            scope_rate = 0.0
            start_in: float | None = None
            endpoint_used: str | None = None
            for scope, slot in self._scopes.items():
                if not any(b.job_id == key for b in slot.last_backlogs):
                    continue
                endpoint = scope.rsplit(":", 1)[-1]
                job_share = shares(slot.last_backlogs, weights).get(key, 0.0)
                if job_share >= share:
                    share, endpoint_used = job_share, endpoint
                    scope_rate = self._rate(endpoint)
                    if job.status == "queued" and scope_rate > 0:
                        start_in = wait_bounds(slot.last_backlogs, weights).get(key, 0) / scope_rate
            rate = max(observed.get(job.id, 0.0), share * scope_rate)
            left = remaining.get(job.id, 0)
            eta = left / rate if rate > 0 else None
            views[job.id] = {
                "state": "running" if job.status == "in_progress" else "waiting",
                "endpoint": endpoint_used,
                "share": round(share, 4),
                "rate_per_s": round(rate, 3),
                "remaining": left,
                "eta_s": None if eta is None else round(eta, 1),
                "estimated_completion_at": None
                if eta is None
                else (stamp + timedelta(seconds=eta)).isoformat(),
                "estimated_start_at": None
                if start_in is None
                else (stamp + timedelta(seconds=start_in)).isoformat(),
                "updated_at": stamp.isoformat(),
            }
        with session_scope(self.ctx.sessions) as session:
            scheduling.store_schedules(session, views)
