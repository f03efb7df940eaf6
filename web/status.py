"""The job status object every job endpoint returns: built by jobs/serialize.py, which the workers use for
webhooks too, so the API and a webhook say the same thing about a job.

Re-exported here for the web layer's callers (web/api.py, web/pages_jobs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from jobs.retention import Retention
from jobs.serialize import (
    ENDED_STATUSES,
    LIVE_STATUSES,
    SIMULATED_NOTE,
    TIMESTAMP_FIELDS,
    iso,
    job_links,
    job_object,
    job_objects,
    job_usage,
    jobs_usage,
)
from models import Job
from web.session import settings

__all__ = [
    "ENDED_STATUSES",
    "LIVE_STATUSES",
    "SIMULATED_NOTE",
    "TIMESTAMP_FIELDS",
    "iso",
    "job_links",
    "job_usage",
    "jobs_usage",
    "status_object",
    "status_objects",
]


def status_object(session: Session, job: Job) -> dict[str, Any]:
    """The JSON status of one job (see the `Job` schema in web/openapi.py)."""
    return job_object(session, job, retention=Retention.of(settings()))


def status_objects(session: Session, jobs: Sequence[Job]) -> list[dict[str, Any]]:
    """The JSON status of many jobs (GET /v1/jobs), in a fixed number of queries."""
    return job_objects(session, jobs, retention=Retention.of(settings()))
