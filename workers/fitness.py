"""Fitness of a dispatcher's host: its round trip, how full it keeps the scopes, and when to step aside.

A leader can be alive and unfit: on a slow link (or a starved host) its ticks take long, the scopes drain
between them, and the deployment runs below its limit although another host could keep it full. So every
dispatcher beats a fitness figure into Redis (`FITNESS_KEY`, every `FitnessConfig.beat_s`): the round trip
of one `SELECT 1` and one Redis call, smoothed. The leader also records how full it finds each backlogged
scope at the start of a tick (in flight / target: a healthy leader, ticking every 50 ms, finds it nearly
full; a slow one finds it drained). It steps aside (`should_step_aside`) — releases the lock, and for
STEP_ASIDE_HOLD_S takes it again only if no other live host remains (workers/leadership.py) — when all of:
it has led for MIN_TENURE_S; it has been unfit (fill below UNFIT_FILL or its round trip above SLOW_RTT_S)
for UNFIT_FOR_S without a fit moment between (fit again only at FIT_FILL and half of SLOW_RTT_S: a margin,
so that a figure hovering at the line does not count as recovered); and another host's fresh figure is at
most 1/RTT_MARGIN of its own (less RTT_SLACK_S). The margin and the tenure keep the lock from flapping: the
new leader's round trip is far below the old one's, so the old one is never the fitter of the two.

The same figures tell a worker host whether to take task messages (`keeps_consuming`) and the leader which
hosts are slow (`slow_host`: their running items take no slot, workers/hosts.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import pydantic
import redis as redis_lib
from pydantic import Field, NonNegativeFloat, PositiveFloat

from workers.lua import lua

log = logging.getLogger("factgate.workers")

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
# A worker host that finds itself slow beside another live host stops taking task messages this long.
CONSUME_HOLD_S = 30.0
_FIGURES_TTL_MS = 60_000  # the whole hash goes when no dispatcher beats for this long

_BEAT = lua("fitness_beat")


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


@pydantic.dataclasses.dataclass(frozen=True)
class FitnessConfig:
    """How often a dispatcher beats its figure, how long a figure counts, over how long the fill is
    averaged, and how long a leader leads and stays unfit before it may step aside."""

    beat_s: PositiveFloat = FITNESS_BEAT_S
    fresh_s: PositiveFloat = FITNESS_FRESH_S
    window_s: PositiveFloat = FITNESS_WINDOW_S
    smoothing: Annotated[float, Field(gt=0, le=1)] = RTT_SMOOTHING  # the newest probe's weight
    min_tenure_s: NonNegativeFloat = MIN_TENURE_S
    unfit_for_s: NonNegativeFloat = UNFIT_FOR_S


@dataclass(frozen=True)
class Assessment:
    """A leader's look at itself after a tick: its mean fill (None without a backlogged tick), its round
    trip, how long it has been unfit (None while fit), and whether it should step aside now."""

    fill: float | None
    rtt_s: float
    unfit_for_s: float | None
    step_aside: bool


class Fitness:
    """One dispatcher's figures: its own smoothed round trip, the other live dispatchers', and the fill of
    the scopes it found at its ticks' start."""

    def __init__(self, rds: redis_lib.Redis, name: str, config: FitnessConfig | None = None) -> None:
        self.rds = rds
        # This dispatcher's name in FITNESS_KEY: its process's host name (whose beat lists its items) and
        # its lock token (two dispatchers of one process, as in tests, are two candidates).
        self.name = name
        self.config = config or FitnessConfig()
        self.rtt_s: float | None = None  # this host's smoothed round trip to Postgres and Redis
        self.others_rtt_s: dict[str, float] = {}  # the other live dispatchers' figures, by name
        self.beat_at = -1e9  # monotonic: the last beat
        self.fills: deque[tuple[float, float]] = deque()  # (monotonic time, in flight / target)
        self.unfit_since: float | None = None
        self._beat = rds.register_script(_BEAT)

    def beat(self, probe: Callable[[], float], now: float | None = None) -> bool:
        """Every `beat_s`: measure the round trip (`probe`), publish it, and read the other hosts' figures.
        True when a figure was published."""
        moment = time.monotonic() if now is None else now
        if moment - self.beat_at < self.config.beat_s:
            return False
        self.beat_at = moment
        try:
            rtt = probe()
            weight = self.config.smoothing
            smoothed = rtt if self.rtt_s is None else weight * rtt + (1 - weight) * self.rtt_s
            self.rtt_s = smoothed
            flat = self._beat(
                keys=[FITNESS_KEY],
                args=[self.name, int(smoothed * 1e6), int(self.config.fresh_s * 1000), _FIGURES_TTL_MS],
            )
        except Exception:
            # Postgres or Redis away: this host publishes nothing, so it is no candidate (and the lock's
            # own renewal, tried next, decides whether it still leads).
            log.debug("dispatcher: no fitness figure this beat", exc_info=True)
            return False
        others: dict[str, float] = {}
        for i in range(0, len(flat) - 1, 2):
            name = flat[i].decode() if isinstance(flat[i], bytes) else str(flat[i])
            if name != self.name:
                with contextlib.suppress(TypeError, ValueError):
                    others[name] = int(flat[i + 1]) / 1e6
        self.others_rtt_s = others
        return True

    def note_fill(self, in_flight: int, target: int, backlogged: bool) -> None:
        """How full a scope was found at a tick's start; only a scope with more work than slots says
        anything about the leader (one that ran out of work is empty for want of items)."""
        if target > 0 and (backlogged or in_flight >= target):
            self.fills.append((time.monotonic(), min(1.0, in_flight / target)))

    def fill(self, now: float | None = None) -> float | None:
        """The mean fill over the last `window_s` (None without a backlogged tick)."""
        horizon = (time.monotonic() if now is None else now) - self.config.window_s
        while self.fills and self.fills[0][0] < horizon:
            self.fills.popleft()
        if not self.fills:
            return None
        return sum(f for _t, f in self.fills) / len(self.fills)

    def new_reign(self) -> None:
        """A new reign judges itself by its own ticks only."""
        self.fills.clear()
        self.unfit_since = None

    def assess(self, tenure_s: float, now: float) -> Assessment:
        """Track how long this leader has been unfit, and apply the step-aside rule (`should_step_aside`)."""
        fill, rtt = self.fill(now), self.rtt_s or 0.0
        unfit = (fill is not None and fill < UNFIT_FILL) or rtt > SLOW_RTT_S
        fit = (fill is None or fill >= FIT_FILL) and rtt <= SLOW_RTT_S / 2
        if unfit and self.unfit_since is None:
            self.unfit_since = now
        elif fit:
            self.unfit_since = None
        unfit_for_s = None if self.unfit_since is None else now - self.unfit_since
        step_aside = should_step_aside(
            tenure_s=tenure_s,
            unfit_for_s=unfit_for_s,
            own_rtt_s=rtt,
            others_rtt_s=list(self.others_rtt_s.values()),
            min_tenure_s=self.config.min_tenure_s,
            unfit_window_s=self.config.unfit_for_s,
        )
        return Assessment(fill=fill, rtt_s=rtt, unfit_for_s=unfit_for_s, step_aside=step_aside)

    def slow_hosts(self, own_host: str) -> set[str]:
        """Hosts whose fresh figure is clearly worse than this dispatcher's, by the step-aside margin
        (`slow_host`); this dispatcher's own host is never one."""
        own = self.rtt_s or 0.0
        return {
            name.split(" ", 1)[0]
            for name, rtt in self.others_rtt_s.items()
            if slow_host(rtt, own) and name.split(" ", 1)[0] != own_host
        }

    def forget(self) -> None:
        """On stop: a stopped host is no candidate."""
        with contextlib.suppress(Exception):
            self.rds.hdel(FITNESS_KEY, self.name)
