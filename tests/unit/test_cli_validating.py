"""How the CLI shows a `validating` job: the items to come, and what is happening to them."""

from __future__ import annotations

from cli.jobs_cmd import schedule_line, status_line
from cli.progress import ENDED, finished_count

VALIDATING = {
    "id": "j1",
    "kind": "claims",
    "status": "validating",
    "request_counts": {
        "total": 2000,
        "completed": 0,
        "failed": 0,
        "skipped": 0,
        "pending": 2000,
        "running": 0,
    },
    "cost_usd": 0.0,
    "schedule": None,
}


def test_a_validating_job_shows_its_total_and_why_it_waits() -> None:
    assert "validating: 0 of 2000 requests done" in status_line(VALIDATING)
    line = schedule_line(VALIDATING)
    assert line is not None and line.startswith("validating:")
    assert finished_count(VALIDATING) == (0, 2000)


def test_waiting_goes_on_through_validating() -> None:
    """`factgate submit --wait` and `check` poll until the status is an ended one."""
    assert "validating" not in ENDED and "cancelled" in ENDED
