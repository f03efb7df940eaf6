"""The one backoff shape and its named policies (clients/backoff.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from tenacity import wait_exponential

from clients.backoff import ITEM_BACKOFF, SETTLE_BACKOFF, TASK_BACKOFF, UPSTREAM_BACKOFF, Backoff, patiently


@pytest.mark.parametrize("rand", [0.0, 0.5, 0.999])
def test_the_policies_wait_what_their_callers_promise(rand: float) -> None:
    spread = 1.0 + 0.25 * (2.0 * rand - 1.0)
    assert [UPSTREAM_BACKOFF.wait_s(i, rand) for i in range(3)] == pytest.approx(
        [s * spread for s in (1, 2, 4)]
    )
    tasks = [TASK_BACKOFF.wait_s(i, rand) for i in range(6)]
    assert tasks == pytest.approx([s * spread for s in (2, 4, 8, 16, 30, 30)])
    items = [ITEM_BACKOFF.wait_s(i, rand) for i in range(7)]
    assert items == pytest.approx([s * spread for s in (2, 4, 8, 16, 32, 60, 60)])


def test_the_settle_backoff_is_tenacitys_exponential_wait_it_replaced() -> None:
    replaced = wait_exponential(multiplier=0.25, max=5.0)
    for attempt in range(1, 12):
        state: Any = SimpleNamespace(attempt_number=attempt)
        assert SETTLE_BACKOFF(state) == replaced(state)


def test_a_huge_try_number_waits_the_cap() -> None:
    assert TASK_BACKOFF.wait_s(5_000, 0.5) == 30.0
    assert Backoff(base_s=1.0, jitter=0.0).wait_s(5_000) == math.inf  # uncapped: the caller caps it


def test_without_a_draw_the_wait_stays_in_its_band() -> None:
    waits = [ITEM_BACKOFF.wait_s(10) for _ in range(50)]
    assert all(45.0 <= w <= 75.0 for w in waits)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_s": 1.0, "jitter": 1.0}, "jitter"),
        ({"base_s": -1.0}, "delays"),
        ({"base_s": 1.0, "cap_s": -1}, "delays"),
    ],
)
def test_a_bad_backoff_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)


def test_patiently_retries_what_it_is_told_and_reraises_the_rest() -> None:
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("away")
        return "stored"

    quick = Backoff(base_s=0.0, jitter=0.0)
    assert patiently(lambda exc: isinstance(exc, ConnectionError), quick, 5.0)(flaky) == "stored"
    assert len(tries) == 3
    with pytest.raises(ValueError, match="refused"):
        patiently(lambda exc: isinstance(exc, ConnectionError), quick, 5.0)(_refuse)


def _refuse() -> None:
    raise ValueError("refused")
