"""The purge rests between batches in proportion to each batch's time (workers/tasks.py:purge_job).

The batches themselves are tested against Postgres and SQLite in tests/integration/test_job_lifecycle.py;
here purge_step is scripted and the clock is fake, so what is proven is only the pacing rule: a rest of
ratio × the batch's time after every batch that removed rows, capped, none after the last, none at 0.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

import workers.tasks as tasks
from config.settings import Settings


@dataclass
class FakeCtx:
    settings: Settings
    sessions: Any = None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run(
    monkeypatch: pytest.MonkeyPatch, ratio: float, batches: list[tuple[int, float]]
) -> tuple[int, list[float]]:
    """purge_job over scripted batches of (rows removed, seconds taken); returns (rows, rests)."""
    clock = Clock()
    script = iter(batches)

    def step(_session: object, _job_id: uuid.UUID, **_policy: object) -> int:
        rows, took = next(script)
        clock.now += took
        return rows

    @contextlib.contextmanager
    def scope(_factory: object) -> Iterator[None]:
        yield None

    monkeypatch.setattr(tasks, "purge_step", step)
    monkeypatch.setattr(tasks, "session_scope", scope)
    rests: list[float] = []

    def pause(seconds: float) -> None:
        rests.append(round(seconds, 6))
        clock.now += seconds

    ctx = FakeCtx(replace(Settings.from_env({}), purge_pause_ratio=ratio))
    removed = tasks.purge_job(ctx, uuid.uuid4(), pause=pause, clock=clock)  # type: ignore[arg-type]
    return removed, rests


def test_each_batch_is_followed_by_a_rest_as_long_as_it_times_the_ratio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    removed, rests = run(monkeypatch, 1.0, [(10_000, 0.4), (10_000, 0.25), (3, 0.01), (0, 0.01)])
    assert removed == 20_003
    assert rests == [0.4, 0.25, 0.01]  # none after the step that found nothing left


def test_the_rest_is_capped_and_a_ratio_of_zero_never_rests(monkeypatch: pytest.MonkeyPatch) -> None:
    _removed, rests = run(monkeypatch, 2.0, [(10_000, 4.0), (0, 0.0)])
    assert rests == [tasks.PURGE_PAUSE_MAX_S]
    removed, rests = run(monkeypatch, 0.0, [(5, 1.0), (5, 1.0), (0, 0.0)])
    assert (removed, rests) == (10, [])


def test_the_default_ratio_is_one_and_the_environment_sets_it() -> None:
    assert Settings.from_env({}).purge_pause_ratio == 1.0
    assert Settings.from_env({"FACTGATE_PURGE_PAUSE_RATIO": "0.5"}).purge_pause_ratio == 0.5
