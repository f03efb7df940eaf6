"""How many items each scope keeps in flight, and which jobs the free slots go to.

The upstream is one scarce resource per key and endpoint (a scope), shared by every tenant and job. For
each scope the leader keeps only about as many items in flight as keep that scope's rate limit busy (its
rate × the observed upstream latency, plus a little lead, bounded: `target_in_flight`), and whenever slots
free up it lets `checks.fairness.allocate` — weighted deficit round robin over tenants, then priority
classes, then jobs — pick which jobs the next items come from. Scopes never block each other: each has
its own bound, so a burst of Agent work holds at most its own scope's few items, and Decisions work keeps
flowing beside it.

The fairness state lives in the leader's memory; a new leader starts a fresh round, which costs nothing but
one round of perfect fairness.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pydantic
from pydantic import NonNegativeFloat, PositiveInt

from checks.fairness import Backlog, FairState, allocate
from config.settings import Settings
from jobs import scheduling
from jobs.scheduling import LiveJob
from workers.context import WorkerContext
from workers.limiter import scope_for, with_headroom

ENDPOINTS = ("decisions", "agent", "search")
# Time from dispatch to the POST (broker hop, claim, limiter hand-off, a hold at the wire gate): items in
# flight beyond rate × latency so that a slot never opens with nobody ready to take it. On a busy 2-core
# host 0.5 s left the limiter with nobody waiting for up to a second at a time (bench/at_limit.py
# --cpu-hog 2); it costs one more second of work in flight, which a cancel or a newcomer's first call
# waits for.
LEAD_S = 1.0
EXTRA_IN_FLIGHT = 2
MIN_IN_FLIGHT = 2
LATENCY_REFRESH_S = 2.0
QUIET_RECHECK_S = 0.25  # a scope found empty is looked at again after this long (`Allocation.quiet`)
DEFAULT_LATENCY_S = 1.0
# The most the reused share raises a scope's item rate by: 1 / (1 - 0.95) = 20 times (then max_in_flight).
MAX_REUSED_SHARE = 0.95


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


@pydantic.dataclasses.dataclass(frozen=True)
class AllocationConfig:
    """The in-flight bound of every scope, the window (chord) size, and how often the observed latency is
    read and an empty scope looked at again."""

    max_in_flight: PositiveInt = 64
    window: PositiveInt = 50
    latency_refresh_s: NonNegativeFloat = LATENCY_REFRESH_S
    quiet_recheck_s: NonNegativeFloat = QUIET_RECHECK_S

    @classmethod
    def from_settings(cls, settings: Settings) -> AllocationConfig:
        return cls(max_in_flight=settings.dispatch_max_in_flight, window=max(1, settings.chord_size))


@dataclass
class ScopeState:
    """What the leader keeps per scope between ticks: its fair round, and the backlogs it last saw (the
    schedule views share them out, workers/schedules.py)."""

    state: FairState = field(default_factory=FairState)
    last_backlogs: list[Backlog] = field(default_factory=list)


class Allocation:
    """Targets, scopes and fair rounds of one leader."""

    def __init__(self, ctx: WorkerContext, config: AllocationConfig) -> None:
        self.ctx = ctx
        self.config = config
        self.scopes: dict[str, ScopeState] = {}
        self.latency: dict[str, float] = {}
        # The share of an endpoint's latest answers that came from the verdict store (jobs/verdicts.py).
        self.reused: dict[str, float] = {}
        self.latency_at = 0.0
        # Scopes found with nothing in flight and nothing ready (a claims job has no Agent or Search items):
        # scope -> (monotonic time to look again, the live jobs then). Looking at each at every tick costs
        # two queries per empty scope, many times a second. A new job in the scope ends the wait at once;
        # an existing job's new items of that endpoint (a staged kind's next stage) wait at most
        # `quiet_recheck_s`.
        self.quiet: dict[str, tuple[float, frozenset[uuid.UUID]]] = {}

    def new_round(self) -> None:
        """A new reign (or no live job): fresh fair rounds, every scope looked at again."""
        self.scopes.clear()
        self.quiet.clear()

    def rate(self, endpoint: str) -> float:
        """The rate the limiter grants in a scope of this endpoint (the configured rate less its headroom)."""
        return with_headroom(self.ctx.rate_for(endpoint), self.ctx.settings.limiter_headroom)

    def refresh_latency(self, now: float) -> None:
        if now - self.latency_at < self.config.latency_refresh_s and self.latency:
            return
        with self.ctx.sessions() as session:
            for endpoint in ENDPOINTS:
                observed = scheduling.observed_latency_s(session, endpoint)
                if observed is not None:
                    self.latency[endpoint] = observed
                if endpoint == "decisions":
                    self.reused[endpoint] = scheduling.reused_share(session, endpoint)
        self.latency_at = now

    def target(self, endpoint: str) -> int:
        """The scope's in-flight bound. While a share f of the latest answers came from the verdict store
        (a re-run), items pass at rate / (1 - f): those take no limiter slot and settle in milliseconds, so
        at the upstream's own bound a re-run answered from the store would crawl. The limiter still paces
        every request that is sent."""
        latency = self.latency.get(endpoint, DEFAULT_LATENCY_S)
        rate = self.rate(endpoint)
        share = min(self.reused.get(endpoint, 0.0), MAX_REUSED_SHARE)
        return target_in_flight(
            rate / (1.0 - share) if rate > 0 else rate, latency, self.config.max_in_flight
        )

    def batch_of(self, endpoint: str, target: int) -> int:
        """How many free slots a scope waits for before it sends, while it has items in flight.

        A scope with a rate sends whatever is free at every tick (1): its items wait for the limiter anyway
        and a slot left free starves it (bench/at_limit.py). An unlimited scope (rate 0, a free upstream)
        is bounded by its in-flight target alone; there each tick's few freed slots made a window of their
        own (an `after_window`, the queries that pick and mark them), so it waits for half the target
        (bounded by FACTGATE_CHORD_SIZE): fewer, larger windows, with half the target still in flight
        meanwhile. With nothing in flight it sends at once, so a lone small job never waits. The fitness
        fill counts the slots so kept back as full: a leader that sends at the batch is keeping its scope
        as full as it means to (workers/fitness.py:Fitness.note_fill).
        """
        if self.rate(endpoint) > 0:
            return 1
        return max(1, min(self.config.window, target // 2))

    def scope_of(self, job: LiveJob, endpoint: str) -> str:
        """The rate-limit scope a job's items of `endpoint` use: its tenant's own key if it has one (its own
        rate limit, and its own fair share among that key's jobs), else the operator's."""
        if job.key_fingerprint:
            return f"{job.key_fingerprint}:{endpoint}"
        return scope_for(self.ctx.settings.perplexity_api_key, endpoint)

    def by_scope(
        self, jobs: Iterable[LiveJob], held: Mapping[uuid.UUID, object]
    ) -> dict[str, tuple[str, list[LiveJob]]]:
        """The live jobs of every scope (with its endpoint), endpoint by endpoint; a held tenant's jobs
        are left out (their items stay pending until the budget resets or is raised)."""
        jobs = list(jobs)
        out: dict[str, tuple[str, list[LiveJob]]] = {}
        for endpoint in ENDPOINTS:
            for job in jobs:
                if job.tenant_id in held:
                    continue
                out.setdefault(self.scope_of(job, endpoint), (endpoint, []))[1].append(job)
        return out

    def is_quiet(self, scope: str, jobs: list[LiveJob], now: float) -> bool:
        """Nothing there at the last look, and no new job since (`quiet`)."""
        quiet = self.quiet.get(scope)
        if quiet is not None and now < quiet[0] and quiet[1] == frozenset(j.id for j in jobs):
            return True
        self.quiet.pop(scope, None)
        return False

    def note_quiet(self, scope: str, jobs: list[LiveJob]) -> None:
        self.quiet[scope] = (time.monotonic() + self.config.quiet_recheck_s, frozenset(j.id for j in jobs))

    def allocate(
        self, scope: str, backlogs: list[Backlog], weights: Mapping[str, float], free: int
    ) -> dict[str, int]:
        """Share `free` slots among the scope's backlogged jobs, by its fair round; remembers the backlogs
        (even none) for the schedule views."""
        slot = self.scopes.setdefault(scope, ScopeState())
        slot.last_backlogs = backlogs
        if not backlogs:
            return {}
        return allocate(backlogs, weights, free, slot.state)

    def forget_unlive(self, live_scopes: set[str]) -> None:
        """Forget scopes with no live job (bounded memory)."""
        for scope in [s for s in self.scopes if s not in live_scopes]:
            del self.scopes[scope]
        for scope in [s for s in self.quiet if s not in live_scopes]:
            del self.quiet[scope]
