"""The `claims` kind's pages and downloads: a CSV row per claim and mode, the scorecard report."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.orm import Session

from models import Job
from web.exports import claims_csv
from web.kinds import WebKind, register
from web.pages_claims import PAGE_SIZE, SHOW_CHOICES, claims_report


def report(session: Session, job: Job, args: Mapping[str, str], interactive: bool) -> dict[str, object]:
    claims = claims_report(session, job, args, page_size=PAGE_SIZE if interactive else None)
    return {
        "template": "report_claims.html",
        "claims": claims,
        "show_choices": SHOW_CHOICES,
        "interactive": interactive,
        "input_error": claims.explorer.error,
    }


KIND = register(WebKind("claims", csv=claims_csv, report=report))
