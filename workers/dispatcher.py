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
elects the leader, so a killed worker's loop is replaced within seconds.

A leader can lose its lock without knowing it: paused (SIGSTOP, a long stall), cut off, or with its wall
clock off. So leadership is fenced. Each reign has a term, taken with the lock in one script and larger
than every earlier one (at least Redis's own TIME in ms, so a Redis restarted empty still moves it on);
the lock's expiry is Redis's arithmetic, and the leader counts its own validity from before the call that
took or renewed the lock on its monotonic clock, never its wall clock (`still_leading`). A tick re-checks
before it marks and before it sends, and undoes its marks when the lock may have lapsed meanwhile. Every
`run_item` it sends carries the term (`epoch`), and a worker refuses a message of an older term
(`refuse_stale_dispatch`): the item's dispatch is forgotten, and the current leader sends it again.

The fairness state lives in the leader's memory; a new leader starts a fresh round, which costs nothing
but one round of perfect fairness. Redis stays a hint: an epoch key that vanishes (Redis flushed or
restarted empty) means every queued message is gone, so the leader forgets every pending dispatch at once
and sends those items again.

A leader can also be alive and unfit: on a slow link (or a starved host) its ticks take long, the
scopes drain between them, and the deployment runs below its limit although another host could keep it
full. So every dispatcher beats a fitness figure into Redis (`FITNESS_KEY`, every FITNESS_BEAT_S): the
round trip of one `SELECT 1` and one Redis call, smoothed. The leader also records how full it finds each
backlogged scope at the start of a tick (in flight / target: a healthy leader, ticking every 50 ms, finds
it nearly full; a slow one finds it drained). It steps aside (`should_step_aside`) — releases the lock,
and for STEP_ASIDE_HOLD_S takes it again only if no other live host remains — when all of: it has led
for MIN_TENURE_S; it has been unfit (fill below UNFIT_FILL or its round trip above SLOW_RTT_S) for
UNFIT_FOR_S without a fit moment between (fit again only at FIT_FILL and half of SLOW_RTT_S: a margin, so
that a figure hovering at the line does not count as recovered); and another host's fresh figure is at
most 1/RTT_MARGIN of its own (less RTT_SLACK_S). The margin and the tenure keep the lock from flapping:
the new leader's round trip is far below the old one's, so the old one is never the fitter of the two.

Scopes never block each other: each has its own bound, so a burst of Agent work can hold at most its own
scope's few items and threads, and Decisions work keeps flowing beside it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from celery import Celery, chord
from celery.backends.redis import RedisBackend

from checks.fairness import Backlog, FairState, allocate, shares, wait_bounds
from jobs import scheduling
from jobs.driver import Executor, statement_scope
from jobs.quotas import Hold
from jobs.quotas import holds as scheduling_holds
from jobs.scheduling import LiveJob, Ready
from jobs.sweeper import redrive_abandoned
from models import session_scope, utcnow
from workers.api import DEFAULT_QUEUE
from workers.context import WorkerContext
from workers.faults import is_infrastructure_fault
from workers.leases import (
    HOST_DEAD_S,
    HOST_SILENT_S,
    REDRIVE_GRACE_S,
    beating_items,
    host_items,
    silent_hosts,
)
from workers.limiter import scope_for, with_headroom

log = logging.getLogger("factgate.workers")

ENDPOINTS = ("decisions", "agent", "search")
LEADER_KEY = "factgate:dispatch:leader"
EPOCH_KEY = "factgate:dispatch:epoch"
TERM_KEY = "factgate:dispatch:term"
# Short, so that another host leads within a few seconds of the leader going silent; the lock is renewed
# every loop (50 ms while busy), so only a leader stalled for seconds loses it.
LEADER_TTL_MS = 2_000
FENCE_MARGIN_S = 0.5  # a leader stops sending this long before its lock could have expired
TERM_CACHE_S = 0.25  # how long a worker trusts the term it read (one Redis GET per item otherwise)
# Time from dispatch to the POST (broker hop, claim, limiter hand-off, a hold at the wire gate): items in
# flight beyond rate × latency so that a slot never opens with nobody ready to take it. 0.5 s left the
# limiter with nobody waiting for up to a second at a time on a 2-core host kept busy by two CPU hogs
# (bench/at_limit.py --cpu-hog 2: gaps of 0.9-1.1 s, ratios 0.90-0.97); 1.0 s kept the largest gaps at
# 0.25-0.5 s. It costs one more second of work in flight: a cancel or a newcomer's first call waits for it.
LEAD_S = 1.0
EXTRA_IN_FLIGHT = 2
MIN_IN_FLIGHT = 2
LATENCY_REFRESH_S = 2.0
QUIET_RECHECK_S = 0.25  # a scope found empty is looked at again after this long (Dispatcher._quiet)
SCHEDULE_REFRESH_S = 2.0
HOLDS_REFRESH_S = 2.0  # how often budgeted tenants' spend is summed (a budget reached mid-run holds work)
RATE_WINDOW_S = 20.0
HOSTS_REFRESH_S = 0.5  # how often the leader looks for silent hosts (workers/leases.py)
DEAD_REFRESH_S = 2.0  # how often it looks for dead ones (their running items re-driven)
DEFAULT_LATENCY_S = 1.0
# The most the reused share raises a scope's item rate by: 1 / (1 - 0.95) = 20 times (then max_in_flight).
MAX_REUSED_SHARE = 0.95
# Leader fitness (the module docstring): each dispatcher's round-trip figure, beaten into Redis.
# hash: "host name (workers/leases.py) lock token" -> "round trip in µs:Redis time in ms"
FITNESS_KEY = "factgate:dispatch:fitness"
FITNESS_BEAT_S = 0.5
FITNESS_FRESH_S = 2.0  # an older figure is a silent host's (HOST_SILENT_S): not a candidate
FITNESS_WINDOW_S = 3.0  # the fill figure is the mean over this window of ticks
RTT_SMOOTHING = 0.5  # weight of the newest probe in the smoothed round trip
UNFIT_FILL = 0.7  # a backlogged scope found less full than this at a tick's start: the leader lags
FIT_FILL = 0.85  # ... and fit again only above this (hysteresis)
SLOW_RTT_S = 0.25  # a round trip to Postgres and Redis slower than this: the leader's link is slow
UNFIT_FOR_S = 2.0  # unfit this long without a fit moment before stepping aside
MIN_TENURE_S = 10.0  # a reign lasts at least this long (no flapping)
RTT_MARGIN = 2.0  # the other host's round trip must be at most half the leader's ...
RTT_SLACK_S = 0.02  # ... less this (two near-zero figures are equally fit)
STEP_ASIDE_HOLD_S = 30.0  # after stepping aside, take the lock only when no other live host beats

# Take the lock and open a new term in one step: the term exceeds every earlier one and Redis's clock in ms
# (so it keeps growing across a Redis that restarted empty). 0 when another process holds the lock.
_TAKE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local term = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now)
redis.call('SET', KEYS[2], term)
return term
"""
_term_seen: tuple[float, int] = (-1e9, 0)  # (monotonic time, term): a worker process's latest read


def current_term(rds: Any, max_age_s: float = TERM_CACHE_S) -> int:
    """The term of the reign now (0 if none yet), read at most every `max_age_s`."""
    global _term_seen  # noqa: PLW0603 - one small cache per process, replaced whole
    now = time.monotonic()
    if now - _term_seen[0] >= max_age_s:
        raw = rds.get(TERM_KEY)
        _term_seen = (now, int(raw) if raw is not None else 0)
    return _term_seen[1]


def refuse_stale_dispatch(
    ctx: WorkerContext, item_id: int, epoch: int | None, max_age_s: float = TERM_CACHE_S
) -> bool:
    """True (and the item's dispatch forgotten, so the current leader sends it again) when a `run_item`
    message comes from an older reign than the current one: a leader that lost its lock while paused or
    cut off sends nothing that counts. Messages without a term (sent before this check existed) pass."""
    if epoch is None or epoch >= current_term(ctx.redis, max_age_s):
        return False
    with session_scope(ctx.sessions) as session:
        scheduling.forget_dispatches(session, [item_id])
    log.warning("item %s: dispatched in term %s, an older one than the current; refused", item_id, epoch)
    return True


# Record this dispatcher's figure with Redis's clock; return every fresh figure (token, round trip in µs),
# dropping stale ones on the way.
_FITNESS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. now)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  local sep = string.find(v, ':', 1, true)
  local at = sep and tonumber(string.sub(v, sep + 1)) or 0
  if now - at > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = string.sub(v, 1, sep - 1)
  end
end
return out
"""
# Release the lock only if we still hold it (compare-and-delete in one step).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def should_step_aside(
    *,
    tenure_s: float,
    unfit_for_s: float | None,
    own_rtt_s: float,
    others_rtt_s: list[float],
    min_tenure_s: float = MIN_TENURE_S,
    unfit_window_s: float = UNFIT_FOR_S,
) -> bool:
    """The leader's rule for handing the lock over (module docstring): led long enough, unfit for long
    enough, and another live host clearly fitter — by a margin, so that the new leader never finds the old
    one fitter than itself and the lock does not go back and forth. `unfit_for_s` is None while fit."""
    if tenure_s < min_tenure_s or unfit_for_s is None or unfit_for_s < unfit_window_s:
        return False
    if not others_rtt_s:
        return False  # nobody to hand over to: a slow leader is better than none
    return min(others_rtt_s) * RTT_MARGIN <= own_rtt_s - RTT_SLACK_S


def slow_host(rtt_s: float, leader_rtt_s: float) -> bool:
    """Whether a host's round trip makes it slow beside the leader's: above the fit bound (half of
    SLOW_RTT_S) and by the step-aside margin — the figure by which a leader would hand the lock to this
    one, reversed, so a host is never both the fitter and the slow one."""
    return rtt_s > SLOW_RTT_S / 2 and leader_rtt_s * RTT_MARGIN <= rtt_s - RTT_SLACK_S


# A worker host that finds itself slow beside another live host stops taking task messages this long.
CONSUME_HOLD_S = 30.0


def keeps_consuming(
    own_rtt_s: float | None,
    others_rtt_s: list[float],
    paused_for_s: float | None,
    hold_s: float = CONSUME_HOLD_S,
) -> bool:
    """Whether a worker host takes task messages (workers/bootsteps.py:ConsumeWhileFitStep).

    Why: a host on a slow link keeps taking messages and runs each for seconds (its round trips to
    Postgres, Redis and the upstream queue behind its own traffic), so the items it holds finish late and,
    whenever the leader does not count them as a slow host's, keep the scope below its rate. So a host
    whose own figure is slow beside the fittest other live host's (`slow_host`, the leader's rule for the
    slow hosts whose items take no slot) stops consuming, finishes what it holds, and leaves new work to
    the others for at least `hold_s`: an idle slow link looks fast (nothing queues behind the probe), so
    resuming as soon as the figure drops would take a full prefetch again within a second. It consumes
    again after the hold once it is not slow, and at once when no other host has a fresh figure (the
    others are gone: a slow host is better than none). By the margin in `slow_host` two hosts are never
    slow beside each other, so the fittest host always consumes. `paused_for_s` is None while consuming.
    """
    if own_rtt_s is None or not others_rtt_s:
        return True
    slow = slow_host(own_rtt_s, min(others_rtt_s))
    if paused_for_s is None:
        return not slow
    return paused_for_s >= hold_s and not slow


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


@dataclass(frozen=True)
class _OpenWindow:
    """A window the leader sent (server mode): its job, the questions its items belong to, and its items.

    Why the leader closes windows itself: Celery's chord on Redis ran the backend's chord script on every
    item's way out (a result nobody reads encoded, a uuid, a Lua script over six keys) and carried the body
    in every message; a window's own Redis counter still cost each item an INCR. The leader reads each
    scope's items in flight at every tick anyway (to count them), so a window whose items have all left
    flight — settled, or given back for a later try — is closed there, and its body, `after_window(job,
    questions)`, goes out with the tick: nothing per item. A window sent by an earlier leader is closed by
    nobody; the leader's finalize of jobs with nothing open (`_write_schedules`, every SCHEDULE_REFRESH_S)
    and the sweep's advance of stalled questions do its work, as they did for a counter lost with Redis.
    """

    job_id: uuid.UUID
    questions: tuple[int, ...]
    items: frozenset[int]


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
        finalize: Callable[[uuid.UUID], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.app = app
        settings = ctx.settings
        self.interval_s = interval_s if interval_s is not None else settings.dispatch_interval_s
        self.idle_interval_s = max(idle_interval_s, self.interval_s)
        self.max_in_flight = settings.dispatch_max_in_flight
        self.window = max(1, settings.chord_size)
        self._send = send or self._send_chord
        self._finalize = finalize or self._send_finalize
        # The lock's value names the process that holds it (its pid first), so an operator — or the
        # multi-host drill, scripts/drill/ — can tell which host leads.
        self._token = f"{os.getpid()}:{secrets.token_hex(8)}"
        self._scopes: dict[str, _Scope] = {}
        self._latency: dict[str, float] = {}
        self._reused: dict[str, float] = {}
        self._latency_at = 0.0
        self._schedule_at = 0.0
        self._holds: dict[uuid.UUID, Hold] = {}
        self._holds_at = 0.0
        self._sent: deque[tuple[float, uuid.UUID, int]] = deque()  # (monotonic time, job, items) for rates
        # Items of silent hosts (workers/leases.py): their running ones take no slot; refreshed every
        # HOSTS_REFRESH_S, with the hosts already seen silent (their not-started items were sent again).
        self._lost: set[int] = set()
        self._lost_hosts: set[str] = set()
        self._lost_at = 0.0
        self._dead_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renew = ctx.redis.register_script(_RENEW)
        self._take = ctx.redis.register_script(_TAKE)
        self._release = ctx.redis.register_script(_RELEASE)
        self._fitness = ctx.redis.register_script(_FITNESS)
        # Fitness (module docstring); the thresholds are attributes so that a test can shorten them.
        self.min_tenure_s = MIN_TENURE_S
        self.unfit_for_s = UNFIT_FOR_S
        self.hold_s = STEP_ASIDE_HOLD_S
        self.rtt_s: float | None = None  # this host's smoothed round trip to Postgres and Redis
        self.others_rtt_s: dict[str, float] = {}  # the other live dispatchers' figures, by `_field`
        # This dispatcher's name in FITNESS_KEY: its process's host name (whose beat lists its items) and
        # its lock token (two dispatchers of one process, as in tests, are two candidates).
        self._field = f"{ctx.leases.name} {self._token}"
        self._slow_hosts: set[str] = set()
        self._fitness_at = -1e9
        self._fills: deque[tuple[float, float]] = deque()  # (monotonic time, in flight / target)
        self._unfit_since: float | None = None
        self._since = 0.0  # monotonic: when this reign began
        self._held_off_until = 0.0  # monotonic: after stepping aside, leave the lock to the others
        self.stepped_aside = 0  # how many times this dispatcher handed the lock over
        self.leading = False
        self.term = 0  # this reign's term, carried by every message it sends
        self._valid_until = 0.0  # monotonic: until then the lock cannot have expired
        # An item task returns nothing anyone reads: its outcome is in the database. Storing it cost a
        # GET, a SET and a PUBLISH per item. On Redis this loop closes the windows itself (`_OpenWindow`),
        # so there the results need not be stored (`ignore_result`); the in-memory backend of embedded
        # mode joins a chord by reading each stored result, so there they must be.
        self._redis_backend = isinstance(app.backend, RedisBackend)
        # The windows sent and not closed yet, by scope (Redis backend only; `_close_windows`).
        self._windows: dict[str, list[_OpenWindow]] = {}
        self._closed: list[_OpenWindow] = []  # closed this tick; their bodies go out at its end
        self._looked: set[str] = set()  # scopes whose items in flight this tick read
        self._template: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None = None
        # Scopes found with nothing in flight and nothing ready (a claims job has no Agent or Search items):
        # scope -> (monotonic time to look again, the live jobs then). Looking at each every tick cost two
        # queries per empty scope, 20 times a second: at the ceiling (bench/ceiling.py) a third of the
        # dispatcher's CPU. A new job in the scope ends the wait at once; an existing job's new items of
        # that endpoint (a staged kind's next stage) wait at most QUIET_RECHECK_S.
        self._quiet: dict[str, tuple[float, frozenset[uuid.UUID]]] = {}

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
        with contextlib.suppress(Exception):
            self.ctx.redis.hdel(FITNESS_KEY, self._field)  # a stopped host is no candidate

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

    def lead(self) -> bool:
        """Take or keep the leader lock; True while this process leads."""
        asked = time.monotonic()  # before the call: Redis starts the expiry later than this, never sooner
        if self.leading and self._renew(keys=[LEADER_KEY], args=[self._token, LEADER_TTL_MS]):
            self._valid_until = asked + LEADER_TTL_MS / 1000 - FENCE_MARGIN_S
            return True
        if asked < self._held_off_until and self.others_rtt_s:
            self.leading = False
            return False  # stepped aside lately, and a fitter host is alive: it takes the lock
        term = int(self._take(keys=[LEADER_KEY, TERM_KEY], args=[self._token, LEADER_TTL_MS]) or 0)
        self.leading = term > 0
        if self.leading:
            self.term = term
            self._valid_until = asked + LEADER_TTL_MS / 1000 - FENCE_MARGIN_S
            self._scopes.clear()  # a new reign starts a fresh round
            self._quiet.clear()
            self._since = asked
            self._fills.clear()
            self._unfit_since = None
            log.info("dispatcher: this worker now leads (term %d)", term)
        return self.leading

    def still_leading(self) -> bool:
        """Whether the lock is surely still ours, by this host's monotonic clock since the last renewal."""
        return self.leading and time.monotonic() < self._valid_until

    # --- fitness ------------------------------------------------------------------------------------

    def probe_rtt(self) -> float:
        """One round trip to Postgres and one to Redis, in seconds: what every tick pays many times over."""
        started = time.monotonic()
        with self.ctx.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        self.ctx.redis.ping()
        return time.monotonic() - started

    def beat_fitness(self, now: float | None = None) -> None:
        """Every FITNESS_BEAT_S: measure the round trip, publish it, and read the other hosts' figures."""
        moment = time.monotonic() if now is None else now
        if moment - self._fitness_at < FITNESS_BEAT_S:
            return
        self._fitness_at = moment
        try:
            rtt = self.probe_rtt()
            smoothed = rtt if self.rtt_s is None else RTT_SMOOTHING * rtt + (1 - RTT_SMOOTHING) * self.rtt_s
            self.rtt_s = smoothed
            flat = self._fitness(
                keys=[FITNESS_KEY],
                args=[self._field, int(smoothed * 1e6), int(FITNESS_FRESH_S * 1000), 60_000],
            )
        except Exception:
            # Postgres or Redis away: this host publishes nothing, so it is no candidate (and the lock's
            # own renewal, tried next, decides whether it still leads).
            log.debug("dispatcher: no fitness figure this beat", exc_info=True)
            return
        others: dict[str, float] = {}
        for i in range(0, len(flat) - 1, 2):
            name = flat[i].decode() if isinstance(flat[i], bytes) else str(flat[i])
            if name != self._field:
                with contextlib.suppress(TypeError, ValueError):
                    others[name] = int(flat[i + 1]) / 1e6
        self.others_rtt_s = others

    def _note_fill(self, in_flight: int, target: int, backlogged: bool) -> None:
        """How full a scope was found at a tick's start; only a scope with more work than slots says
        anything about the leader (one that ran out of work is empty for want of items)."""
        if target > 0 and (backlogged or in_flight >= target):
            self._fills.append((time.monotonic(), min(1.0, in_flight / target)))

    def fill(self, now: float | None = None) -> float | None:
        """The mean fill over the last FITNESS_WINDOW_S (None without a backlogged tick)."""
        horizon = (time.monotonic() if now is None else now) - FITNESS_WINDOW_S
        while self._fills and self._fills[0][0] < horizon:
            self._fills.popleft()
        if not self._fills:
            return None
        return sum(f for _t, f in self._fills) / len(self._fills)

    def assess(self, now: float | None = None) -> bool:
        """After a tick: track how long this leader has been unfit, and step aside when the rule says so
        (`should_step_aside`). True when it stepped aside."""
        if not self.leading:
            return False
        moment = time.monotonic() if now is None else now
        fill, rtt = self.fill(moment), self.rtt_s or 0.0
        unfit = (fill is not None and fill < UNFIT_FILL) or rtt > SLOW_RTT_S
        fit = (fill is None or fill >= FIT_FILL) and rtt <= SLOW_RTT_S / 2
        if unfit and self._unfit_since is None:
            self._unfit_since = moment
        elif fit:
            self._unfit_since = None
        if not should_step_aside(
            tenure_s=moment - self._since,
            unfit_for_s=None if self._unfit_since is None else moment - self._unfit_since,
            own_rtt_s=rtt,
            others_rtt_s=list(self.others_rtt_s.values()),
            min_tenure_s=self.min_tenure_s,
            unfit_window_s=self.unfit_for_s,
        ):
            return False
        self.step_aside(moment, fill, rtt)
        return True

    def step_aside(self, now: float, fill: float | None, rtt: float) -> None:
        """Release the lock (if still ours) and leave it to the fitter host for `hold_s`."""
        self._release(keys=[LEADER_KEY], args=[self._token])
        self.leading = False
        self._valid_until = 0.0
        self._held_off_until = now + self.hold_s
        self._unfit_since = None
        self.stepped_aside += 1
        log.warning(
            "dispatcher: stepping aside (term %d): scopes %s full, round trip %.0f ms; another host's is "
            "%.0f ms",
            self.term,
            "-" if fill is None else f"{fill:.0%}",
            rtt * 1000,
            min(self.others_rtt_s.values(), default=0.0) * 1000,
        )

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
                if endpoint == "decisions":
                    self._reused[endpoint] = scheduling.reused_share(session, endpoint)
        self._latency_at = now

    def batch_of(self, endpoint: str, target: int) -> int:
        """How many free slots a scope waits for before it sends, while it has items in flight.

        A scope with a rate sends whatever is free at every tick (1): its items wait for the limiter anyway
        and a slot left free starves it (bench/at_limit.py). An unlimited scope (rate 0, a free upstream)
        is bounded by its in-flight target alone; there each tick's few freed slots made a window of their
        own (an `after_window`, a window counter, the queries that pick and mark them), so it waits for
        half the target (bounded by FACTGATE_CHORD_SIZE): at the ceiling (bench/ceiling.py) windows of
        32 every ~0.1 s instead of 15 every 50 ms, with half the target still in flight meanwhile. With
        nothing in flight it sends at once, so a lone small job never waits. The fitness fill counts the
        slots so kept back as full: a leader that sends at the batch is keeping its scope as full as it
        means to (`_note_fill`).
        """
        if self._rate(endpoint) > 0:
            return 1
        return max(1, min(self.window, target // 2))

    def target(self, endpoint: str) -> int:
        """The scope's in-flight bound. While a share f of the latest answers came from the verdict store
        (a re-run), items pass at rate / (1 - f): those take no limiter slot and settle in milliseconds, so
        at the upstream's own bound a re-run answered from the store crawled at a few dozen items a second
        (bench/reuse.py). The limiter still paces every request that is sent."""
        latency = self._latency.get(endpoint, DEFAULT_LATENCY_S)
        rate = self._rate(endpoint)
        share = min(self._reused.get(endpoint, 0.0), MAX_REUSED_SHARE)
        return target_in_flight(rate / (1.0 - share) if rate > 0 else rate, latency, self.max_in_flight)

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

    def _refresh_lost(self, now: float) -> None:
        """Which hosts went silent, and the items they held: their running items no longer count in flight,
        and their received-but-not-started items are made dispatchable again at once (whoever claims one
        first runs it; the other copy finds it taken)."""
        if now - self._lost_at < HOSTS_REFRESH_S:
            return
        self._lost_at = now
        forget_s = max(2.0 * self.ctx.settings.lease_s, 120.0)
        silent = silent_hosts(self.ctx.redis, HOST_SILENT_S, forget_s)
        newly = {h: ids for h, ids in silent.items() if h not in self._lost_hosts and ids}
        if newly:
            ids = sorted({i for items in newly.values() for i in items})
            with session_scope(self.ctx.sessions) as session:
                resent = scheduling.forget_dispatches(session, ids)
            log.warning(
                "dispatcher: host %s silent for over %.1f s; its %d items take no slot, %d not started are "
                "sent again",
                ", ".join(sorted(newly)),
                HOST_SILENT_S,
                len(ids),
                resent,
            )
        self._lost_hosts = set(silent)
        self._lost = {i for items in silent.values() for i in items}
        slow = self._slow(set(silent))
        self._lost |= {i for items in slow.values() for i in items}
        if silent:
            self._redrive_dead(now, forget_s)

    def slow_hosts(self) -> set[str]:
        """Hosts whose fresh fitness figure is clearly worse than this leader's, by the step-aside margin
        (`slow_host`)."""
        own = self.rtt_s or 0.0
        return {
            name.split(" ", 1)[0]
            for name, rtt in self.others_rtt_s.items()
            if slow_host(rtt, own) and name.split(" ", 1)[0] != self.ctx.leases.name
        }

    def _slow(self, silent: set[str]) -> dict[str, list[int]]:
        """The items of slow hosts (not silent ones: those are counted already). A host on a slow link
        runs its items slowly — its round trips to Postgres, Redis and the upstream queue behind its own
        traffic — so counted in flight they keep the scope below its rate, as a silent host's did. Their
        running items take no slot; they stay the host's own (the limiter still paces every call, so
        dispatching more cannot exceed the upstream's limit)."""
        names = self.slow_hosts() - silent
        newly = names - self._slow_hosts
        if newly:
            log.warning(
                "dispatcher: host %s is slow (round trip far above this leader's); its running items "
                "take no slot",
                ", ".join(sorted(newly)),
            )
        self._slow_hosts = names
        return host_items(self.ctx.redis, sorted(names))

    def _redrive_dead(self, now: float, forget_s: float) -> int:
        """While some host has been silent for HOST_DEAD_S: the running items no host beating since lists
        and whose leases stopped moving are pending again now, not when their lease runs out
        (FACTGATE_LEASE_S, minutes), so a killed host's items do not hold its job's end. The lease token
        still decides who writes (jobs/sweeper.py:redrive_abandoned)."""
        if now - self._dead_at < DEAD_REFRESH_S:
            return 0
        self._dead_at = now
        lease_s = float(self.ctx.settings.lease_s)
        unrenewed_s = self.ctx.leases.beat_s + REDRIVE_GRACE_S
        if max(HOST_DEAD_S, unrenewed_s) >= lease_s:
            return 0  # the lease runs out as soon: the sweeper re-drives them
        dead = silent_hosts(self.ctx.redis, HOST_DEAD_S, forget_s)
        if not dead:
            return 0
        # Whatever a host that beat since lists stays its own; the rest unrenewed is the dead hosts' —
        # their record's and any item they claimed after their last beat.
        held = beating_items(self.ctx.redis, HOST_DEAD_S)
        with session_scope(self.ctx.sessions) as session:
            moved = redrive_abandoned(session, held, unrenewed_s, lease_s)
        if moved:
            log.warning(
                "dispatcher: host %s silent for over %.0f s, its leases unrenewed for %.0f s; %d running "
                "items re-driven",
                ", ".join(sorted(dead)),
                HOST_DEAD_S,
                unrenewed_s,
                moved,
            )
        return moved

    def _statements(self) -> AbstractContextManager[Executor]:
        """What a tick's statements run on. On Postgres a bare connection in autocommit: each statement is
        atomic by itself (the reads need no snapshot in common, and marking is one conditional UPDATE whose
        conditions are what keeps a cancelled job's items from being sent), and a read then costs one round
        trip instead of BEGIN, the read and COMMIT — an idle tick two round trips instead of six. Elsewhere
        (SQLite, embedded mode) a session."""
        if self.ctx.engine.dialect.driver == "psycopg":
            return statement_scope(self.ctx.engine)
        return session_scope(self.ctx.sessions)

    def tick(self) -> bool:
        """One round: for each scope with free slots, allocate them fairly and send the picks.

        Returns True while any job is live (the loop then keeps its short interval).
        """
        self._check_epoch()
        now = time.monotonic()
        self._refresh_latency(now)
        with self._statements() as conn:
            jobs = scheduling.live_jobs(conn)
        self._looked.clear()
        if not jobs:
            self._scopes.clear()
            self._quiet.clear()
            self._close_elsewhere()
            return False
        self._refresh_holds(jobs, now)
        self._refresh_lost(now)
        weights = {str(j.tenant_id): j.weight for j in jobs}
        by_scope: dict[str, tuple[str, list[LiveJob]]] = {}
        for endpoint in ENDPOINTS:
            for job in jobs:
                if job.tenant_id in self._holds:
                    continue  # held: its items stay pending until the budget resets or is raised
                scope = self.scope_of(job, endpoint)
                by_scope.setdefault(scope, (endpoint, []))[1].append(job)
        for scope, (endpoint, scope_jobs) in by_scope.items():
            quiet = self._quiet.get(scope)
            if quiet is not None and now < quiet[0] and quiet[1] == frozenset(j.id for j in scope_jobs):
                continue  # nothing there at the last look, and no new job since (`_quiet`)
            self._quiet.pop(scope, None)
            self._dispatch_scope(scope, endpoint, scope_jobs, weights)
        if now - self._schedule_at >= SCHEDULE_REFRESH_S:
            self._write_schedules(jobs, weights)
            self._schedule_at = now
        # Forget scopes with no live job (bounded memory).
        live_scopes = set(by_scope)
        for scope in list(self._scopes):
            if scope not in live_scopes:
                del self._scopes[scope]
        for scope in list(self._quiet):
            if scope not in live_scopes:
                del self._quiet[scope]
        self._close_elsewhere()
        return True

    def _close_elsewhere(self) -> None:
        """Close the windows of scopes this tick did not look at (a held tenant's, one whose jobs ended, a
        tick cut short), then send the bodies of every window closed this tick."""
        for scope in [s for s in self._windows if s not in self._looked]:
            if not self.still_leading():
                break
            with self._statements() as conn:
                self._close_windows(
                    scope, {item for item, _running in scheduling.in_flight_items(conn, scope)}
                )
        self._send_closed()

    def _dispatch_scope(
        self, scope: str, endpoint: str, jobs: list[LiveJob], weights: Mapping[str, float]
    ) -> int:
        if not self.still_leading():
            return 0  # the lock may have lapsed during this tick (a pause, a stall): mark nothing
        with self._statements() as session:
            target = self.target(endpoint)
            flights = scheduling.in_flight_items(session, scope)
            self._looked.add(scope)
            self._close_windows(scope, {item for item, _running in flights})
            # A silent host's running items take no slot (`_refresh_lost`).
            flying = sum(1 for item, running in flights if not (running and item in self._lost))
            free = target - flying
            # An unlimited scope sends in batches (`batch_of`): nothing paces it but the in-flight bound,
            # so topping it up every tick only made many small windows.
            batch = self.batch_of(endpoint, target)
            if free <= 0 or (flying > 0 and free < batch):
                self._note_fill(flying + batch - 1, target, backlogged=True)
                return 0
            # One more than can be sent: a job that gets every free slot and still has work must not look
            # drained to the policy, or it would leave its round and lose the rest of its quantum (its
            # weight would then count for nothing while slots come one or two at a time).
            ready = scheduling.ready_items(session, [j.id for j in jobs], endpoint, free + 1)
            self._note_fill(flying + batch - 1, target, backlogged=sum(len(r) for r in ready.values()) > free)
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
                if flying == 0:
                    self._quiet[scope] = (time.monotonic() + QUIET_RECHECK_S, frozenset(j.id for j in jobs))
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
        return self._send_windows(windows, scope)

    def _close_windows(self, scope: str, flying: set[int]) -> None:
        """Close the scope's windows none of whose items is in flight any more (`_OpenWindow`)."""
        open_windows = self._windows.get(scope)
        if not open_windows:
            return
        still = [w for w in open_windows if not w.items.isdisjoint(flying)]
        if len(still) < len(open_windows):
            self._closed += [w for w in open_windows if w.items.isdisjoint(flying)]
        if still:
            self._windows[scope] = still
        else:
            del self._windows[scope]

    def _send_closed(self) -> None:
        """Send the bodies of the windows closed this tick, one `after_window` per job (its questions
        merged), in one producer batch. A failure is logged: the job's finalize and the sweep remain."""
        closed, self._closed = self._closed, []
        if not closed:
            return
        per_job: dict[uuid.UUID, set[int]] = {}
        for window in closed:
            per_job.setdefault(window.job_id, set()).update(window.questions)
        try:
            with self.app.producer_or_acquire() as producer, producer.batch():
                for job_id, questions in per_job.items():
                    self.app.send_task(
                        "factgate.after_window",
                        args=(str(job_id), sorted(questions)),
                        ignore_result=True,
                        producer=producer,
                    )
        except Exception:
            log.warning(
                "dispatcher: could not send %d closed windows' bodies; the finalize and the sweep will",
                len(per_job),
                exc_info=True,
            )

    def _send_windows(self, windows: list[tuple[uuid.UUID, list[Ready]]], scope: str) -> int:
        """Send every window's chord in one producer batch: on Redis all their messages go out in one
        pipeline (one round trip per tick instead of one per item; transports without batches send each
        message at once). If sending fails, the windows' items are dispatchable again (any message that did
        go out finds its item already taken or done: claims are conditional)."""
        if not windows:
            return 0
        if not self.still_leading():
            # Marked while leading, but the lock may have passed on since: send nothing, undo the marks.
            with session_scope(self.ctx.sessions) as session:
                scheduling.forget_dispatches(session, [r.id for _job, window in windows for r in window])
            log.warning("dispatcher: the lock may have lapsed; %d windows not sent", len(windows))
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
            if self._redis_backend:
                questions = tuple(sorted({r.parent_id for r in window if r.parent_id is not None}))
                opened = _OpenWindow(job_id, questions, frozenset(r.id for r in window))
                self._windows.setdefault(scope, []).append(opened)
        return sum(len(window) for _job, window in windows)

    def _send_chord(self, job_id: uuid.UUID, window: list[Ready], producer: Any = None) -> None:
        """One chord per window: the items, then `after_window` with the questions they belong to.

        On Redis the leader closes the window itself once its items have left flight and sends the body
        then (`_OpenWindow`); the item messages carry nothing of it. They are built here from one template
        (`_publish_item`): `send_task` per item routed, repr'd, signalled and validated the same message over
        again (8 % of a worker's CPU at the ceiling). Other backends (embedded mode's) join on a saved group,
        so they get `chord()`."""
        questions = sorted({r.parent_id for r in window if r.parent_id is not None})
        if not self._redis_backend:
            body = self.app.signature("factgate.after_window", args=(str(job_id), questions), immutable=True)
            chord(
                [
                    self.app.signature(
                        "factgate.run_item", args=(r.id,), kwargs={"epoch": self.term}, immutable=True
                    )
                    for r in window
                ]
            )(body)
            return
        for r in window:
            self._publish_item(producer, r.id)

    def _item_template(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """Headers, body extras and publish options of a `run_item` message, made once by Celery's own
        message builder (so they follow its protocol) and copied for every item."""
        if self._template is None:
            queue = self.app.amqp.queues[DEFAULT_QUEUE]
            headers, properties, body, _event = self.app.amqp.as_task_v2(
                "template", "factgate.run_item", args=(0,), kwargs={}, ignore_result=True,
                origin=self.app.conf.get("origin") or None,
            )  # fmt: skip
            # Straight to the queue (the anonymous exchange, as `send_task` routes a direct queue): through
            # the named exchange kombu's Redis channel looks its bindings up with an SMEMBERS per message,
            # outside the batch. Nothing to declare: a Redis list needs none, and the workers bind theirs.
            options = {
                "exchange": "",
                "routing_key": queue.name,
                "serializer": self.app.conf.task_serializer,
                "delivery_mode": queue.exchange.delivery_mode or 2,
                "retry": False,  # a failed batch is undone whole by `_send_windows`
                "reply_to": properties.get("reply_to") or "",
            }
            self._template = (headers, body[2], options)
        return self._template

    def _publish_item(self, producer: Any, item_id: int) -> None:
        """Publish one `run_item(item_id, epoch=term)` message into the tick's batch."""
        headers, embed, options = self._item_template()
        task_id = str(uuid.uuid4())
        args = (item_id,)
        kwargs = {"epoch": self.term}  # the reign's term: a worker refuses an older one
        message_headers = {
            **headers,
            "id": task_id,
            "root_id": task_id,
            "argsrepr": f"({item_id},)",
            "kwargsrepr": f"{{'epoch': {self.term}}}",
        }
        producer.publish((args, kwargs, embed), headers=message_headers, correlation_id=task_id, **options)

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
        # A running job with nothing left open is finished, but its finalize may wait on a chord that will
        # not close soon: a window whose item's first copy is on a slow, paused or dead host (the copy that
        # settled it ran elsewhere) joins only when that copy returns, if ever. Ask for it here, at most
        # every SCHEDULE_REFRESH_S, rather than leaving it to the sweep (FACTGATE_SWEEP_INTERVAL_S).
        for job in jobs:
            if job.status == "in_progress" and remaining.get(job.id, 0) == 0:
                self._finalize(job.id)

    def _send_finalize(self, job_id: uuid.UUID) -> None:
        """`after_window` with no questions is the job's finalize alone (idempotent; any worker runs it)."""
        try:
            self.app.send_task("factgate.after_window", args=(str(job_id), []), ignore_result=True)
        except Exception:
            log.warning("dispatcher: could not ask to finalize job %s; the sweep will", job_id, exc_info=True)
