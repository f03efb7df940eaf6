"""A ready worker moves its start-up objects out of the garbage collector (workers/bootsteps.py)."""

from __future__ import annotations

import gc

from celery import signals

import workers.bootsteps  # noqa: F401 - connects the signal handlers


def test_a_ready_worker_freezes_its_start_up_objects() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        signals.worker_ready.send(sender=None)
        # Everything tracked at that moment (this test process's modules, at least) is frozen.
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
