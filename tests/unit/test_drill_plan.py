"""The drill's plan (scripts/drill/run.py): which Redis deployment a run gets unless told.

A plain `make drill` must run every scenario, redis-failover included, so it gets the Sentinels; the
quick smoke (CI) needs none and stays on one plain server.
"""

from __future__ import annotations

from scripts.drill.run import SCENARIOS, SMOKE, redis_mode_for


def test_the_full_run_gets_sentinels() -> None:
    assert redis_mode_for(SCENARIOS) == "sentinel"
    assert any(sc.needs_sentinel for sc in SCENARIOS)  # the reason: without them one would not run


def test_the_smoke_alone_stays_plain() -> None:
    assert redis_mode_for([SMOKE]) == "plain"


def test_any_chosen_scenario_gets_the_production_setting() -> None:
    by_name = {sc.name: sc for sc in SCENARIOS}
    assert redis_mode_for([by_name["redis-failover"]]) == "sentinel"
    assert redis_mode_for([by_name["slow-link"]]) == "sentinel"
