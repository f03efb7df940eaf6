"""Accessibility in headless Chromium: axe-core's WCAG 2.1 AA rules on every page, keyboard-only use of
sign-in, cancel, retry and the cutoff explorer, and text equivalents for the charts (keyboard-only use of the
new-job page is in test_browser_upload.py).

axe runs on the page as served, its CSP on (tests/e2e/axe.py). A violation of impact serious or critical
fails the test; the others are printed (run with -s to see them; FACTGATE_AXE_VERBOSE=1 also lists
the checks axe leaves to a person, such as the contrast of SVG text, whose colours web/charts.py fixes).
The app runs in a thread over the real test Postgres; jobs are built with builders.py (no workers).
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import os
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from models import ApiCall, WebhookAttempt, WebhookDelivery, session_scope, utcnow
from tests.e2e.axe import AxeResult, check_page, report
from tests.e2e.browser import chromium, serve, sign_in
from tests.e2e.builders import (
    answer_report,
    claim_output,
    failed_answer_report,
    failed_quote_report,
    finalize,
    incomplete_answer_report,
    incomplete_quote_report,
    quote_report,
    reference_rows,
    settle,
    simulated_outcomes,
    store_reports,
    submit_claims,
    submit_questions,
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

HOOK = "https://hooks.example.com/factgate"

Q1 = "Who won the 2024 Nobel Prize in Physics and for what work?"
Q2 = "What did the James Webb Space Telescope discover about exoplanet K2-18b?"
BONES = "How many bones are in the adult human body?"
RIVETS = "How many rivets are in the railing of the Eiffel Tower's second floor?"
TWO = [
    {"id": "k1", "claim": "Rust 1.0 was released in May 2015.", "label": True},
    {"id": "k2", "claim": "The Linux kernel was first released in 1998.", "label": False},
]


def ended_claims_job(web: WebEnv, who: Caller) -> str:
    """The 24 reference claims in both modes on simulator answers, one of them failed (a retry button),
    with a webhook that failed twice and was given up (the webhooks table, its attempts, Redeliver)."""
    rows = reference_rows()
    job_id = submit_claims(web.client.post, who.headers, rows, mode="both", webhook_url=HOOK)
    outcomes = simulated_outcomes(rows, ("ungrounded", "grounded"))
    outcomes[(rows[0]["id"], "grounded")] = ("failed", "upstream 503 after 3 retries")
    settle(web.sessions, job_id, outcomes)
    finalize(web.sessions, job_id)
    with session_scope(web.sessions) as session:
        delivery = session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.job_id == uuid.UUID(job_id))
        ).one()
        now = utcnow()
        for n, (code, error) in enumerate(((502, "HTTP 502"), (None, "no response within 10 s")), start=1):
            session.add(
                WebhookAttempt(
                    delivery_id=delivery.id,
                    attempt=n,
                    started_at=now,
                    duration_ms=40.0,
                    status_code=code,
                    error=error,
                    next_attempt_at=now + timedelta(seconds=10) if n == 1 else None,
                )
            )
        delivery.status, delivery.attempts, delivery.next_attempt_at = "failed", 2, None
        delivery.last_attempt_at, delivery.last_error = now, "no response within 10 s"
    return job_id


def running_claims_job(web: WebEnv, who: Caller) -> str:
    job_id = submit_claims(web.client.post, who.headers, TWO, mode="grounded", webhook_url=HOOK)
    settle(web.sessions, job_id, {("k1", "grounded"): claim_output(0.93, "run-1")})
    return job_id


def answer_job(web: WebEnv, who: Caller) -> str:
    job_id = submit_questions(web.client.post, who.headers, "answer", [("q1", Q1), ("q2", Q2), ("q3", Q1)])
    store_reports(
        web.sessions,
        job_id,
        {
            "q1": answer_report(Q1),
            "q2": failed_answer_report(Q2, "agent answered without searching"),
            "q3": incomplete_answer_report(Q1, "Agent API failed: 503 upstream busy"),
        },
    )
    finalize(web.sessions, job_id)
    return job_id


def quote_job(web: WebEnv, who: Caller) -> str:
    job_id = submit_questions(
        web.client.post, who.headers, "quote", [("b", BONES), ("r", RIVETS), ("f", "Will this fail?")]
    )
    store_reports(
        web.sessions,
        job_id,
        {
            "b": quote_report(BONES),
            "r": quote_report(RIVETS, quoted=False),
            "f": failed_quote_report("Will this fail?", "search failed: upstream 503"),
        },
    )
    finalize(web.sessions, job_id)
    return job_id


def incomplete_quote_job(web: WebEnv, who: Caller) -> str:
    job_id = submit_questions(web.client.post, who.headers, "quote", [("i", BONES)])
    store_reports(web.sessions, job_id, {"i": incomplete_quote_report(BONES, "upstream 500 after 3 retries")})
    finalize(web.sessions, job_id)
    return job_id


def usage_calls(web: WebEnv, who: Caller, job_id: str) -> None:
    today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    with session_scope(web.sessions) as session:
        for n in range(10):
            for k in range(n % 3 + 1):
                session.add(
                    ApiCall(
                        tenant_id=who.tenant_id,
                        job_id=job_id,
                        endpoint="decisions" if k else "search",
                        model="pplx-decider-latest" if k else None,
                        status_code=200,
                        request_id=f"usage-{n}-{k}",
                        searches=1,
                        input_tokens=120 * k,
                        cost_usd=0.005 + 0.0000012 * k,
                        created_at=today - timedelta(days=n),
                    )
                )


def test_every_page_passes_axe_wcag21_aa(web: WebEnv, caller: Caller) -> None:
    ended = ended_claims_job(web, caller)
    running = running_claims_job(web, caller)
    answer = answer_job(web, caller)
    quote = quote_job(web, caller)
    incomplete = incomplete_quote_job(web, caller)
    usage_calls(web, caller, ended)
    results: dict[str, AxeResult] = {}
    with serve(web.app) as base, chromium() as (page, watch):

        def check(name: str) -> None:
            # Everything folded away is checked too: open every <details> first.
            page.evaluate("() => document.querySelectorAll('details').forEach((d) => { d.open = true; })")
            results[name] = check_page(page)

        page.goto(f"{base}/sign-in")
        check("sign-in")
        page.fill("#token", "fg_not-a-token")
        page.click("button[type=submit]")
        page.wait_for_selector(".notice-error")
        check("sign-in (refused token)")
        sign_in(page, base, caller.token)
        check("jobs list")
        page.goto(f"{base}/jobs?kind=claims&status=completed")
        check("jobs list (filtered)")
        page.goto(f"{base}/jobs/new")
        check("new job")
        page.fill("#paste", "id,claim,label\nr1,,maybe\n")
        page.click("#submit-job")
        page.wait_for_selector("#error-summary")
        check("new job (refused rows: error summary, invalid field)")
        page.goto(f"{base}/jobs/{ended}")
        page.wait_for_selector("#scorecard")
        page.wait_for_selector("#webhooks form button")
        check("job page: claims, ended (webhook given up, Redeliver)")
        page.goto(f"{base}/jobs/{ended}?supported_min=0.6&contradicted_max=0.3")
        page.wait_for_selector("#scorecard")
        check("job page: claims, replayed cutoffs")
        page.goto(f"{base}/jobs/{ended}?supported_min=2")
        page.wait_for_selector("#scorecard")
        check("job page: claims, refused cutoffs")
        page.goto(f"{base}/jobs/{running}")
        page.wait_for_selector("#progress[data-live=true]")
        page.wait_for_selector("#webhooks")
        check("job page: claims, running (webhook to come)")
        page.goto(f"{base}/jobs/{answer}")
        page.wait_for_selector("#questions")
        check("job page: answer, ended")
        page.goto(f"{base}/jobs/{quote}")
        page.wait_for_selector("#questions")
        check("job page: quote, ended")
        page.goto(f"{base}/jobs/{incomplete}")
        page.wait_for_selector("#questions")
        check("job page: quote, incomplete")
        page.goto(f"{base}/requests")
        check("request lookup")
        page.goto(f"{base}/requests?id=usage-1-1")
        page.wait_for_selector("text=Call 1 of")
        check("request lookup (found)")
        page.goto(f"{base}/requests?id=nothing-here")
        check("request lookup (not found)")
        page.goto(f"{base}/usage")
        page.wait_for_selector("#usage-chart svg")
        check("usage")
        page.goto(f"{base}/usage?from=2026-13-01")
        check("usage (refused dates)")
        page.goto(f"{base}/jobs/00000000-0000-0000-0000-000000000000")
        check("error: 404")
        # A form whose CSRF token was lost: the 400 page.
        page.goto(f"{base}/jobs")
        page.locator("form[action$=sign-out] input[name=csrf_token]").evaluate("(e) => e.remove()")
        page.click("text=Sign out")
        page.wait_for_selector(".error-code")
        check("error: 400 (form not accepted)")
        assert watch.page_errors == [] and watch.csp_violations == [], watch.csp_violations
        for name, job_id in (("claims", ended), ("answer", answer), ("quote", quote)):
            html = page.request.get(f"{base}/jobs/{job_id}/report.html").text()
            # A document of its own, under its own CSP: written into a page of the app's origin it would
            # keep the app's CSP, which refuses the file's inline stylesheet.
            page.goto("about:blank")
            page.set_content(html)
            check(f"report file: {name}")
        assert not [m for m in watch.csp_violations if "frame-ancestors" not in m], watch.csp_violations

    print()
    verbose = bool(os.environ.get("FACTGATE_AXE_VERBOSE"))
    for name, result in results.items():
        print(report(name, result, verbose=verbose))
    blocking = {name: [v.describe() for v in r.blocking] for name, r in results.items() if r.blocking}
    assert blocking == {}, "\n".join(f"{name}:\n  " + "\n  ".join(vs) for name, vs in blocking.items())


# --- keyboard only -------------------------------------------------------------------------------------

MAX_TABS = 60


def tab_to(page: Any, selector: str, *, backwards: bool = False) -> None:
    """Press Tab (or Shift+Tab) until the focused element matches `selector`; fail after MAX_TABS."""
    for _ in range(MAX_TABS):
        page.keyboard.press("Shift+Tab" if backwards else "Tab")
        if page.evaluate("(sel) => document.activeElement.matches(sel)", selector):
            assert_focus_visible(page)
            return
    raise AssertionError(f"{selector} was not reached with {MAX_TABS} Tab presses")


def assert_focus_visible(page: Any) -> None:
    """The focused element draws a focus ring of at least 2 px."""
    outline = page.evaluate(
        "() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, parseFloat(s.outlineWidth)]; }"
    )
    assert outline[0] != "none" and outline[1] >= 2, outline


def test_sign_in_with_the_keyboard_alone(web: WebEnv, caller: Caller) -> None:
    with serve(web.app) as base, chromium() as (page, watch):
        page.goto(f"{base}/sign-in")
        # The token field has the focus from the start (autofocus): type, Tab to the button, Enter.
        # Autofocus lands at the browser's next rendering update, not with the load event: wait for it.
        expect(page.locator("#token")).to_be_focused()
        assert_focus_visible(page)
        page.keyboard.type(caller.token)
        tab_to(page, "button[type=submit]")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r".*/jobs$"))
        # On every page the first Tab reaches the skip link; Enter moves on to the main content.
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.textContent.trim()") == "Skip to content"
        assert_focus_visible(page)
        page.keyboard.press("Enter")
        assert page.evaluate("() => document.activeElement.id") == "main"
        # The navigation is reachable too: back with Shift+Tab to "Usage", followed with Enter.
        tab_to(page, "nav a[href='/usage']", backwards=True)
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r".*/usage$"))
        assert watch.page_errors == [] and watch.csp_violations == []


def test_cancel_retry_and_redeliver_with_the_keyboard_alone(web: WebEnv, caller: Caller) -> None:
    running = running_claims_job(web, caller)
    ended = submit_claims(web.client.post, caller.headers, TWO, mode="grounded")
    settle(
        web.sessions,
        ended,
        {("k1", "grounded"): claim_output(0.93, "kb-1"), ("k2", "grounded"): ("failed", "upstream 503")},
    )
    finalize(web.sessions, ended)
    with serve(web.app) as base, chromium() as (page, watch):
        sign_in(page, base, caller.token)
        page.goto(f"{base}/jobs/{running}")
        tab_to(page, "button.button-danger")
        assert page.evaluate("() => document.activeElement.textContent.trim()") == "Cancel job"
        page.keyboard.press("Enter")
        expect(page.locator(".notice-info")).to_contain_text("Cancelling")
        assert web.job(running).status in ("cancelling", "cancelled")

        page.goto(f"{base}/jobs/{ended}")
        tab_to(page, "form[action$='/retry'] button")
        page.keyboard.press("Space")
        expect(page.locator(".notice-info")).to_contain_text("Retrying 1 failed item(s).")
        assert web.job(ended).status == "queued"

        # A given-up webhook's Redeliver button, at the end of the page: reached backwards with Shift+Tab.
        hooked = ended_claims_job(web, caller)
        page.goto(f"{base}/jobs/{hooked}")
        tab_to(page, "#webhooks form button", backwards=True)
        page.keyboard.press("Enter")
        expect(page.locator(".notice-info")).to_contain_text("Redelivering webhook msg_")
        assert watch.page_errors == [] and watch.csp_violations == []


def test_cutoff_explorer_and_sources_with_the_keyboard_alone(web: WebEnv, caller: Caller) -> None:
    rows = reference_rows()
    job_id = submit_claims(web.client.post, caller.headers, rows, mode="grounded")
    settle(web.sessions, job_id, simulated_outcomes(rows, ("grounded",)))
    finalize(web.sessions, job_id)
    with serve(web.app) as base, chromium() as (page, watch):
        sign_in(page, base, caller.token)
        page.goto(f"{base}/jobs/{job_id}")
        tab_to(page, "#supported_min")
        page.keyboard.press("Control+A")
        page.keyboard.type("0.6")
        tab_to(page, "#contradicted_max")
        page.keyboard.press("Control+A")
        page.keyboard.type("0.3")
        tab_to(page, "#scorecard button[type=submit]")
        page.keyboard.press("Enter")
        page.wait_for_url(lambda url: "supported_min=0.6" in url and "contradicted_max=0.3" in url)
        expect(page.locator("#scorecard")).to_contain_text("replayed")
        # "Reset" is a link, reached and followed the same way.
        tab_to(page, "#scorecard a.button")
        page.keyboard.press("Enter")
        page.wait_for_url(lambda url: "supported_min" not in url)
        expect(page.locator("#scorecard")).not_to_contain_text("replayed")
        # A claim's sources open from the keyboard (a <details> summary).
        summary = page.locator("#claims details summary").first
        tab_to(page, "#claims details summary")
        page.keyboard.press("Enter")
        expect(summary.locator("xpath=..")).to_have_attribute("open", "")
        assert watch.page_errors == [] and watch.csp_violations == []


# --- charts have text equivalents ----------------------------------------------------------------------


def test_charts_have_a_name_a_description_and_a_table_of_the_same_numbers(
    web: WebEnv, caller: Caller
) -> None:
    rows = reference_rows()
    job_id = submit_claims(web.client.post, caller.headers, rows, mode="both")
    settle(web.sessions, job_id, simulated_outcomes(rows, ("ungrounded", "grounded")))
    finalize(web.sessions, job_id)
    usage_calls(web, caller, job_id)
    with serve(web.app) as base, chromium() as (page, watch):
        sign_in(page, base, caller.token)
        page.goto(f"{base}/jobs/{job_id}")
        diagram = page.locator("#calibration svg.chart")
        expect(diagram).to_have_role("img")
        expect(diagram).to_have_accessible_name(re.compile(r"^Reliability diagram"))
        described = expect(diagram).to_have_accessible_description
        described(re.compile(r"ungrounded: 24 labelled claim\(s\) in \d+ bin"))
        described(re.compile(r"grounded: 24 labelled claim\(s\)"))
        described(re.compile(r"table “Calibration bins”"))
        table = page.get_by_role("table", name=re.compile("Calibration bins"))
        expect(table).to_have_count(1)
        # Every point of the diagram (its tooltip: mode, bin, claims) is a row of the table.
        tips = diagram.locator("g > title").all_text_contents()
        table_rows = [" ".join(r.split()) for r in table.locator("tbody tr").all_inner_texts()]
        assert len(tips) == len(table_rows) > 0
        for tip in tips:
            mode, rest = tip.split(": ", 1)
            span = rest.split(",")[0].removeprefix("p ")
            count = rest.split(", ")[1].split(" ")[0]
            assert any(r.startswith(f"{mode} {span} {count} ") for r in table_rows), (tip, table_rows)

        page.goto(f"{base}/usage?metric=requests")
        bars = page.locator("#usage-chart svg.chart")
        expect(bars).to_have_role("img")
        expect(bars).to_have_accessible_name(re.compile(r"^Requests per day, \d{4}-\d{2}-\d{2} to "))
        days = page.get_by_role("table", name=re.compile("per UTC day"))
        expect(days).to_have_count(1)
        by_day = {
            cells[0]: cells[1]
            for cells in (r.split("\t") for r in days.locator("tbody tr").all_inner_texts())
        }
        counts = {day: int(v.replace(",", "")) for day, v in by_day.items()}
        top = max(counts.values())
        top_day = min(d for d, v in counts.items() if v == top)  # the first day with the most
        empty = list(counts.values()).count(0)
        expect(bars).to_have_accessible_description(
            re.compile(
                rf"^30 day\(s\) from .* {sum(counts.values())} in total; the highest was {top} on {top_day}; "
                rf"{empty} day\(s\) had nothing\. The table “Per day” below"
            )
        )
        for tip in bars.locator("g > title").all_text_contents():
            day, value = tip.split(": ")
            assert by_day[day] == value, (tip, by_day.get(day))
        assert watch.page_errors == [] and watch.csp_violations == []
