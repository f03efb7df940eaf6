"""The Celery app, bound to settings. `celery -A workers.app worker` is what `factgate worker` runs.

Server mode uses Redis as broker and result store; embedded mode (no DATABASE_URL / REDIS_URL) uses kombu's
in-memory transport and an in-memory result store, with the worker running inside the same process. The
settings themselves are `workers/api.py:celery_config` (shared with the web process's producer app). Their
polling intervals are short because in-memory transports poll: every message and every window's join
waits up to one interval, which at Celery's defaults makes an embedded job crawl (measured:
docs/profiles/README.md, "In-memory transports poll").
"""

from __future__ import annotations

from celery import Celery

from config import Settings
from workers.api import producer_celery
from workers.kinds import require_all


def make_celery(settings: Settings, *, with_tasks: bool = True) -> Celery:
    """A Celery app for these settings.

    Workers register factgate's tasks; producers pass `with_tasks=False` and enqueue by task name. The web
    process uses `workers.api.producer_celery` instead, which builds the same app without importing this
    module (importing it builds the worker's app, and so the client, limiter and task code).
    """
    app = producer_celery(settings)
    if with_tasks:
        from workers import priority  # noqa: F401, PLC0415 - connects its worker_init handler
        from workers.bootsteps import (  # noqa: PLC0415 - workers only; producers skip it
            ConsumeWhileFitStep,
            DispatcherStep,
            WebhookSendersStep,
        )

        require_all()  # a kind without its handlers fails here, not on its first item
        app.autodiscover_tasks(["workers"], related_name="tasks", force=True)
        app.steps["worker"].add(DispatcherStep)
        app.steps["worker"].add(WebhookSendersStep)
        app.steps["consumer"].add(ConsumeWhileFitStep)
    return app


celery_app = make_celery(Settings.from_env())
app = celery_app
