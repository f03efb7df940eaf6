"""The job status object every job endpoint returns (POST /v1/jobs, GET /v1/jobs/{id}, cancel, retry).

Progress comes from item counts (jobs.progress), never from the job row, which is only written at
state changes. Usage is the stored total once the job has been finalized, otherwise summed live from
`api_calls`, so a running job's cost is visible while it grows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import url_for
from sqlalchemy.orm import Session

from jobs.progress import request_counts
from jobs.usage import usage_totals
from models import Job

SIMULATED_NOTE = "results come from the bundled simulator, not Perplexity"
TIMESTAMP_FIELDS = (
    "created_at",
    "queued_at",
    "started_at",
    "finalizing_at",
    "completed_at",
    "cancelling_at",
    "cancelled_at",
    "failed_at",
)
ENDED_STATUSES = ("completed", "cancelled", "failed")
LIVE_STATUSES = ("queued", "in_progress")


def iso(value: datetime | None) -> str | None:
    """ISO 8601 with an explicit UTC offset, or None."""
    return None if value is None else value.isoformat()


def job_links(job: Job) -> dict[str, str]:
    """Where to go next; relative URLs so they work behind any proxy prefix."""
    jid = str(job.id)
    return {
        "self": url_for("api.get_job", job_id=jid),
        "results": url_for("api.job_results", job_id=jid),
        "errors": url_for("api.job_errors", job_id=jid),
        "scorecard": url_for("api.job_scorecard", job_id=jid),
        "cancel": url_for("api.cancel_job", job_id=jid),
        "retry": url_for("api.retry_job", job_id=jid),
        # The HTML report page is served by the pages blueprint; the path is part of the contract.
        "report": f"/jobs/{jid}",
    }


def job_usage(session: Session, job: Job) -> dict[str, Any]:
    """Stored usage when the job has ended and been finalized, else live totals."""
    if job.status in ENDED_STATUSES and job.usage is not None:
        return dict(job.usage)
    return usage_totals(session, job.id)


def status_object(session: Session, job: Job) -> dict[str, Any]:
    """The JSON status of one job (see the `Job` schema in web/openapi.py)."""
    usage = job_usage(session, job)
    out: dict[str, Any] = {
        "id": str(job.id),
        "object": "job",
        "kind": job.kind,
        "status": job.status,
        "options": job.options,
        "metadata": job.meta,
        "warnings": list(job.warnings or []),
        "request_counts": request_counts(session, job.id).as_dict(),
        "usage": usage,
        "cost_usd": usage.get("cost_usd", 0.0),
        "timestamps": {name: iso(getattr(job, name)) for name in TIMESTAMP_FIELDS},
        "simulated": bool(job.simulated),
        "priority": job.priority,
        # The scheduler's view while the job is live: its share of the upstream, rate, ETA (null otherwise).
        "schedule": job.schedule if job.status in LIVE_STATUSES else None,
        "error": job.error,
        # Written when the job is finalized (completed, or cancelled with partial totals); null before.
        "summary": job.summary,
        "links": job_links(job),
    }
    if job.simulated:
        out["simulated_note"] = SIMULATED_NOTE
    return out
