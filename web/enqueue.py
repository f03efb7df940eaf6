"""Messages the views send after their commit, shared by the API and the pages. A broker outage never
fails the request: each message has a sweeper backstop that finds the same work in the database."""

from __future__ import annotations

import logging

from models import Job
from web.session import resources
from workers.api import enqueue_finish_cancel, enqueue_purge_jobs

log = logging.getLogger("factgate.web")


def enqueue_cancel(job: Job) -> None:
    """`factgate.finish_cancel` for a job just marked cancelling (after commit): its pending items are
    skipped in batches. If it is lost, the sweeper sends it for every cancelling job with pending items."""
    try:
        enqueue_finish_cancel(resources().celery, job.id)
    except Exception:
        log.exception("could not enqueue finish_cancel for job %s; the sweeper will", job.id)


def enqueue_purge() -> None:
    """`factgate.purge` now, after a commit that deleted jobs; beat runs it every FACTGATE_PURGE_INTERVAL_S
    anyway, so a lost message only delays the purge (the deleted rows are invisible meanwhile)."""
    try:
        enqueue_purge_jobs(resources().celery)
    except Exception:
        log.exception("could not enqueue the purge; beat will run it")
