"""Budget holds as the leader sees them: which budgeted tenants have spent their budget.

A held tenant's work waits (its items stay pending until the budget resets or is raised); nothing fails.
The spend is summed from the database every `HoldsConfig.refresh_s`, so a budget reached mid-run holds
work within that long.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pydantic
from pydantic import NonNegativeFloat

from jobs.quotas import Hold
from jobs.quotas import holds as scheduling_holds
from jobs.scheduling import LiveJob
from models import utcnow
from workers.context import WorkerContext

HOLDS_REFRESH_S = 2.0  # how often budgeted tenants' spend is summed


@pydantic.dataclasses.dataclass(frozen=True)
class HoldsConfig:
    """How often the budgeted tenants' spend is summed."""

    refresh_s: NonNegativeFloat = HOLDS_REFRESH_S


@dataclass(frozen=True)
class HoldsRun:
    """One summing: the budgeted tenants looked at, and those held."""

    budgeted: tuple[uuid.UUID, ...]
    held: frozenset[uuid.UUID]


class BudgetHolds:
    """The holds in force, by tenant, as of the last refresh."""

    def __init__(self, ctx: WorkerContext, config: HoldsConfig | None = None) -> None:
        self.ctx = ctx
        self.config = config or HoldsConfig()
        self.holds: dict[uuid.UUID, Hold] = {}
        self.at = 0.0  # monotonic: the last refresh

    def refresh(self, jobs: Sequence[LiveJob], now: float) -> HoldsRun | None:
        """Sum the spend of the live jobs' budgeted tenants; None when the last sum is recent enough."""
        if now - self.at < self.config.refresh_s:
            return None
        budgeted = sorted({j.tenant_id for j in jobs if j.budgeted})
        with self.ctx.sessions() as session:
            self.holds = scheduling_holds(session, budgeted, utcnow())
        self.at = now
        return HoldsRun(budgeted=tuple(budgeted), held=frozenset(self.holds))

    def hold_of(self, tenant_id: uuid.UUID) -> Hold | None:
        return self.holds.get(tenant_id)
