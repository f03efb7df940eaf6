"""The public task API for other layers (web/, cli/): enqueue by name, import no task code.

Sending by name keeps the web process free of worker imports (clients, limiter) and works with
whichever Celery app the caller was configured with.
"""

from __future__ import annotations

import uuid

from celery import Celery

START_JOB = "factgate.start_job"
DELIVER_WEBHOOKS = "factgate.deliver_webhooks"


def enqueue_start(app: Celery, job_id: uuid.UUID | str) -> None:
    """Ask the workers to start a committed job (call only after the job's transaction commits)."""
    app.send_task(START_JOB, args=[str(job_id)])


def enqueue_webhooks(app: Celery) -> None:
    """Ask the workers to send due webhooks now (after a commit that made one due, e.g. a redelivery)."""
    app.send_task(DELIVER_WEBHOOKS)
