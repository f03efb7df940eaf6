"""What a worker process runs beside its task pool: the dispatcher loop (workers/dispatcher.py).

A Celery bootstep ties the loop's life to the worker's, in server mode (`celery worker`) and in embedded
mode (the in-process `WorkController`) alike. Every worker runs it; a Redis lock lets one of them lead.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps

from workers.context import get_context
from workers.dispatcher import Dispatcher


class DispatcherStep(bootsteps.StartStopStep):
    """Start the dispatcher loop with the worker and stop it on shutdown."""

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.dispatcher: Dispatcher | None = None

    def start(self, parent: Any) -> None:
        if self.dispatcher is None:
            self.dispatcher = Dispatcher(get_context(parent.app), parent.app).start()

    def stop(self, parent: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()
            self.dispatcher = None

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)
