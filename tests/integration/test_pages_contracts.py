"""Pages read stored JSON through the kinds' contracts; what an older version stored still renders.

A claims summary written before a scorecard figure existed does not validate as today's `ClaimsSummary`: the
report replays the scorecard from the stored probabilities instead of failing the page.
"""

# Fixtures are imported from web_fixtures, so their names reappear as parameters.
# ruff: noqa: F811

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import update

from models import Job, session_scope
from tests.e2e.builders import finalize, reference_rows, settle, simulated_outcomes, submit_claims
from tests.integration.test_pages import html, sign_in
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)

pytestmark = pytest.mark.integration


def test_a_claims_summary_stored_without_a_newer_figure_is_replayed_on_the_report(
    web: WebEnv, caller: Caller
) -> None:
    rows = reference_rows()[:4]
    job_id = submit_claims(web.client.post, caller.json_headers(), rows, mode="grounded")
    settle(web.sessions, job_id, simulated_outcomes(rows, ["grounded"]))
    finalize(web.sessions, job_id)
    stored = web.job(job_id).summary
    assert stored is not None
    old = {**stored, "scorecards": {m: {k: v for k, v in card.items() if k != "mean_queue_wait_s"}
                                    for m, card in stored["scorecards"].items()}}  # fmt: skip
    with session_scope(web.sessions) as session:
        session.execute(update(Job).where(Job.id == uuid.UUID(job_id)).values(summary=old))
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{job_id}"))
    assert "could not be computed" not in page
    assert "Cost / 1,000" in page  # the scorecard is there, replayed
