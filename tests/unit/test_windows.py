"""A window's own join (workers/windows.py): the last item to return sends the body, once; a malformed or
missing window joins nothing; Redis away leaves the window open without failing the item."""

from __future__ import annotations

import uuid

import fakeredis
import pytest

from workers.windows import TTL_S, Window, count_part


def test_the_last_part_sends_the_body_once_and_forgets_the_counter() -> None:
    rds = fakeredis.FakeRedis()
    job = uuid.uuid4()
    window = Window.from_arg(Window.new(job, 3, [7, 9]).as_arg())
    assert window is not None and window.size == 3
    sent: list[tuple[str, list[int]]] = []
    closed = [count_part(rds, window, lambda j, q: sent.append((j, q))) for _ in range(3)]
    assert closed == [False, False, True]
    assert sent == [(str(job), [7, 9])]
    assert not rds.exists(window.key)
    # A late duplicate (a message delivered twice) starts a fresh count that never reaches the size again
    # before it expires: no second body.
    assert count_part(rds, window, lambda j, q: sent.append((j, q))) is False
    assert len(sent) == 1 and 0 < int(rds.ttl(window.key)) <= TTL_S


def test_a_counter_left_open_expires() -> None:
    rds = fakeredis.FakeRedis()
    window = Window.new(uuid.uuid4(), 2)
    assert count_part(rds, window, lambda j, q: None) is False
    assert 0 < int(rds.ttl(window.key)) <= TTL_S


@pytest.mark.parametrize("raw", [None, "x", [1, 2], ["k", "not a size", "j", []], ["k", 2, "j", ["q"]]])
def test_a_missing_or_malformed_window_joins_nothing(raw: object) -> None:
    assert Window.from_arg(raw) is None


def test_redis_away_leaves_the_window_open_without_raising() -> None:
    class Down:
        def pipeline(self, transaction: bool = False) -> object:
            raise ConnectionError("redis went away")

    sent: list[object] = []
    assert count_part(Down(), Window.new(uuid.uuid4(), 1), lambda j, q: sent.append(j)) is False
    assert sent == []


def test_run_item_counts_its_window_however_it_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """The count happens on the way out of `run_item`, also when the item itself raised; a context that
    cannot be built skips the count without hiding the item's own error."""
    from types import SimpleNamespace

    from workers import tasks

    rds = fakeredis.FakeRedis()
    window = Window.new(uuid.uuid4(), 2)
    sent: list[str] = []
    monkeypatch.setattr(tasks, "_ctx", lambda: SimpleNamespace(redis=rds))
    monkeypatch.setattr(tasks, "_send_after_window", lambda job_id, _q: sent.append(job_id))

    def crash(_item_id: int, _epoch: int | None) -> None:
        raise RuntimeError("the item crashed")

    monkeypatch.setattr(tasks, "_run_item", lambda _i, _e: None)
    tasks.run_item.run(1, epoch=None, window=window.as_arg())
    monkeypatch.setattr(tasks, "_run_item", crash)
    with pytest.raises(RuntimeError, match="the item crashed"):
        tasks.run_item.run(2, epoch=None, window=window.as_arg())
    assert sent == [window.job_id]  # both counted: the window closed

    def no_context() -> object:
        raise ConnectionError("no context")

    monkeypatch.setattr(tasks, "_ctx", no_context)
    with pytest.raises(RuntimeError, match="the item crashed"):
        tasks.run_item.run(3, epoch=None, window=Window.new(uuid.uuid4(), 1).as_arg())
