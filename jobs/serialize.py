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
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, WithJsonSchema
from sqlalchemy.orm import Session

from checks.contracts import schema_of
from checks.fairness import PRIORITIES
from jobs.progress import RequestCounts, job_counts, jobs_counts
from jobs.retention import Retention, environment_retention, expires_at
from jobs.usage import usage_totals, usage_totals_of
from models import JOB_STATUSES, Job, JobStatus, Tenant
from models.jobs import UsageTotals

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


_REF = "#/components/schemas/{}"
# A time as the job object writes it: ISO 8601 with an explicit UTC offset (`iso`).
Stamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


_COMPONENT = "x-factgate-component"
# A JSON object the job carries as it is stored: its options (validated at intake by its kind's recipe), the
# caller's metadata, its kind's summary (validated by the kind's contract when written). `JsonValue` lets
# mypy check what reads them; the published schema stays a plain object.
JsonObject = Annotated[dict[str, JsonValue], WithJsonSchema({"additionalProperties": True, "type": "object"})]
# Live totals, or the ones stored at finalize as they were written then (models/jobs.py:UsageTotals): passed
# through as they are, not validated against today's keys. Named here: a field of `JobObject` is `object`.
UsageObject = Mapping[str, object]


def _described(name: str) -> WithJsonSchema:
    """A field whose schema is a hand-written component of web/openapi.py (its prose states limits). Marked
    here and made a reference by `job_schema`: pydantic resolves every `$ref` among its own models."""
    return WithJsonSchema({_COMPONENT: name})


class JobTimestamps(BaseModel):
    """ISO 8601 (UTC) time the job entered each state; null if it has not."""

    created_at: Stamp | None
    queued_at: Stamp | None
    started_at: Stamp | None
    finalizing_at: Stamp | None
    completed_at: Stamp | None
    cancelling_at: Stamp | None
    cancelled_at: Stamp | None
    failed_at: Stamp | None


class JobLinks(BaseModel):
    """Where to go next: the API's paths for this job, and its report page."""

    self: str
    results: str
    errors: str
    scorecard: str
    cancel: str
    retry: str
    report: str


class JobObject(BaseModel):
    """The job object: what every job endpoint returns and every webhook carries. Its OpenAPI component,
    `Job`, is generated from this model (web/openapi.py); the nested objects whose prose states limits
    (`Metadata`, `RequestCounts`, `Usage`) stay hand-written there."""

    model_config = ConfigDict(title="Job", extra="forbid")

    id: Annotated[str, Field(json_schema_extra={"format": "uuid"})]
    object: Literal["job"]
    # The registered kinds fill the enum when the document is served (web/openapi.py).
    kind: Annotated[str, Field(json_schema_extra={"enum": []})]
    status: Annotated[
        str,
        Field(
            json_schema_extra={"enum": list(JOB_STATUSES)},
            description="`validating`: a large streamed submission was accepted (every row valid) and its "
            "items are being built; `request_counts` already counts them, all pending, and the job moves "
            "on to `queued` by itself. Then `queued`, `in_progress`, `finalizing`, and one of `completed`, "
            "`cancelled`, `failed`; `cancelling` after a cancel.",
        ),
    ]
    options: Annotated[JsonObject, Field(description="The validated options, defaults filled in.")]
    metadata: Annotated[JsonObject, _described("Metadata")]
    warnings: list[str]
    request_counts: Annotated[dict[str, int], _described("RequestCounts")]
    request_counts_as_of: Annotated[
        Stamp | None,
        Field(
            description="Null when `request_counts` is exact. In a list, a running job's counts are the "
            "scheduler's latest (refreshed every few seconds) rather than counted for the request; this is "
            "when they were counted."
        ),
    ]
    usage: Annotated[UsageObject, _described("Usage")]
    cost_usd: float
    timestamps: JobTimestamps
    simulated: Annotated[bool, Field(description="True when the bundled simulator answered.")]
    priority: Annotated[str, Field(json_schema_extra={"enum": list(PRIORITIES)})]
    schedule: Annotated[
        dict[str, JsonValue] | None,
        WithJsonSchema(
            {
                "type": ["object", "null"],
                "properties": {
                    "state": {"type": "string"},
                    "endpoint": {"type": ["string", "null"]},
                    "share": {"type": "number"},
                    "rate_per_s": {"type": "number"},
                    "remaining": {"type": "integer"},
                    "eta_s": {"type": ["number", "null"]},
                    "estimated_completion_at": {"type": ["string", "null"], "format": "date-time"},
                    "estimated_start_at": {"type": ["string", "null"], "format": "date-time"},
                    "counts": {
                        "type": "object",
                        "additionalProperties": {"type": "integer"},
                        "description": "Its items by status (as `request_counts`) when the view was written.",
                    },
                    "updated_at": {"type": "string", "format": "date-time"},
                },
            }
        ),
        Field(
            description="While the job is queued or running, the scheduler's view, refreshed every few "
            "seconds: `state` (waiting | running | held), `endpoint` (the scope its work waits in), `share` "
            "(its fraction of that scope's rate limit), `rate_per_s`, `remaining` items, `eta_s`, "
            "`estimated_completion_at`, `estimated_start_at` (before its first item is sent), `counts` (its "
            "items by status when the view was written), `updated_at`. Null once the job has ended."
        ),
    ]
    error: str | None
    # The kind's summary model, written when the job is finalized (web/openapi.py names them all).
    summary: Annotated[
        JsonObject | None,
        Field(description="Report totals, written when the job ends: the kind's summary."),
    ]
    expires_at: Annotated[
        Stamp | None,
        Field(
            description="When the job's results are purged under its tenant's retention "
            "(FACTGATE_RETENTION_DAYS after it ended, or the tenant's own days); null while it is live. "
            "Purged then: its items, their inputs and outputs (results, passages, reports), its errors and "
            "its per-attempt call records (request-id lookups). Kept: this job object with its counts, "
            "usage and summary, for as many days again, and the tenant's usage roll-up (`/v1/usage`) for "
            "good."
        ),
    ]
    purged_at: Annotated[
        Stamp | None,
        Field(
            description="When its results were purged (then results, errors and scorecard are 410 "
            "`job_purged`); null before."
        ),
    ]
    links: JobLinks
    simulated_note: Annotated[
        str | None, Field(description="Only when simulated: results come from the bundled simulator.")
    ] = None
    retried: Annotated[int | None, Field(description="Only on POST .../retry: items sent again.")] = None
    message: Annotated[str | None, Field(description="Only on POST .../retry when nothing failed.")] = None

    def as_json(self) -> dict[str, Any]:
        """The JSON object: the fields set, in the order above (the optional ones only when set)."""
        return self.model_dump(exclude_unset=True)


def job_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """(schema, definitions) of `JobObject` for the OpenAPI components, its hand-written parts referenced."""
    schema, defs = schema_of(JobObject)
    # Unknown fields are refused when the object is built (a misspelt one is a bug), but the published
    # object may grow fields: a client must not reject one it does not know.
    schema.pop("additionalProperties", None)
    for prop in schema["properties"].values():
        name = prop.pop(_COMPONENT, None)
        if name is not None:
            prop["$ref"] = _REF.format(name)
    return schema, defs


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


def job_usage(session: Session, job: Job) -> UsageTotals:
    """Stored usage when the job has ended and been finalized, else live totals."""
    if job.status in ENDED_STATUSES and job.usage is not None:
        return job.usage.copy()
    return usage_totals(session, job.id)


def jobs_usage(session: Session, jobs: Sequence[Job]) -> dict[uuid.UUID, UsageTotals]:
    """`job_usage` of many jobs: stored ones as they are, the rest summed in one grouped query."""
    out = {j.id: j.usage.copy() for j in jobs if j.status in ENDED_STATUSES and j.usage is not None}
    live = [j.id for j in jobs if j.id not in out]
    if live:
        out.update(usage_totals_of(session, live))
    return out


def job_objects(
    session: Session, jobs: Sequence[Job], *, retention: Retention | None = None
) -> list[dict[str, Any]]:
    """The JSON status of many jobs (a list): the same objects as `job_model`'s, in a fixed number of queries
    whatever the number of jobs (stored figures for ended jobs, grouped queries for live ones)."""
    counts = jobs_counts(session, jobs)
    usage = jobs_usage(session, jobs)
    return [
        job_model(session, j, counts=counts[j.id], usage=usage[j.id], retention=retention).as_json()
        for j in jobs
    ]


def retention_days(session: Session, job: Job, retention: Retention | None = None) -> int:
    """The number of days the job's tenant keeps ended jobs (its own, bounded by the operator's maximum, or
    the default). The tenant row is usually in the session already (the caller authenticated as it)."""
    tenant = session.get(Tenant, job.tenant_id)
    policy = retention or environment_retention()
    return policy.days_for(None if tenant is None else tenant.retention_days)


def job_model(
    session: Session,
    job: Job,
    *,
    counts: RequestCounts | None = None,
    usage: UsageTotals | None = None,
    retention: Retention | None = None,
) -> JobObject:
    """The status of one job. `counts` and `usage` when the caller already has them (job_objects);
    `retention` is the operator's policy (else the environment's: a webhook is built where no Settings are
    at hand)."""
    usage = job_usage(session, job) if usage is None else usage
    counts = job_counts(session, job) if counts is None else counts
    model = JobObject(
        id=str(job.id),
        object="job",
        kind=job.kind,
        status=job.status,
        options=job.options,
        metadata=job.meta,
        warnings=list(job.warnings or []),
        request_counts=counts.as_dict(),
        # Null when `request_counts` is exact; a running job's counts may be the scheduler's latest, then
        # this says when they were counted.
        request_counts_as_of=iso(counts.as_of),
        usage=usage,
        cost_usd=usage.get("cost_usd", 0.0),
        timestamps=JobTimestamps(**{name: iso(getattr(job, name)) for name in TIMESTAMP_FIELDS}),
        simulated=bool(job.simulated),
        priority=job.priority,
        # The scheduler's view while the job is live: its share of the upstream, rate, ETA (null otherwise).
        schedule=job.schedule if job.status in LIVE_STATUSES else None,
        error=job.error,
        # Written when the job is finalized (completed, or cancelled with partial totals); null before.
        summary=job.summary,
        # When its results are purged (jobs/retention.py; null while live), and when they were.
        expires_at=iso(expires_at(job, retention_days(session, job, retention))),
        purged_at=iso(job.purged_at),
        links=JobLinks(**job_links(job)),
    )
    if job.simulated:
        model.simulated_note = SIMULATED_NOTE
    return model


def job_json(session: Session, job: Job) -> str:
    """The job object as the exact text a webhook sends (compact, UTF-8 kept as is)."""
    return json.dumps(job_model(session, job).as_json(), ensure_ascii=False, separators=(",", ":"))
