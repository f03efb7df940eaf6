"""What the jobs list and the job page show about a job: progress, counts, cost, times, actions.

Progress is counted from items (jobs.progress) while a job runs, and read from the counts stored on the
job row once it has ended; the same numbers feed the page and the small JSON endpoint the page polls. A
list of jobs gets its counts and usage in a fixed number of grouped queries (`job_views`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from pydantic import JsonValue
from sqlalchemy.orm import Session

from checks.recipes import RECIPES
from jobs.progress import RequestCounts, job_counts, jobs_counts
from jobs.retention import Retention, expires_at
from jobs.serialize import retention_days
from models import Job, JobStatus, utcnow
from models.jobs import UsageTotals
from web.exports import CSV_RENDERERS, RESULT_ITERATORS
from web.pages_format import duration, usd, when
from web.session import settings
from web.status import ENDED_STATUSES, SIMULATED_NOTE, job_usage, jobs_usage

# The page polls a job until it ends (`validating` included: its items are still being built).
LIVE_STATUSES = JobStatus.live()
CANCELLABLE = JobStatus.cancellable()


def kind_title(kind: str) -> str:
    """The kind's title from its recipe; an unknown kind (a row written by a newer version) shows its name."""
    recipe = RECIPES.find(kind)
    return recipe.title if recipe is not None else kind


@dataclass(frozen=True)
class JobView:
    """One job as the pages show it."""

    id: str
    kind: str
    kind_title: str
    status: str
    counts: RequestCounts
    percent: float
    usage: UsageTotals
    cost_usd: float
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    elapsed_s: float | None
    live: bool
    ended: bool
    can_cancel: bool
    can_retry: bool
    can_delete: bool  # an ended job (a live one is cancelled first)
    expires_at: datetime | None  # when its results are purged under its tenant's retention
    purged_at: datetime | None  # when they were: the row and summary remain, the items do not
    has_results: bool
    has_csv: bool
    simulated: bool
    simulated_note: str
    warnings: list[str]
    error: str | None
    metadata: dict[str, JsonValue]  # the caller's own object, as submitted
    options: dict[str, JsonValue]
    schedule: str  # what the scheduler says about a live job (its share, ETA, or why it waits); "" otherwise
    counts_note: str  # when the counts are the scheduler's latest rather than exact now; "" when exact


def counts_note(counts: RequestCounts) -> str:
    """Says that a running job's counts are the scheduler's latest, and as of when; "" when exact."""
    return "" if counts.as_of is None else f"Counts as of {when(counts.as_of)}, refreshed every few seconds."


def schedule_text(job: Job) -> str:
    """One line on where a live job stands with the scheduler: why it waits, or its share and ETA."""
    view = job.schedule if job.status in JobStatus.running() else None
    if not view:
        return ""
    if view.get("state") == "held":
        resumes = str(view.get("resumes_at") or "")[:16].replace("T", " ")
        reason = view.get("held_reason")
        return f"Held: {reason}. It resumes at {resumes} UTC, or as soon as the budget is raised."
    parts: list[str] = []
    share = view.get("share")
    if isinstance(share, int | float) and share > 0:
        parts.append(f"{share * 100:.0f} % of the {view.get('endpoint') or 'upstream'} rate limit")
    rate = view.get("rate_per_s")
    if isinstance(rate, int | float) and rate > 0:
        parts.append(f"{rate:.1f} items/s")
    eta = view.get("eta_s")
    if isinstance(eta, int | float):
        parts.append(f"about {duration(float(eta))} left")
    return "Scheduler: " + ", ".join(parts) + "." if parts else ""


def percent_done(counts: RequestCounts, ended: bool) -> float:
    """Share of items in a terminal state; an ended job is 100 % (nothing more will happen)."""
    if ended:
        return 100.0
    if counts.total == 0:
        return 0.0
    return round(100.0 * counts.terminal / counts.total, 1)


def _ended_at(job: Job) -> datetime | None:
    return job.completed_at or job.cancelled_at or job.failed_at


def job_views(session: Session, jobs: Sequence[Job]) -> list[JobView]:
    """The views of a list of jobs, with their counts and usage read in grouped queries."""
    counts = jobs_counts(session, jobs)
    usage = jobs_usage(session, jobs)
    return [job_view(session, j, counts=counts[j.id], usage=usage[j.id]) for j in jobs]


def job_view(
    session: Session,
    job: Job,
    *,
    counts: RequestCounts | None = None,
    usage: UsageTotals | None = None,
    retention: Retention | None = None,
) -> JobView:
    """`retention` for a caller outside the app context (a streamed report file), else the app's."""
    counts = job_counts(session, job) if counts is None else counts
    policy = retention or Retention.of(settings())
    ended = job.status in ENDED_STATUSES
    usage = job_usage(session, job) if usage is None else usage
    started = job.started_at or job.queued_at or job.created_at
    ended_at = _ended_at(job)
    elapsed: float | None = None
    if started is not None:
        until = ended_at if ended and ended_at is not None else utcnow()
        elapsed = max(0.0, (until - started).total_seconds())
    return JobView(
        id=str(job.id),
        kind=job.kind,
        kind_title=kind_title(job.kind),
        status=job.status,
        counts=counts,
        percent=percent_done(counts, ended),
        usage=usage,
        cost_usd=float(usage.get("cost_usd") or 0.0),
        created_at=job.created_at,
        started_at=job.started_at,
        ended_at=ended_at,
        elapsed_s=elapsed,
        live=job.status in LIVE_STATUSES,
        ended=ended,
        can_cancel=job.status in CANCELLABLE,
        can_retry=ended and counts.failed > 0 and job.purged_at is None,
        can_delete=ended,
        expires_at=expires_at(job, retention_days(session, job, policy)),
        purged_at=job.purged_at,
        has_results=job.kind in RESULT_ITERATORS and job.purged_at is None,
        has_csv=job.kind in RESULT_ITERATORS and job.kind in CSV_RENDERERS and job.purged_at is None,
        simulated=bool(job.simulated),
        simulated_note=SIMULATED_NOTE,
        warnings=[str(w) for w in (job.warnings or [])],
        error=job.error,
        metadata=dict(job.meta or {}),
        # The webhook URL may carry the receiver's token in its query: the job page shows it in its Webhooks
        # panel, the overview (which the downloadable report file shares) leaves it out.
        options={k: v for k, v in (job.options or {}).items() if k != "webhook_url"},
        schedule=schedule_text(job),
        counts_note=counts_note(counts),
    )


class ProgressText(TypedDict):
    """The poll's figures as the page writes them."""

    percent: str
    cost: str
    elapsed: str
    status: str
    schedule: str
    counts_as_of: str


class Progress(TypedDict):
    """The JSON body the job page's script polls (`/jobs/<id>/progress.json`)."""

    status: str
    ended: bool
    percent: float
    counts: dict[str, int]
    cost_usd: float
    elapsed_s: float | None
    text: ProgressText


def progress_payload(session: Session, job: Job) -> Progress:
    """What the job page's script polls: enough to move the bar and the counters, nothing more."""
    view = job_view(session, job)
    return {
        "status": view.status,
        "ended": view.ended,
        "percent": view.percent,
        "counts": view.counts.as_dict(),
        "cost_usd": view.cost_usd,
        "elapsed_s": None if view.elapsed_s is None else round(view.elapsed_s, 1),
        # Formatted here so the script only sets text and the page and the poll agree.
        "text": {
            "percent": f"{view.percent:.0f} %",
            "cost": usd(view.cost_usd),
            "elapsed": duration(view.elapsed_s),
            "status": view.status.replace("_", " "),
            "schedule": view.schedule,
            "counts_as_of": view.counts_note,
        },
    }
