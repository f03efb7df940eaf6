"""The deferred item build's setting (FACTGATE_INTAKE_DEFER_ROWS) and what `validating` counts as."""

from __future__ import annotations

import pytest

from checks.states import JobStatus
from config import Settings


def test_intake_defer_rows_default_and_environment() -> None:
    assert Settings.from_env({}).intake_defer_rows == 50_000
    assert Settings.from_env({"FACTGATE_INTAKE_DEFER_ROWS": "0"}).intake_defer_rows == 0  # always defer


def test_a_negative_threshold_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="FACTGATE_INTAKE_DEFER_ROWS"):
        Settings.from_env({"FACTGATE_INTAKE_DEFER_ROWS": "-1"})


def test_validating_is_live_and_cancellable_but_not_running() -> None:
    """Live: it counts against max_active_jobs, the sweeper visits it, the pages poll it. Not running: the
    scheduler has no items of it to send and shows no share."""
    assert JobStatus.VALIDATING in JobStatus.live()
    assert JobStatus.VALIDATING in JobStatus.cancellable()
    assert JobStatus.VALIDATING not in JobStatus.running()
    assert not JobStatus.VALIDATING.is_ended
