"""End to end in headless Chromium: sign in, watch a job's progress bar, read finished reports, and
check that injected markup in claims, passages, titles and URLs never runs.

The app runs in a thread on 127.0.0.1 over the real test Postgres; jobs are built with builders.py
(no workers). Screenshots go to test-artifacts/ and, with FACTGATE_UPDATE_SCREENSHOTS=1, to
docs/screenshots/ for the README.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e.browser import chromium, save_screenshot, serve, sign_in
from tests.e2e.builders import (
    claim_output,
    finalize,
    reference_rows,
    settle,
    simulated_outcomes,
    submit_claims,
)
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

PROGRESS = "#job-progress"


def progress_of(page: Any) -> tuple[float, float]:
    value, maximum = page.eval_on_selector(PROGRESS, "e => [e.value, e.max]")
    return float(value), float(maximum)


def test_finished_claims_report(web: WebEnv, caller: Caller) -> None:
    rows = reference_rows()
    job_id = submit_claims(web.client.post, caller.headers, rows, mode="both")
    settle(web.sessions, job_id, simulated_outcomes(rows, ("ungrounded", "grounded")))
    finalize(web.sessions, job_id)

    with serve(web.app) as base, chromium() as (page, watch):
        sign_in(page, base, caller.token)
        page.goto(f"{base}/jobs")
        assert page.locator(f"a[href='/jobs/{job_id}']").count() == 1
        page.click(f"a[href='/jobs/{job_id}']")
        page.wait_for_selector("#scorecard")
        assert progress_of(page) == (100.0, 100.0)
        assert page.inner_text("[data-field=percent]").strip() == "100 %"
        assert page.locator("#claims tbody tr").count() == len(rows)
        assert page.locator("svg.chart").count() == 1
        assert page.locator(".card").count() == 2
        assert "results come from the bundled simulator" in page.inner_text(".notice-sim")
        save_screenshot(page, "claims-report-postgres")

        # The cutoff explorer replays in the browser too: a GET form, the page re-rendered.
        page.fill("#supported_min", "0.6")
        page.click("text=Replay scorecard")
        page.wait_for_url(lambda url: "supported_min=0.6" in url)
        assert "replayed" in page.inner_text("#scorecard")
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


def test_progress_bar_follows_a_running_job_to_100(web: WebEnv, caller: Caller) -> None:
    rows = [
        {"id": "p1", "claim": "Rust 1.0 was released in May 2015.", "label": True},
        {"id": "p2", "claim": "The Linux kernel was first released in 1998.", "label": False},
    ]
    job_id = submit_claims(web.client.post, caller.headers, rows, mode="grounded")
    with serve(web.app) as base, chromium() as (page, watch):
        sign_in(page, base, caller.token)
        page.goto(f"{base}/jobs/{job_id}")
        assert progress_of(page) == (0.0, 100.0)
        assert page.get_attribute("#progress", "data-live") == "true"

        settle(web.sessions, job_id, {("p1", "grounded"): claim_output(0.93, "live-1")})
        # expect() polls without eval (wait_for_function would need 'unsafe-eval', which the CSP refuses).
        expect(page.locator(PROGRESS)).to_have_js_property("value", 50)
        expect(page.locator("[data-field=percent]")).to_have_text("50 %")
        expect(page.locator("[data-field=count-completed]")).to_have_text("1")

        settle(web.sessions, job_id, {("p2", "grounded"): claim_output(0.04, "live-2")})
        finalize(web.sessions, job_id)
        # The script sees the job end and reloads once: the report replaces the waiting note.
        page.wait_for_selector("#scorecard")
        assert progress_of(page) == (100.0, 100.0)
        assert page.get_attribute("#progress", "data-live") == "false"
        assert watch.page_errors == [] and watch.csp_violations == []
        save_screenshot(page, "progress-finished", full_page=False)


INJECTIONS = (
    "<script>window.__xss = 'script'; alert(1)</script>",
    '"onmouseover="window.__xss=\'attr\';alert(1)" x="',
    "<img src=x onerror=\"window.__xss='img';alert(1)\">",
    "javascript:window.__xss='js';alert(1)",
)


def injected_job(web: WebEnv, caller: Caller) -> str:
    rows = [
        {"id": f"x{n}", "claim": f"Claim {n} {payload}", "label": n % 2 == 0}
        for n, payload in enumerate(INJECTIONS)
    ]
    rows.append({"id": "<script>alert(1)</script>", "claim": "An innocent claim.", "label": True})
    job_id = submit_claims(web.client.post, caller.headers, rows, mode="grounded")
    outcomes = {}
    for n, row in enumerate(rows):
        sources = [
            {"title": payload, "url": url, "date": payload, "snippet": payload}
            for payload, url in zip(
                INJECTIONS,
                (
                    "javascript:window.__xss='href';alert(1)",
                    " javascript:alert(1)",
                    "data:text/html,<script>alert(1)</script>",
                    'https://example.org/"onmouseover="alert(1)',
                ),
                strict=True,
            )
        ]
        outcomes[(row["id"], "grounded")] = claim_output(0.3 + 0.1 * n, f"rid-{n}", sources=sources)
    settle(web.sessions, job_id, outcomes)
    finalize(web.sessions, job_id)
    return job_id


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["with-csp", "escaping-alone"])
def test_injected_markup_never_runs(web: WebEnv, caller: Caller, bypass_csp: bool) -> None:
    """With the CSP, and with the CSP switched off in the browser: escaping alone must hold."""
    job_id = injected_job(web, caller)
    report_file = None
    with serve(web.app) as base, chromium(bypass_csp=bypass_csp) as (page, watch):
        sign_in(page, base, caller.token)
        page.goto(f"{base}/jobs/{job_id}")
        page.wait_for_selector("#claims")
        assert page.locator("a[href^='javascript'], a[href^=' javascript'], a[href^='data:']").count() == 0
        assert page.locator("#claims img").count() == 0
        assert page.locator("[onmouseover], [onerror]").count() == 0
        # The payloads are there, as text.
        assert "<script>window.__xss" in page.inner_text("#claims")
        # Open every sources list and hover over every cell and source, click the plain URLs.
        for details in page.locator("#claims details").all():
            details.locator("summary").click()
        for cell in page.locator("#claims td, #claims .sources li, #claims .plain-url").all():
            cell.hover()
        for plain in page.locator("#claims .plain-url").all()[:4]:
            plain.click()
        assert page.evaluate("typeof window.__xss") == "undefined"
        if not bypass_csp:
            save_screenshot(page, "injection-escaped", full_page=False)
        report_file = page.request.get(f"{base}/jobs/{job_id}/report.html").text()

        # The downloaded report, opened as a document of its own: the same rules hold.
        page.set_content(report_file)
        page.wait_for_selector("#claims")
        for cell in page.locator("#claims td").all():
            cell.hover()
        assert page.locator("a[href^='javascript'], script").count() == 0
        assert page.evaluate("typeof window.__xss") == "undefined"
        assert watch.dialogs == []
        assert watch.page_errors == []
