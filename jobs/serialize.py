"""The job object: the JSON every job endpoint returns (POST /v1/jobs, GET /v1/jobs/{id}, cancel, retry) and
every webhook carries. Layer-neutral (no Flask), so the web process and the workers build the same bytes.

Progress comes from item counts (jobs.progress) while a job runs, and from the counts stored on the job
row when it ended. Usage is the stored total once the job has been finalized, otherwise summed live from
`api_calls`, so a running job's cost is visible while it grows. Links are paths from the site's root
(factgate is served at the root of its host: `X-Forwarded-Prefix` is not read), the same ones the API's
routes have.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from jobs.progress import RequestCounts, job_counts, jobs_counts
from jobs.retention import Retention, environment_retention, expires_at
from jobs.usage import usage_totals, usage_totals_of
from models import Job, JobStatus, Tenant

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
ENDED_STATUSES = tuple(sorted(JobStatus.ended()))
LIVE_STATUSES = tuple(sorted(JobStatus.running()))  # the scheduler's view is shown while work is sent


def iso(value: datetime | None) -> str | None:
    """ISO 8601 with an explicit UTC offset, or None."""
    return None if value is None else value.isoformat()


def job_links(job: Job) -> dict[str, str]:
    """Where to go next: the API's paths for this job (see web/api.py) and its report page."""
    base = f"/v1/jobs/{job.id}"
    return {
        "self": base,
        "results": f"{base}/results",
        "errors": f"{base}/errors",
        "scorecard": f"{base}/scorecard",
        "cancel": f"{base}/cancel",
        "retry": f"{base}/retry",
        # The HTML report page is served by the pages blueprint; the path is part of the contract.
        "report": f"/jobs/{job.id}",
    }


def job_usage(session: Session, job: Job) -> dict[str, Any]:
    """Stored usage when the job has ended and been finalized, else live totals."""
    if job.status in ENDED_STATUSES and job.usage is not None:
        return dict(job.usage)
    return usage_totals(session, job.id)


def jobs_usage(session: Session, jobs: Sequence[Job]) -> dict[uuid.UUID, dict[str, Any]]:
    """`job_usage` of many jobs: stored ones as they are, the rest summed in one grouped query."""
    out = {j.id: dict(j.usage) for j in jobs if j.status in ENDED_STATUSES and j.usage is not None}
    live = [j.id for j in jobs if j.id not in out]
    if live:
        out.update(usage_totals_of(session, live))
    return out


def job_objects(
    session: Session, jobs: Sequence[Job], *, retention: Retention | None = None
) -> list[dict[str, Any]]:
    """The JSON status of many jobs (a list): the same objects as `job_object`, in a fixed number of queries
    whatever the number of jobs (stored figures for ended jobs, grouped queries for live ones)."""
    counts = jobs_counts(session, jobs)
    usage = jobs_usage(session, jobs)
    return [job_object(session, j, counts=counts[j.id], usage=usage[j.id], retention=retention) for j in jobs]


def retention_days(session: Session, job: Job, retention: Retention | None = None) -> int:
    """The number of days the job's tenant keeps ended jobs (its own, bounded by the operator's maximum, or
    the default). The tenant row is usually in the session already (the caller authenticated as it)."""
    tenant = session.get(Tenant, job.tenant_id)
    policy = retention or environment_retention()
    return policy.days_for(None if tenant is None else tenant.retention_days)


def job_object(
    session: Session,
    job: Job,
    *,
    counts: RequestCounts | None = None,
    usage: dict[str, Any] | None = None,
    retention: Retention | None = None,
) -> dict[str, Any]:
    """The JSON status of one job (see the `Job` schema in web/openapi.py). `counts` and `usage` when the
    caller already has them (job_objects); `retention` is the operator's policy (else the environment's:
    a webhook is built where no Settings are at hand)."""
    usage = job_usage(session, job) if usage is None else usage
    counts = job_counts(session, job) if counts is None else counts
    out: dict[str, Any] = {
        "id": str(job.id),
        "object": "job",
        "kind": job.kind,
        "status": job.status,
        "options": job.options,
        "metadata": job.meta,
        "warnings": list(job.warnings or []),
        "request_counts": counts.as_dict(),
        # Null when `request_counts` is exact; a running job's counts may be the scheduler's latest, then
        # this says when they were counted.
        "request_counts_as_of": iso(counts.as_of),
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
        # When its results are purged (jobs/retention.py; null while live), and when they were.
        "expires_at": iso(expires_at(job, retention_days(session, job, retention))),
        "purged_at": iso(job.purged_at),
        "links": job_links(job),
    }
    if job.simulated:
        out["simulated_note"] = SIMULATED_NOTE
    return out


def job_json(session: Session, job: Job) -> str:
    """The job object as the exact text a webhook sends (compact, UTF-8 kept as is)."""
    return json.dumps(job_object(session, job), ensure_ascii=False, separators=(",", ":"))
