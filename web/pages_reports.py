"""Which report a job gets and what its template receives: the kind's web part says (web/kinds/).

The job page and the downloadable report file render the same report templates; `interactive`
says whether links back into the app (filters, pages, request lookup, the cutoff explorer) may be
drawn. The file has none: it must read the same wherever it is opened.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.orm import Session

from models import Job
from web.kinds import KINDS


def report_context(
    session: Session, job: Job, args: Mapping[str, str], *, interactive: bool
) -> Mapping[str, object] | None:
    """The report template and its data (the kind's web part, web/kinds/), or None for an unknown kind."""
    part = KINDS.find(job.kind)
    return None if part is None else part.report(session, job, args, interactive)
