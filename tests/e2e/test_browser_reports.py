"""Answer and quote reports end to end in headless Chromium, produced by the real pipeline.

The app runs in embedded mode (SQLite in a temporary instance folder, the in-process Celery worker
and sweeper, the bundled simulator in place of Perplexity): jobs are submitted through the API and
run by the same tasks as in production, then their reports are opened in the browser. Screenshots
go to test-artifacts/ (and docs/screenshots/ with FACTGATE_UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from models import Job
from tests.e2e.browser import chromium, embedded_app, save_screenshot, serve, sign_in
from tests.e2e.builders import reference_rows

pytestmark = pytest.mark.e2e

ENDED = ("completed", "cancelled", "failed")
ANSWER_QUESTIONS = [
    ("nobel", "Who won the 2024 Nobel Prize in Physics and for what work?"),
    ("k2-18b", "What did the James Webb Space Telescope discover about exoplanet K2-18b?"),
]
QUOTE_QUESTIONS = [
    ("bones", "How many bones are in the adult human body?"),
    ("rivets", "How many rivets are in the railing of the Eiffel Tower's second floor?"),
]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Flask, str]]:
    """The embedded app with its worker running, and a token for one tenant."""
    with embedded_app(tmp_path_factory.mktemp("embedded"), "e2e-embedded") as pair:
        yield pair


def run_job(app: Flask, token: str, kind: str, questions: list[tuple[str, str]]) -> str:
    """Submit through the API and wait (watching the database) until the job ends."""
    resp = app.test_client().post(
        "/v1/jobs",
        json={"kind": kind, "items": [{"id": cid, "question": q} for cid, q in questions]},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)[:500]
    job_id: str = resp.get_json()["id"]
    wait_for(app, job_id)
    return job_id


def wait_for(app: Flask, job_id: str) -> None:
    """Watch the database (the source of truth) until the job ends; it must complete."""
    sessions = app.extensions["factgate"].sessions
    deadline = time.monotonic() + 120
    status = ""
    while time.monotonic() < deadline:
        with sessions() as session:
            job = session.get(Job, uuid.UUID(job_id))
            status = job.status if job is not None else ""
        if status in ENDED:
            break
        time.sleep(0.2)
    assert status == "completed", status


def run_claims(app: Flask, token: str) -> str:
    resp = app.test_client().post(
        "/v1/jobs",
        json={"kind": "claims", "options": {"mode": "both"}, "items": reference_rows()},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)[:500]
    job_id: str = resp.get_json()["id"]
    wait_for(app, job_id)
    return job_id


def open_report(page: Any, base: str, token: str, job_id: str) -> None:
    sign_in(page, base, token)
    page.goto(f"{base}/jobs/{job_id}")
    page.wait_for_selector("#questions")
    assert page.eval_on_selector("#job-progress", "e => [e.value, e.max]") == [100, 100]
    assert page.inner_text("[data-field=percent]").strip() == "100 %"


def test_claims_report_in_browser(embedded: tuple[Flask, str]) -> None:
    """The 24 reference claims in both modes: ungrounded misses, grounded gets all right (docs/spec.md §2)."""
    app, token = embedded
    job_id = run_claims(app, token)
    with serve(app) as base, chromium() as (page, watch):
        sign_in(page, base, token)
        page.goto(f"{base}/jobs/{job_id}")
        page.wait_for_selector("#claims")
        assert page.eval_on_selector("#job-progress", "e => [e.value, e.max]") == [100, 100]
        cards = page.locator(".card")
        assert "acceptance not met" in cards.nth(0).inner_text()  # ungrounded
        assert "acceptance met" in cards.nth(1).inner_text()  # grounded
        assert page.locator("#claims tbody tr").count() == 24
        save_screenshot(page, "claims-report", docs=True)
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


def test_answer_report_in_browser(embedded: tuple[Flask, str]) -> None:
    app, token = embedded
    job_id = run_job(app, token, "answer", ANSWER_QUESTIONS)
    with serve(app) as base, chromium() as (page, watch):
        open_report(page, base, token, job_id)
        assert page.locator("article[aria-label^='Question']").count() == len(ANSWER_QUESTIONS)
        # The final answer coloured by label; on the simulator the Nobel answer has a replaced sentence.
        assert page.locator(".answer-text .sent").count() >= 4
        assert page.locator(".answer-text .sent.replaced").count() >= 1
        assert page.locator(".answer-text .sent.l-supported").count() >= 1
        # The evidence table holds the passages with their probabilities and request ids.
        assert page.locator("td.passage .passage-block").count() >= 4
        assert page.locator("a.reqid").count() >= 4
        assert "results come from the bundled simulator" in page.inner_text(".notice-sim")
        save_screenshot(page, "answer-report", docs=True)
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


def test_quote_report_in_browser(embedded: tuple[Flask, str]) -> None:
    app, token = embedded
    job_id = run_job(app, token, "quote", QUOTE_QUESTIONS)
    with serve(app) as base, chromium() as (page, watch):
        open_report(page, base, token, job_id)
        quotes = page.locator("blockquote.quote:not(.closest)")
        assert quotes.count() == 1
        assert "206 bones" in quotes.inner_text()
        assert "No result answers the question" in page.inner_text("#question-2")
        assert page.locator("#question-1 table").count() == 2  # results and compare
        save_screenshot(page, "quote-report", docs=True)
        # Every request id links to the lookup page, which finds the job and item behind it.
        page.locator("#question-1 a.reqid").first.click()
        page.wait_for_selector("text=Call 1 of")
        assert job_id in page.inner_text("main")
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


EXAMPLE_ANSWERS = Path(__file__).resolve().parents[2] / "examples" / "citations.jsonl"


def test_citations_report_in_browser(embedded: tuple[Flask, str]) -> None:
    """The example answers (examples/citations.jsonl) through the real pipeline: sentences coloured by
    label, the misattributed ones badged, the evidence with the best chunk of a long source, the metrics,
    and the cutoff replay relabelling in place with no request."""
    app, token = embedded
    resp = app.test_client().post(
        "/v1/jobs?kind=citations",
        data=EXAMPLE_ANSWERS.read_bytes(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)[:500]
    job_id: str = resp.get_json()["id"]
    wait_for(app, job_id)
    with serve(app) as base, chromium() as (page, watch):
        open_report(page, base, token, job_id)
        assert page.locator("article[aria-label^='Answer']").count() == 11
        for label in ("supported", "weak", "unsupported", "contradicted", "uncited", "not_checkable"):
            assert page.locator(f".answer-text .sent.l-{label}").count() >= 1, label
        assert "misattributed: [wall-b]" in page.inner_text("#question-3")
        assert page.locator("td.passage .passage-block").count() >= 20
        assert "★" in page.inner_text("#question-9")  # the long document's best chunk
        assert "citation recall" in page.inner_text("#summary").lower()
        save_screenshot(page, "citations-report", docs=True)
        page.fill("#weak_min", "0.6")
        page.locator("#summary button[type=submit]").click()
        page.wait_for_selector("text=replayed")
        assert page.locator("#question-4 .answer-text .sent.l-weak").count() == 0
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


def test_a_packed_jobs_audit_on_the_job_page(embedded: tuple[Flask, str]) -> None:
    """A packed citations job with every answer audited (`audit_share: 1`): the job page's summary shows
    the packing audit — sentences asked again alone, label agreement, |Δp| and agreement by position."""
    app, token = embedded
    resp = app.test_client().post(
        "/v1/jobs?kind=citations&audit_share=1&reuse=none",  # not answered from another test's job
        data=EXAMPLE_ANSWERS.read_bytes(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)[:500]
    job_id: str = resp.get_json()["id"]
    wait_for(app, job_id)
    with serve(app) as base, chromium() as (page, watch):
        open_report(page, base, token, job_id)
        audit = page.inner_text("#summary")
        assert "Packing audit" in audit and "Label agreement" in audit and "100.0 %" in audit, audit
        assert "Agreement by position in the pack" in audit
        page.locator("#packing-audit").scroll_into_view_if_needed()
        save_screenshot(page, "packing-audit", docs=True, docs_height=1400)
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []
