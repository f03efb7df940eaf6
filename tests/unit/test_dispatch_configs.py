"""Each part of the dispatcher validates its config: a bad figure fails at construction, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from workers.allocation import AllocationConfig
from workers.fitness import FitnessConfig
from workers.holds import HoldsConfig
from workers.hosts import HostWatchConfig
from workers.leadership import LEADER_TTL_MS, LeadershipConfig
from workers.publishing import PublishingConfig
from workers.schedules import ScheduleConfig

DEFAULTS: list[Any] = [
    LeadershipConfig,
    FitnessConfig,
    HostWatchConfig,
    HoldsConfig,
    AllocationConfig,
    PublishingConfig,
    ScheduleConfig,
]


@pytest.mark.parametrize("config", DEFAULTS)
def test_the_defaults_are_valid(config: Any) -> None:
    config()


@pytest.mark.parametrize(
    ("config", "field", "value"),
    [
        (LeadershipConfig, "ttl_ms", 0),
        (LeadershipConfig, "fence_margin_s", -0.1),
        (LeadershipConfig, "fence_margin_s", LEADER_TTL_MS / 1000),  # never valid: it sends nothing
        (LeadershipConfig, "hold_s", -1.0),
        (FitnessConfig, "beat_s", 0.0),
        (FitnessConfig, "fresh_s", -1.0),
        (FitnessConfig, "window_s", 0.0),
        (FitnessConfig, "smoothing", 0.0),
        (FitnessConfig, "smoothing", 1.5),
        (FitnessConfig, "min_tenure_s", -1.0),
        (FitnessConfig, "unfit_for_s", -1.0),
        (HostWatchConfig, "refresh_s", -0.5),
        (HostWatchConfig, "dead_refresh_s", -0.5),
        (HoldsConfig, "refresh_s", -1.0),
        (AllocationConfig, "max_in_flight", 0),
        (AllocationConfig, "window", 0),
        (AllocationConfig, "latency_refresh_s", -1.0),
        (AllocationConfig, "quiet_recheck_s", -1.0),
        (PublishingConfig, "queue", ""),
        (ScheduleConfig, "refresh_s", -1.0),
        (ScheduleConfig, "rate_window_s", 0.0),
    ],
)
def test_a_bad_figure_is_refused_by_name(config: Any, field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        config(**{field: value})


def test_what_tests_shorten_is_valid() -> None:
    """The figures the integration tests use: no tenure or unfit period, registries read at every tick."""
    FitnessConfig(min_tenure_s=0.0, unfit_for_s=0.0)
    HostWatchConfig(refresh_s=0.0, dead_refresh_s=0.0)
    ScheduleConfig(refresh_s=0.0)
