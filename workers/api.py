"""The public task API for other layers (web/, cli/): build a producer, enqueue by name, import no task code.

Sending by name keeps the web process free of worker imports (clients, limiter) and works with
whichever Celery app the caller was configured with. The Celery settings live here too, so the web
process, the workers and beat build their apps from one `celery_config` without the web process
importing `workers/app.py` (which builds the worker's app, tasks and dispatcher included). The import
contracts in pyproject.toml allow web/ this module and `workers/metrics.py`, nothing else of workers/.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from celery import Celery
from kombu import Exchange, Queue

from config import Settings
from config.redis_url import celery_redis_settings

START_JOB = "factgate.start_job"
DELIVER_WEBHOOKS = "factgate.deliver_webhooks"
FINISH_CANCEL = "factgate.finish_cancel"
PURGE = "factgate.purge"
DEFAULT_QUEUE = "celery"  # Celery's default queue name, which the web process also sends to


def enqueue_start(app: Celery, job_id: uuid.UUID | str) -> None:
    """Ask the workers to start a committed job (call only after the job's transaction commits)."""
    app.send_task(START_JOB, args=[str(job_id)])


def enqueue_finish_cancel(app: Celery, job_id: uuid.UUID | str) -> None:
    """Ask the workers to skip a just-cancelled job's pending items in batches and end it (after commit)."""
    app.send_task(FINISH_CANCEL, args=[str(job_id)])


def enqueue_purge_jobs(app: Celery) -> None:
    """Ask the workers to purge deleted and expired jobs now (after a commit that deleted some)."""
    app.send_task(PURGE)


def enqueue_webhooks(app: Celery) -> None:
    """Ask the workers to send due webhooks now (after a commit that made one due, e.g. a redelivery)."""
    app.send_task(DELIVER_WEBHOOKS)


def producer_celery(settings: Settings) -> Celery:
    """A Celery app that only sends (the web process, CLI clients): the workers' settings, no tasks."""
    app = Celery("factgate")
    app.conf.update(celery_config(settings))
    app.conf.factgate_settings = settings
    return app


def beat_schedule_path(settings: Settings) -> Path:
    """Where `factgate beat` keeps its schedule state: the instance folder."""
    return settings.instance_path.resolve() / "celerybeat-schedule"


def celery_config(settings: Settings) -> dict[str, object]:
    """Celery settings derived from ours; one place so web, worker and beat agree.

    Celery reads them, we never do: the values are whatever each setting takes (kombu queues, nested
    transport options), so `object` keeps any reader of ours from using one unchecked."""
    conf: dict[str, object] = {
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "timezone": "UTC",
        "enable_utc": True,
        # Redelivery is the database's job: a task lost with its worker leaves a lease that expires, a
        # message lost before it started leaves a stale dispatch, and both are sent again (item tasks are
        # idempotent: conditional claims). So in server mode the queue is consumed without
        # acknowledgements (below, and workers/broker.py), and in embedded mode a message is acknowledged
        # when its task starts. Late acks would add nothing — Redis only redelivers after the visibility
        # timeout — and they put an acknowledgement on every task's way out, which kombu flushes onto a
        # dead connection when Redis goes away, leaving the consumer unable to reconnect (seen in the
        # Redis-outage test). Without acknowledgements the prefetch limit does not bound what a worker
        # takes; the dispatcher's in-flight bound does (a few tens of messages per scope).
        "task_acks_late": False,
        "worker_prefetch_multiplier": 1,
        "worker_concurrency": settings.worker_concurrency,
        "worker_pool": "threads",
        "result_expires": 24 * 3600,
        "task_track_started": False,
        "task_ignore_result": False,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        # Beat keeps its last-run times in a shelve file; it belongs with our other state, not in the
        # current directory.
        "beat_schedule_filename": str(beat_schedule_path(settings)),
        "result_chord_retry_interval": 0.2,
        "beat_schedule": {
            "sweep": {"task": "factgate.sweep", "schedule": settings.sweep_interval_s},
            "purge": {"task": PURGE, "schedule": settings.purge_interval_s},
        },
    }
    if settings.embedded or not settings.redis_url:
        conf.update(
            broker_url="memory://",
            result_backend="cache+memory://",
            broker_transport_options={"polling_interval": 0.005},
        )
    else:
        # Broker, result backend and their reconnect settings for a plain or a Sentinel REDIS_URL, from the
        # one parser every Redis client of the product uses (config/redis_url.py). Tasks are consumed
        # without acknowledgements (workers/broker.py says why): a message leaves Redis when a worker
        # takes it, and redelivery is the database's job. A message must stay invisible for longer than
        # the longest task, or Redis hands it to a second worker while the first still runs it (the lease
        # then keeps the result single); only a queue consumed with acknowledgements keeps messages aside.
        conf.update(
            celery_redis_settings(settings.redis_url, visibility_timeout=max(3600, settings.lease_s * 4)),
            task_queues=[
                Queue(DEFAULT_QUEUE, Exchange(DEFAULT_QUEUE), routing_key=DEFAULT_QUEUE, no_ack=True)
            ],
            # The worker's broker reconnects in steps of at most a second (kombu's own: 2 s, 4 s, … 30 s).
            worker_consumer="workers.consumer:Consumer",
        )
    return conf
