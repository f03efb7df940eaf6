"""Host health as the leader sees it: silent hosts, slow hosts and dead hosts, and what their items cost.

Every worker host beats the items it holds into Redis (workers/leases.py). A host silent for HOST_SILENT_S
holds slots it is not using: its running items stop counting in flight, and its received-but-not-started
items are made dispatchable again at once (whoever claims one first runs it; the other copy finds it
taken). A host whose fitness figure is far above the leader's (workers/fitness.py:slow_host) runs its items
slowly: they take no slot either, but stay its own. A host silent for HOST_DEAD_S is dead: the running
items no live host lists are re-driven now rather than when their lease runs out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import pydantic
from pydantic import NonNegativeFloat

from jobs import scheduling
from jobs.sweeper import redrive_abandoned
from models import session_scope
from workers.context import WorkerContext
from workers.leases import (
    HOST_DEAD_S,
    HOST_SILENT_S,
    REDRIVE_GRACE_S,
    beating_items,
    host_items,
    silent_hosts,
)

log = logging.getLogger("factgate.workers")

HOSTS_REFRESH_S = 0.5  # how often the leader looks for silent hosts (workers/leases.py)
DEAD_REFRESH_S = 2.0  # how often it looks for dead ones (their running items re-driven)


@pydantic.dataclasses.dataclass(frozen=True)
class HostWatchConfig:
    """How often the leader reads the host registry for silent and for dead hosts (0: at every tick)."""

    refresh_s: NonNegativeFloat = HOSTS_REFRESH_S
    dead_refresh_s: NonNegativeFloat = DEAD_REFRESH_S


@dataclass(frozen=True)
class HostsRun:
    """One look at the registry: the silent hosts (and those newly so), the slow ones, how many not-started
    items were sent again and how many running ones re-driven, and the items that now take no slot."""

    silent: frozenset[str]
    newly_silent: frozenset[str]
    slow: frozenset[str]
    resent: int
    redriven: int
    lost: frozenset[int]


class HostWatch:
    """The leader's view of the other hosts, refreshed every `refresh_s`."""

    def __init__(self, ctx: WorkerContext, config: HostWatchConfig | None = None) -> None:
        self.ctx = ctx
        self.config = config or HostWatchConfig()
        # Items of silent and slow hosts: their running ones take no slot.
        self.lost: set[int] = set()
        self.lost_hosts: set[str] = set()  # hosts already seen silent (their not-started items sent again)
        self.slow_hosts: set[str] = set()
        self.lost_at = 0.0  # monotonic: the last look for silent hosts
        self.dead_at = 0.0  # monotonic: the last look for dead ones

    def refresh(self, now: float, slow: Callable[[], set[str]]) -> HostsRun | None:
        """Which hosts went silent, and the items they held; `slow` names the hosts the fitness figures
        call slow. None when the last look is recent enough."""
        if now - self.lost_at < self.config.refresh_s:
            return None
        self.lost_at = now
        forget_s = max(2.0 * self.ctx.settings.lease_s, 120.0)
        silent = silent_hosts(self.ctx.redis, HOST_SILENT_S, forget_s)
        newly = {h: ids for h, ids in silent.items() if h not in self.lost_hosts and ids}
        resent = 0
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
        self.lost_hosts = set(silent)
        self.lost = {i for items in silent.values() for i in items}
        slow_items = self._slow(slow() - set(silent))
        self.lost |= {i for items in slow_items.values() for i in items}
        redriven = self._redrive_dead(now, forget_s) if silent else 0
        return HostsRun(
            silent=frozenset(silent),
            newly_silent=frozenset(newly),
            slow=frozenset(self.slow_hosts),
            resent=resent,
            redriven=redriven,
            lost=frozenset(self.lost),
        )

    def _slow(self, names: set[str]) -> dict[str, list[int]]:
        """The items of slow hosts (not silent ones: those are counted already). A host on a slow link
        runs its items slowly — its round trips to Postgres, Redis and the upstream queue behind its own
        traffic — so counted in flight they keep the scope below its rate, as a silent host's did. Their
        running items take no slot; they stay the host's own (the limiter still paces every call, so
        dispatching more cannot exceed the upstream's limit)."""
        newly = names - self.slow_hosts
        if newly:
            log.warning(
                "dispatcher: host %s is slow (round trip far above this leader's); its running items "
                "take no slot",
                ", ".join(sorted(newly)),
            )
        self.slow_hosts = names
        return host_items(self.ctx.redis, sorted(names))

    def _redrive_dead(self, now: float, forget_s: float) -> int:
        """While some host has been silent for HOST_DEAD_S: the running items no host beating since lists
        and whose leases stopped moving are pending again now, not when their lease runs out
        (FACTGATE_LEASE_S, minutes), so a killed host's items do not hold its job's end. The lease token
        still decides who writes (jobs/sweeper.py:redrive_abandoned)."""
        if now - self.dead_at < self.config.dead_refresh_s:
            return 0
        self.dead_at = now
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
