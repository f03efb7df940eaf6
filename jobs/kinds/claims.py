"""The `claims` kind's state changes: an item per claim and mode; summary and result lines from them."""

from __future__ import annotations

from sqlalchemy.orm import Session

from checks.kinds.claims import ClaimsSummary
from jobs.claims import build_claim_items, claim_results_page, claim_units, claims_summary, load_claim_rows
from jobs.claims_report import calibration_sums
from jobs.kinds import JobKind, register
from models import Job


def summarize(session: Session, job: Job) -> ClaimsSummary:
    """The scorecards at the job's cutoffs, and the calibration bins: stored at finalize, so the report page
    reads them instead of counting every item per view."""
    summary = claims_summary(session, job)
    return summary.model_copy(update={"calibration": calibration_sums(session, job.id)})


KIND = register(
    JobKind(
        "claims",
        units=claim_units,
        summarize=summarize,
        results_page=claim_results_page,
        load=load_claim_rows,
        build=build_claim_items,
    )
)
