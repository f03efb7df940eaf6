"""A running job's counts and usage as a status poll reads them (web/status.py:LiveFigures): counted on
the first poll, shared while fresh, refreshed in the background when stale, counted again on a new status."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from jobs.progress import RequestCounts
from web import status


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[uuid.UUID]:
    calls: list[uuid.UUID] = []

    def fake_counts(_session: Any, job_id: uuid.UUID) -> RequestCounts:
        calls.append(job_id)
        n = len(calls)
        return RequestCounts(total=10, completed=n, failed=0, skipped=0, pending=10 - n, running=0)

    monkeypatch.setattr(status, "request_counts", fake_counts)
    monkeypatch.setattr(status, "usage_totals", lambda _s, _j: {"cost_usd": 0.0})
    return calls


class _Sessions:
    def __call__(self) -> _Sessions:
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _wait_for(predicate: Any) -> None:
    deadline = time.monotonic() + 5
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_polls_share_one_count_and_a_stale_one_is_refreshed_behind_the_answer(
    counted: list[uuid.UUID],
) -> None:
    figures = status.LiveFigures(max_age_s=3600)
    job: Any = SimpleNamespace(id=uuid.uuid4(), status="in_progress")
    first, _ = figures.get(None, _Sessions(), job)  # type: ignore[arg-type]
    again, _ = figures.get(None, _Sessions(), job)  # type: ignore[arg-type]
    assert (first.completed, again.completed, len(counted)) == (1, 1, 1)

    figures.max_age_s = 0.0
    stale, _ = figures.get(None, _Sessions(), job)  # type: ignore[arg-type]
    assert stale.completed == 1  # answered at once with what it had
    _wait_for(lambda: len(counted) == 2)
    figures.max_age_s = 3600
    fresh, _ = figures.get(None, _Sessions(), job)  # type: ignore[arg-type]
    assert fresh.completed == 2


def test_a_new_status_is_counted_at_once(counted: list[uuid.UUID]) -> None:
    figures = status.LiveFigures(max_age_s=3600)
    job: Any = SimpleNamespace(id=uuid.uuid4(), status="in_progress")
    figures.get(None, _Sessions(), job)  # type: ignore[arg-type]
    job.status = "cancelling"
    counts, _ = figures.get(None, _Sessions(), job)  # type: ignore[arg-type]
    assert (counts.completed, len(counted)) == (2, 2)
