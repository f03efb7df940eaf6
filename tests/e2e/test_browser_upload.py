"""The new-job page end to end in headless Chromium: upload NDJSON and CSV files and follow each job to
`completed` on its page, a bad file named by its line, keyboard-only use, and the form without script.

The app runs in embedded mode (SQLite in a temporary instance folder, the in-process Celery worker and
sweeper, the bundled simulator in place of Perplexity), so an uploaded job is run by the same tasks as in
production. Screenshots go to test-artifacts/ (and docs/screenshots/ with FACTGATE_UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from playwright.sync_api import expect

from tests.e2e.browser import chromium, embedded_app, save_screenshot, serve, sign_in
from tests.e2e.builders import reference_rows

pytestmark = pytest.mark.e2e

JOB_URL = re.compile(r".*/jobs/[0-9a-f-]{36}$")
STATUS = "h1 [data-field=status]"
# Long enough for the embedded worker to run a small job on the simulator on a busy machine.
JOB_TIMEOUT_MS = 180_000
ROWS = [
    {"id": "r1", "claim": "Rust 1.0 was released in May 2015.", "label": True},
    {"id": "r2", "claim": "The Linux kernel was first released in 1998.", "label": False},
]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Flask, str]]:
    """The embedded app with its worker running, and a token for one tenant."""
    with embedded_app(tmp_path_factory.mktemp("embedded-upload"), "e2e-upload") as pair:
        yield pair


def as_csv(rows: list[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(
        out, fieldnames=["id", "claim", "label"], lineterminator="\n", extrasaction="ignore"
    )
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "label": "" if row.get("label") is None else str(row["label"]).lower()})
    return out.getvalue().encode()


def file_payload(name: str, mime: str, body: bytes) -> dict[str, Any]:
    return {"name": name, "mimeType": mime, "buffer": body}


def wait_completed(page: Any) -> None:
    """On the job page: the script follows progress and reloads once when the job ends."""
    page.wait_for_url(JOB_URL)
    expect(page.locator(STATUS)).to_have_text("completed", timeout=JOB_TIMEOUT_MS)


def test_upload_ndjson_and_follow_it_to_completed(embedded: tuple[Flask, str]) -> None:
    app, token = embedded
    body = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    with serve(app) as base, chromium() as (page, watch):
        sign_in(page, base, token)
        page.click("nav >> text=New job")
        page.wait_for_selector("#new-job")
        page.set_input_files("#file", file_payload("claims.ndjson", "application/x-ndjson", body))
        page.select_option("#mode", "both")
        page.select_option("#priority", "interactive")
        page.fill("#name", "Two claims from the browser")
        save_screenshot(page, "new-job", docs=True)
        page.click("#submit-job")
        wait_completed(page)
        page.wait_for_selector("#scorecard")
        assert page.locator("#claims tbody tr").count() == len(ROWS)
        page.goto(f"{base}/jobs")
        assert "Two claims from the browser" in page.inner_text("table")
        save_screenshot(page, "jobs-list-after-upload", full_page=False)
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


def test_a_packed_answer_job_from_the_form_runs_with_its_audit(embedded: tuple[Flask, str]) -> None:
    """The answer and quote kinds' packing fields (docs/spec.md §9.6): shown for answer, not for claims,
    sent as the job's `pack_size` and `audit_share`; the job packs, and its page shows the audit."""
    app, token = embedded
    with serve(app) as base, chromium() as (page, watch):
        sign_in(page, base, token)
        page.goto(f"{base}/jobs/new")
        expect(page.locator("#questions-options")).to_be_hidden()  # claims, the first kind
        page.select_option("#kind", "answer")
        expect(page.locator("#questions-options")).to_be_visible()
        expect(page.locator("#citations-options")).to_be_hidden()
        assert page.input_value("#questions_pack_size") == "1"
        page.fill("#questions_pack_size", "8")
        page.fill("#questions_audit_share", "1")
        question = "What did the James Webb Space Telescope discover about exoplanet K2-18b?"
        page.fill("#paste", f"id,question\njwst,{question}\n")
        page.click("#submit-job")
        wait_completed(page)
        main = page.inner_text("main")
        assert "pack_size=8" in main and "audit_share=1" in main
        assert "Packing audit" in main and "Label agreement" in main
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


def test_upload_csv_and_follow_it_to_completed(embedded: tuple[Flask, str]) -> None:
    app, token = embedded
    rows = reference_rows()[:6]
    with serve(app) as base, chromium() as (page, watch):
        sign_in(page, base, token)
        page.goto(f"{base}/jobs/new")
        page.set_input_files("#file", file_payload("claims.csv", "text/csv", as_csv(rows)))
        page.click("#submit-job")
        wait_completed(page)
        page.wait_for_selector("#scorecard")
        assert page.locator("#claims tbody tr").count() == len(rows)
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


def test_a_bad_file_names_its_line_and_the_summary_leads_to_the_field(embedded: tuple[Flask, str]) -> None:
    app, token = embedded
    bad = b"id,claim,label\nb1,Rust 1.0 was released in May 2015.,true\nb2,,maybe\n"
    with serve(app) as base, chromium() as (page, watch):
        sign_in(page, base, token)
        page.goto(f"{base}/jobs/new")
        page.select_option("#mode", "ungrounded")
        page.set_input_files("#file", file_payload("bad.csv", "text/csv", bad))
        page.click("#submit-job")
        page.wait_for_selector("#error-summary")
        summary = page.inner_text("#error-summary")
        assert 'line 3: field "claim": must not be empty' in summary
        assert 'line 3: field "label": must be true or false' in summary
        assert page.url.endswith("/jobs/new")
        # Autofocus lands at the browser's next rendering update, not with the load event: wait for it.
        expect(page.locator("#error-summary")).to_be_focused()
        assert page.input_value("#mode") == "ungrounded"  # the choice is kept
        assert page.get_attribute("#file", "aria-invalid") == "true"
        save_screenshot(page, "new-job-error", docs=True)
        # From the summary, the keyboard reaches the file input in one Tab and one Enter.
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.getAttribute('href')") == "#file"
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "file"
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


def focused(page: Any) -> str:
    return str(page.evaluate("document.activeElement.id || document.activeElement.tagName"))


def tab_to(page: Any, target: str, limit: int = 40) -> list[str]:
    """Press Tab until `target` has the focus; returns the ids focused on the way."""
    seen: list[str] = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        seen.append(focused(page))
        if seen[-1] == target:
            return seen
    raise AssertionError(f"Tab never reached #{target}: {seen}")


def test_keyboard_only_paste_and_submit(embedded: tuple[Flask, str]) -> None:
    app, token = embedded
    with serve(app) as base, chromium() as (page, watch):
        sign_in(page, base, token)
        page.goto(f"{base}/jobs/new")
        order = tab_to(page, "paste")
        assert order.index("kind") < order.index("file") < order.index("paste")
        # The kind's options follow the select: a quote job has no claims options.
        page.focus("#kind")
        page.keyboard.press("ArrowDown")
        assert page.input_value("#kind") == "answer"
        expect(page.locator("#claims-options")).to_be_hidden()
        page.keyboard.press("ArrowUp")
        assert page.input_value("#kind") == "claims"
        expect(page.locator("#claims-options")).to_be_visible()
        tab_to(page, "paste")
        page.keyboard.type("id,claim,label\nk1,Rust 1.0 was released in May 2015.,true\n")
        order = tab_to(page, "submit-job")
        assert order[:3] == ["mode", "supported_min", "contradicted_max"]
        page.keyboard.press("Enter")
        wait_completed(page)
        assert watch.dialogs == [] and watch.page_errors == [] and watch.csp_violations == []


def test_without_script_every_group_is_shown_and_the_form_works(embedded: tuple[Flask, str]) -> None:
    app, token = embedded
    questions = b"id,question\nbones,How many bones are in the adult human body?\n"
    with serve(app) as base, chromium(javascript=False) as (page, _watch):
        sign_in(page, base, token)
        page.goto(f"{base}/jobs/new")
        page.select_option("#kind", "quote")
        expect(page.locator("#claims-options")).to_be_visible()
        assert "claims jobs only" in page.inner_text("#claims-options legend")
        # A refused file: the summary (autofocus) has the focus without script too.
        page.set_input_files("#file", file_payload("questions.csv", "text/csv", b"id,question\nq1,\n"))
        page.click("#submit-job")
        page.wait_for_selector("#error-summary")
        assert 'line 2: field "question"' in page.inner_text("#error-summary")
        expect(page.locator("#error-summary")).to_be_focused()
        assert page.input_value("#kind") == "quote"
        page.set_input_files("#file", file_payload("questions.csv", "text/csv", questions))
        page.click("#submit-job")
        page.wait_for_url(JOB_URL)
        assert "Job submitted: 1 item." in page.inner_text("main")
        assert page.inner_text("h1").startswith("Quote")
