"""Each part of the rate limiter checks its config: a bad figure fails at construction, naming the field."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest

from workers.limiter import RateLimiter
from workers.slots import SlotsConfig
from workers.wire_gate import WireGateConfig


@pytest.mark.parametrize("config", [SlotsConfig, WireGateConfig])
def test_the_defaults_are_valid(config: Any) -> None:
    config()


@pytest.mark.parametrize(
    ("config", "field", "value"),
    [
        (SlotsConfig, "max_late_s", -0.001),
        (SlotsConfig, "max_late_s", float("nan")),
        (WireGateConfig, "arrival_margin_s", -0.001),
        (WireGateConfig, "arrival_margin_s", 1.0),  # a margin of a whole second is no margin
        (WireGateConfig, "in_flight_s", 0.0),
        (WireGateConfig, "in_flight_s", 3600.5),
    ],
)
def test_a_bad_figure_is_refused_by_name(config: Any, field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        config(**{field: value})


def test_the_limiter_passes_its_figures_to_its_parts() -> None:
    limiter = RateLimiter(fakeredis.FakeRedis(), max_late_s=0.5, arrival_margin_s=0.02, in_flight_s=3.0)
    assert limiter.slots_config == SlotsConfig(max_late_s=0.5)
    assert limiter.gate.config == WireGateConfig(arrival_margin_s=0.02, in_flight_s=3.0)
