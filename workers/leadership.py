"""Leadership of the dispatcher: one leader at a time, elected by a Redis lock, fenced by terms.

Every worker process runs the dispatcher's loop; a Redis lock with a short expiry elects the one that
leads, so a killed worker's loop is replaced within seconds.

A leader can lose its lock without knowing it: paused (SIGSTOP, a long stall), cut off, or with its wall
clock off. So leadership is fenced. Each reign has a term, taken with the lock in one script
(`leadership_take.lua`) and larger than every earlier one (at least Redis's own TIME in ms, so a Redis
restarted empty still moves it on); the lock's expiry is Redis's arithmetic, and the leader counts its own
validity from before the call that took or renewed the lock on its monotonic clock, never its wall clock
(`Leadership.still_leading`). Every `run_item` the leader sends carries the term (`epoch`), and a worker
refuses a message of an older term (`refuse_stale_dispatch`): the item's dispatch is forgotten, and the
current leader sends it again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import pydantic
import redis as redis_lib
from pydantic import NonNegativeFloat, PositiveInt

from jobs import scheduling
from models import session_scope
from workers.context import WorkerContext
from workers.lua import lua

log = logging.getLogger("factgate.workers")

LEADER_KEY = "factgate:dispatch:leader"
TERM_KEY = "factgate:dispatch:term"
# Short, so that another host leads within a few seconds of the leader going silent; the lock is renewed
# every loop (50 ms while busy), so only a leader stalled for seconds loses it.
LEADER_TTL_MS = 2_000
FENCE_MARGIN_S = 0.5  # a leader stops sending this long before its lock could have expired
TERM_CACHE_S = 0.25  # how long a worker trusts the term it read (one Redis GET per item otherwise)
STEP_ASIDE_HOLD_S = 30.0  # after stepping aside, take the lock only when no other live host beats

_TAKE = lua("leadership_take")
_RENEW = lua("leadership_renew")
_RELEASE = lua("leadership_release")

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


@pydantic.dataclasses.dataclass(frozen=True)
class LeadershipConfig:
    """The lock's expiry, how long before it the leader stops sending, and how long a leader that stepped
    aside leaves the lock to the others."""

    ttl_ms: PositiveInt = LEADER_TTL_MS
    fence_margin_s: NonNegativeFloat = FENCE_MARGIN_S
    hold_s: NonNegativeFloat = STEP_ASIDE_HOLD_S

    def __post_init__(self) -> None:
        if self.fence_margin_s >= self.ttl_ms / 1000:
            raise ValueError(
                f"fence_margin_s must be below the lock's expiry ({self.ttl_ms / 1000} s), "
                f"not {self.fence_margin_s}: the leader would never send"
            )


@dataclass(frozen=True)
class LeadResult:
    """One `Leadership.lead`: whether this process leads, and whether its reign began with this call (a new
    reign starts its bookkeeping afresh)."""

    leading: bool
    new_reign: bool
    term: int


class Leadership:
    """The lock and the term of one dispatcher: take, renew, release, and whether it surely still holds."""

    def __init__(self, rds: redis_lib.Redis, token: str, config: LeadershipConfig | None = None) -> None:
        self.rds = rds
        # The lock's value names the process that holds it (its pid first), so an operator — or the
        # multi-host drill, scripts/drill/ — can tell which host leads.
        self.token = token
        self.config = config or LeadershipConfig()
        self.leading = False
        self.term = 0  # this reign's term, carried by every message it sends
        self.since = 0.0  # monotonic: when this reign began
        self.valid_until = 0.0  # monotonic: until then the lock cannot have expired
        self.held_off_until = 0.0  # monotonic: after stepping aside, leave the lock to the others
        self._take = rds.register_script(_TAKE)
        self._renew = rds.register_script(_RENEW)
        self._release = rds.register_script(_RELEASE)

    def lead(self, others_alive: bool) -> LeadResult:
        """Take or keep the lock. `others_alive`: another host has a fresh fitness figure (after stepping
        aside, this one leaves the lock to it)."""
        ttl_ms = self.config.ttl_ms
        asked = time.monotonic()  # before the call: Redis starts the expiry later than this, never sooner
        if self.leading and self._renew(keys=[LEADER_KEY], args=[self.token, ttl_ms]):
            self.valid_until = asked + ttl_ms / 1000 - self.config.fence_margin_s
            return LeadResult(leading=True, new_reign=False, term=self.term)
        if asked < self.held_off_until and others_alive:
            self.leading = False
            return LeadResult(leading=False, new_reign=False, term=self.term)
        term = int(self._take(keys=[LEADER_KEY, TERM_KEY], args=[self.token, ttl_ms]) or 0)
        self.leading = term > 0
        if not self.leading:
            return LeadResult(leading=False, new_reign=False, term=self.term)
        self.term = term
        self.valid_until = asked + ttl_ms / 1000 - self.config.fence_margin_s
        self.since = asked
        log.info("dispatcher: this worker now leads (term %d)", term)
        return LeadResult(leading=True, new_reign=True, term=term)

    def still_leading(self) -> bool:
        """Whether the lock is surely still ours, by this host's monotonic clock since the last renewal."""
        return self.leading and time.monotonic() < self.valid_until

    def step_aside(self, now: float) -> None:
        """Release the lock (if still ours) and leave it to the others for `hold_s`."""
        self._release(keys=[LEADER_KEY], args=[self.token])
        self.leading = False
        self.valid_until = 0.0
        self.held_off_until = now + self.config.hold_s

    def release(self) -> None:
        """On stop: give the lock up if this process holds it."""
        if self.leading:
            try:
                if self.rds.get(LEADER_KEY) == self.token.encode():
                    self.rds.delete(LEADER_KEY)
            except Exception:
                log.debug("could not release the dispatcher lock", exc_info=True)
        self.leading = False
