"""The worker's bookkeeping of `factgate.run_items` messages, which carry a list of item ids where
`run_item` carries one.

Why: a worker notes the items of every message it received and has not started
(workers/bootsteps.py:`waiting_items`), beats them as its own so the leader does not free their slots, and
gives them back at a warm shutdown; an item of a `run_items` message left out of that waits for its
dispatch to go stale instead. And every log line of such a task names its items
(workers/signals.py:`task_log_fields`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from celery import signals as celery_signals

from config.logging import current_context
from workers import bootsteps, signals


@dataclass
class FakeRequest:
    """What `task_received` hands its receivers: the request's task name, arguments and id."""

    name: str
    args: tuple[Any, ...]
    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FakeTask:
    """A task as the prerun and postrun signals name it (hashable: Celery caches receivers by sender)."""

    name: str


@pytest.fixture(autouse=True)
def _no_waiting_left() -> Iterator[None]:
    """Each test starts and ends with no received item noted (module state of the worker process)."""
    with bootsteps._waiting_lock:
        saved = dict(bootsteps._waiting)
        bootsteps._waiting.clear()
    yield
    with bootsteps._waiting_lock:
        bootsteps._waiting.clear()
        bootsteps._waiting.update(saved)


def test_every_item_of_a_received_run_items_message_waits_until_its_task_starts() -> None:
    bootsteps._note_received(request=FakeRequest("factgate.run_items", ([5, 6, 7],), "batch-1"))
    bootsteps._note_received(request=FakeRequest("factgate.run_item", (9,), "single-1"))
    assert bootsteps.waiting_items() == [5, 6, 7, 9]
    bootsteps._note_started(task_id="batch-1")
    assert bootsteps.waiting_items() == [9]  # every item of the started batch, and only those
    bootsteps._note_started(task_id="single-1")
    assert bootsteps.waiting_items() == []


def test_two_received_batches_sharing_an_item_name_it_once_and_keep_it_until_both_start() -> None:
    bootsteps._note_received(request=FakeRequest("factgate.run_items", ([5, 6],), "batch-1"))
    bootsteps._note_received(request=FakeRequest("factgate.run_items", ([6, 8],), "batch-2"))  # redelivered
    assert bootsteps.waiting_items() == [5, 6, 8]
    bootsteps._note_started(task_id="batch-1")
    assert bootsteps.waiting_items() == [6, 8]


def test_the_celery_signals_reach_the_notes_of_a_run_items_message() -> None:
    request = FakeRequest("factgate.run_items", ([11, 12],), "batch-signals")
    celery_signals.task_received.send(sender=None, request=request)
    assert bootsteps.waiting_items() == [11, 12]
    task = FakeTask("factgate.run_items")
    celery_signals.task_prerun.send(
        sender=task, task_id="batch-signals", task=task, args=([11, 12],), kwargs={}
    )
    try:
        assert bootsteps.waiting_items() == []
        assert current_context() == {"item_ids": "[11, 12]"}  # the task's log lines name its items
    finally:
        celery_signals.task_postrun.send(
            sender=task, task_id="batch-signals", task=task, args=([11, 12],), kwargs={}
        )
    assert current_context() == {}


def test_other_tasks_and_empty_messages_note_nothing() -> None:
    bootsteps._note_received(request=FakeRequest("factgate.after_window", ("job", [1, 2]), "body-1"))
    bootsteps._note_received(request=FakeRequest("factgate.run_items", (), "empty-1"))
    bootsteps._note_received(request=None)
    assert bootsteps.waiting_items() == []


def test_a_run_items_task_logs_its_item_ids() -> None:
    assert signals.task_log_fields("factgate.run_items", ([5, 6, 7],)) == {"item_ids": [5, 6, 7]}
    assert signals.task_log_fields("factgate.run_items", [[5, 6, 7]]) == {"item_ids": [5, 6, 7]}
    assert signals.task_log_fields("factgate.run_item", (5,)) == {"item_id": 5}  # unchanged
    assert signals.task_log_fields("factgate.run_items", ()) == {}
