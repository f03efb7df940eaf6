"""The job status object every job endpoint returns: built by jobs/serialize.py, which the workers use for
webhooks too, so the API and a webhook say the same thing about a job.

Re-exported here for the web layer's callers (web/api.py, web/pages_jobs.py).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from jobs.progress import RequestCounts, request_counts
from jobs.retention import Retention
from jobs.serialize import (
    ENDED_STATUSES,
    LIVE_STATUSES,
    SIMULATED_NOTE,
    TIMESTAMP_FIELDS,
    iso,
    job_links,
    job_model,
    job_objects,
    job_usage,
    jobs_usage,
)
from jobs.usage import usage_totals
from models import Job, JobStatus
from models.jobs import UsageTotals
from web.session import settings

log = logging.getLogger("factgate.web")

# How old a running job's counts and live usage may be when `GET /v1/jobs/{id}` answers (seconds).
LIVE_FIGURES_MAX_AGE_S = 1.0
_LIVE_FIGURES_MAX_JOBS = 1_024

__all__ = [
    "ENDED_STATUSES",
    "LIVE_STATUSES",
    "SIMULATED_NOTE",
    "TIMESTAMP_FIELDS",
    "LiveFigures",
    "iso",
    "job_links",
    "job_usage",
    "jobs_usage",
    "live_status_object",
    "status_object",
    "status_objects",
]


def status_object(session: Session, job: Job) -> dict[str, Any]:
    """The JSON status of one job (see the `Job` schema in web/openapi.py)."""
    return job_model(session, job, retention=Retention.of(settings())).as_json()


def status_objects(session: Session, jobs: Sequence[Job]) -> list[dict[str, Any]]:
    """The JSON status of many jobs (GET /v1/jobs), in a fixed number of queries."""
    return job_objects(session, jobs, retention=Retention.of(settings()))


class LiveFigures:
    """A running job's item counts and usage, shared by a web process's threads, at most
    LIVE_FIGURES_MAX_AGE_S old (plus the time one refresh takes).

    Both are counts over the job's rows (items through `ix_items_job_status`, calls through
    `ix_api_calls_job`), so a status poll of a running job cost what the job holds: 4 of a poll's 5
    queries and about half its CPU, on a machine where the workers want every core. Polls of one job now
    share one count a second per web process: the first poll counts (nothing to show before), and a poll
    that finds the figures older than the limit answers with them at once and has one thread refresh
    them in the background, so no poll waits for a count after the first. The job row itself (status,
    timestamps, schedule) is read by every poll; the figures are keyed by the job's status, so a job that
    changes state is counted again at once, and an ended job shows the exact totals stored with it.
    The trade-off: a running job's `request_counts` and `usage` may be a second behind its items.
    """

    def __init__(self, max_age_s: float = LIVE_FIGURES_MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._figures: dict[tuple[uuid.UUID, str], tuple[float, RequestCounts, UsageTotals]] = {}
        self._refreshing: set[tuple[uuid.UUID, str]] = set()

    def get(
        self, session: Session, sessions: sessionmaker[Session], job: Job
    ) -> tuple[RequestCounts, UsageTotals]:
        key = (job.id, job.status)
        now = time.monotonic()
        with self._lock:
            hit = self._figures.get(key)
            stale = hit is not None and now - hit[0] >= self.max_age_s and key not in self._refreshing
            if stale:
                self._refreshing.add(key)
        if hit is None:
            return self._count(session, key)
        if stale:
            threading.Thread(target=self._refresh, args=(sessions, key), daemon=True).start()
        return hit[1], hit[2]

    def _count(self, session: Session, key: tuple[uuid.UUID, str]) -> tuple[RequestCounts, UsageTotals]:
        at = time.monotonic()
        counts, usage = request_counts(session, key[0]), usage_totals(session, key[0])
        with self._lock:
            if len(self._figures) >= _LIVE_FIGURES_MAX_JOBS:
                self._figures.clear()
            self._figures[key] = (at, counts, usage)
        return counts, usage

    def _refresh(self, sessions: sessionmaker[Session], key: tuple[uuid.UUID, str]) -> None:
        try:
            with sessions() as session:
                self._count(session, key)
        except Exception:
            log.warning("could not refresh the live figures of job %s", key[0], exc_info=True)
        finally:
            with self._lock:
                self._refreshing.discard(key)


LIVE_FIGURES = LiveFigures()


def live_status_object(session: Session, sessions: sessionmaker[Session], job: Job) -> dict[str, Any]:
    """`status_object` for a poll: a running job's counts and usage from `LIVE_FIGURES` (at most a second
    old); a job in any other state (validating, finalizing, ended) exactly as `status_object` builds it."""
    retention = Retention.of(settings())
    if job.status not in JobStatus.live() or job.status == JobStatus.VALIDATING:
        return job_model(session, job, retention=retention).as_json()
    counts, usage = LIVE_FIGURES.get(session, sessions, job)
    return job_model(session, job, counts=counts, usage=usage, retention=retention).as_json()
