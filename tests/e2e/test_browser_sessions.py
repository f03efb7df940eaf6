"""End to end in headless Chromium: a live page session ends when its token is revoked (the open job
page's progress poll notices and the page lands on sign-in, saying why) and on sign-out (another browser
holding a copy of the cookie is refused); and the usage page draws its chart under the strict CSP.

The app runs in a thread on 127.0.0.1 over the real test Postgres; no workers.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from jobs.tenancy import revoke_token
from models import ApiCall, ApiToken, session_scope
from tests.e2e.browser import VIEWPORT, chromium, save_screenshot, serve, sign_in
from tests.e2e.builders import submit_claims
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

ROWS = [
    {"id": "b1", "claim": "Rust 1.0 was released in May 2015.", "label": True},
    {"id": "b2", "claim": "The Linux kernel was first released in 1998.", "label": False},
]
SIGN_IN = re.compile(r".*/sign-in(\?.*)?$")


def test_revoking_the_token_ends_an_open_job_page(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    with serve(web.app) as base, chromium() as (page, watch):
        sign_in(page, base, caller.token)
        page.goto(f"{base}/jobs/{job_id}")
        assert page.get_attribute("#progress", "data-live") == "true"
        with session_scope(web.sessions) as session:
            token_id = session.query(ApiToken.id).filter(ApiToken.tenant_id == caller.tenant_id).scalar()
            assert revoke_token(session, str(token_id)) == 1
        # Nobody touches the page: its progress poll gets a 401, the script reloads, sign-in says why.
        page.wait_for_url(SIGN_IN)
        expect(page.locator(".notice")).to_contain_text("has been revoked")
        save_screenshot(page, "session-revoked", full_page=False)
        page.goto(f"{base}/jobs")
        page.wait_for_url(SIGN_IN)
        assert page.locator("#token").count() == 1
        assert watch.page_errors == [] and watch.csp_violations == []


def test_sign_out_ends_the_session_for_a_copy_of_the_cookie_too(web: WebEnv, caller: Caller) -> None:
    with serve(web.app) as base, chromium() as (page, watch):
        sign_in(page, base, caller.token)
        copied = page.context.cookies()
        assert [c["name"] for c in copied] == ["factgate_session"]
        assert copied[0]["httpOnly"] is True

        page.click("text=Sign out")
        page.wait_for_url(SIGN_IN)
        expect(page.locator(".notice")).to_contain_text("You are signed out.")

        browser = page.context.browser
        assert browser is not None
        other = browser.new_context(viewport=VIEWPORT)
        try:
            other.add_cookies(copied)  # type: ignore[arg-type]
            thief = other.new_page()
            thief.goto(f"{base}/jobs")
            thief.wait_for_url(SIGN_IN)
            expect(thief.locator(".notice")).to_contain_text("This session was signed out")
            assert thief.locator("text=Sign out").count() == 0
        finally:
            other.close()
        assert watch.page_errors == [] and watch.csp_violations == []


def test_usage_page_draws_the_chart_under_the_csp(web: WebEnv, caller: Caller) -> None:
    job_id = submit_claims(web.client.post, caller.headers, ROWS, mode="grounded")
    today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    with session_scope(web.sessions) as session:
        for n in range(14):
            for k in range(n % 4):
                session.add(
                    ApiCall(
                        tenant_id=caller.tenant_id,
                        job_id=job_id,
                        endpoint="decisions" if k else "search",
                        model="pplx-decider-latest" if k else None,
                        status_code=200,
                        searches=1,
                        input_tokens=120 * k,
                        output_tokens=k,
                        cost_usd=0.005 + 0.0000012 * k,
                        created_at=today - timedelta(days=n),
                    )
                )
    with serve(web.app) as base, chromium() as (page, watch):
        sign_in(page, base, caller.token)
        page.click("nav >> text=Usage")
        page.wait_for_selector("#usage-chart svg.chart")
        days_with_calls = sum(1 for n in range(14) if n % 4)
        assert page.locator("#usage-chart rect.bar").count() == days_with_calls
        assert page.locator("#usage-days tbody tr").count() == 30
        assert page.locator("#usage-endpoints tbody tr").count() == 2
        box = page.locator("#usage-chart svg.chart").bounding_box()
        assert box is not None and box["width"] > 300
        save_screenshot(page, "usage", full_page=True)
        page.select_option("#metric", "requests")
        page.click("#usage-range button[type=submit]")
        page.wait_for_url(lambda url: "metric=requests" in url)
        expect(page.locator("#usage-chart h2")).to_have_text("Requests per day")
        assert watch.page_errors == [] and watch.csp_violations == []
