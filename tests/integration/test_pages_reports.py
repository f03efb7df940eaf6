"""The answer and quote reports through the Flask test client, and the injection test for all kinds.

Reports are stored on the question items in the documented shape (tests/e2e/builders.py), so each
test knows every string that reaches the page; the jobs are finalized with jobs.finalize.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.builders import (
    answer_report,
    claim_output,
    failed_answer_report,
    failed_quote_report,
    finalize,
    incomplete_answer_report,
    incomplete_quote_report,
    quote_report,
    settle,
    store_reports,
    submit_claims,
    submit_questions,
)
from tests.integration.export_files import csv_records, ndjson_records
from tests.integration.test_pages import html, sign_in
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    other_caller,
    web,
    web_settings,
)

pytestmark = pytest.mark.integration

Q1 = "Who won the 2024 Nobel Prize in Physics and for what work?"
Q2 = "What did the James Webb Space Telescope discover about exoplanet K2-18b?"
BONES = "How many bones are in the adult human body?"
RIVETS = "How many rivets are in the railing of the Eiffel Tower's second floor?"


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
        web.client.post,
        who.headers,
        "quote",
        [("b", BONES), ("r", RIVETS), ("f", "Will this fail?"), ("i", BONES)],
    )
    store_reports(
        web.sessions,
        job_id,
        {
            "b": quote_report(BONES),
            "r": quote_report(RIVETS, quoted=False),
            "f": failed_quote_report("Will this fail?", "search failed: upstream 503"),
            "i": incomplete_quote_report(BONES, "upstream 500 after 3 retries"),
        },
    )
    finalize(web.sessions, job_id)
    return job_id


def article(page: str, n: int) -> str:
    """The HTML of question n's article (1-based, page order)."""
    start = page.index(f'id="question-{n}"')
    end = page.find('<article class="panel"', start)
    return page[start : end if end != -1 else len(page)]


def test_answer_report(web: WebEnv, caller: Caller) -> None:
    job_id = answer_job(web, caller)
    assert web.job(job_id).status == "completed"
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{job_id}"))
    # Final answer coloured by label, with the label in words and replaced sentences marked.
    assert (
        '<span class="sent l-supported replaced" title="supported; replaces sentence 2">'
        "The prize was announced on October 8, 2024.</span>"
    ) in page
    assert '<span class="sent l-uncited" title="uncited; sentence 3">' in page
    assert "uncited · not confirmed" in page
    assert "supported · replaced" in page
    assert '<a class="cites" href="#q1-src-1">[1]</a>' in page
    # Sources renumbered, linked safely.
    assert (
        'href="https://www.nobelprize.org/prizes/physics/2024/summary/" rel="noopener noreferrer nofollow"'
        in page
    )
    # Evidence: every passage exactly as sent, its probabilities, the rule and the request id.
    assert "The academy announces prizes in October." in page
    assert 'supports <span class="p">0.420</span> · contradicts <span class="p">0.310</span>' in page
    assert "best support 0.420 (passage 2) &lt; 0.7" in page
    assert "/requests?id=dec-req-2" in page
    assert "↻ rewrite, used" in page and "↻ rewrite, dropped" in page
    assert "markers pointing at no search result: [7]" in page
    assert "agent answered without searching" in page  # the failed question
    # The failed question still shows, without a final answer.
    assert "No final answer: the question failed" in page
    # The question where every step ran is checked and has a final answer, with no warning.
    done = article(page, 1)
    assert "✓ checked" in done and "<h3>Final answer</h3>" in done and "Incomplete" not in done
    # Job summary with labels before and after review.
    assert "Labels before review" in page and "Labels after review" in page
    assert "~ weak" in page
    assert "style=" not in page and "<script>" not in page  # the CSP allows neither


def test_an_incomplete_answer_says_so_and_names_the_missing_step(web: WebEnv, caller: Caller) -> None:
    job_id = answer_job(web, caller)
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{job_id}"))
    incomplete = article(page, 3)
    assert "◐ incomplete" in incomplete and "✓ checked" not in incomplete
    assert "Incomplete: not a checked answer." in incomplete
    missing = "the investigation of sentence 3 did not finish (failed: Agent API failed: 503 upstream busy)"
    assert f"<li>{missing}</li>" in incomplete
    # Every scored sentence is still shown, under a heading that does not call it the final answer.
    assert "Final answer" not in incomplete and "Answer so far" in incomplete
    assert "It is often called a turning point." in incomplete
    assert "investigation failed: Agent API failed: 503 upstream busy" in incomplete
    # The job summary counts it apart from the checked ones.
    assert "checked 1 · failed 1 · skipped 0 · incomplete 1" in page
    assert "Steps that did not run" in page and "investigate 1" in page
    # The downloadable report file says the same.
    report = web.client.get(f"/jobs/{job_id}/report.html").get_data(as_text=True)
    assert "Incomplete: not a checked answer." in report and "Answer so far" in report
    assert "the investigation of sentence 3 did not finish" in report


def test_quote_report(web: WebEnv, caller: Caller) -> None:
    job_id = quote_job(web, caller)
    assert web.job(job_id).status == "completed"
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{job_id}"))
    # The quote with title, URL and date.
    assert '<blockquote class="quote">The adult human body has 206 bones.</blockquote>' in page
    assert ">How many bones are in the human body?</a> · 2024-01-22" in page
    assert '<div class="cite-line small mono">https://www.britannica.com/science/human-skeleton</div>' in page
    # The no-answer line and the closest candidate below the cutoff.
    assert "No result answers the question" in page
    assert '<blockquote class="quote closest">' in page
    # The results table: sentences, has_answer, best, p(best), confidence.
    assert "A newborn baby has around 270 bones, some of which fuse." in page
    assert '<td class="num p">0.970</td>' in page  # has_answer
    assert '<td class="num p">0.990</td>' in page  # p(best)
    assert '<td class="num p">0.980</td>' in page  # confidence
    assert "· not ranked" in page
    # The compare table.
    assert "<h3>Compare</h3>" in page and "≥ cutoff" in page
    assert "/requests?id=compare-1" in page
    # The failed question.
    assert "search failed: upstream 503" in page
    assert "✗ failed" in page
    assert page.count("✓ quoted") >= 1 and "∅ no answer" in page
    assert "style=" not in page and "<script>" not in page  # the CSP allows neither


def test_an_incomplete_quote_quotes_nothing_and_names_the_missing_steps(web: WebEnv, caller: Caller) -> None:
    job_id = quote_job(web, caller)
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{job_id}"))
    incomplete = article(page, 4)
    assert "◐ incomplete" in incomplete and "✓ quoted" not in incomplete
    assert "Incomplete: no quote." in incomplete
    assert (
        "<li>the rank request of result 3 did not finish (failed: upstream 500 after 3 retries)</li>"
        in incomplete
    )
    assert "<li>no compare request was sent, because not every result was ranked</li>" in incomplete
    # Nothing is quoted or offered as closest, and it does not claim that no result answers...
    assert '<blockquote class="quote' not in incomplete and "No result answers the question" not in incomplete
    # ...but the candidates ranked so far are shown.
    assert (
        "The adult human body has 206 bones." in incomplete and "upstream 500 after 3 retries" in incomplete
    )
    assert "<h3>Compare</h3>" not in incomplete
    assert '<div class="k">Incomplete</div><div class="v">1</div>' in page
    report = web.client.get(f"/jobs/{job_id}/report.html").get_data(as_text=True)
    assert "Incomplete: no quote." in report and "the rank request of result 3 did not finish" in report


def test_reports_on_another_model_say_where_the_cutoffs_were_measured(web: WebEnv, caller: Caller) -> None:
    note = "The cutoffs were measured on pplx-decider-v1.1-27b; this job used pplx-decider-flash-latest"
    sign_in(web.client, caller)
    for kind, report in (("answer", answer_report(Q1)), ("quote", quote_report(BONES))):
        default = submit_questions(web.client.post, caller.headers, kind, [("a", Q1)])
        other = submit_questions(
            web.client.post, caller.headers, kind, [("a", Q1)], {"model": "pplx-decider-flash-latest"}
        )
        for job_id in (default, other):
            store_reports(web.sessions, job_id, {"a": report})
            finalize(web.sessions, job_id)
        assert note not in html(web.client.get(f"/jobs/{default}"))
        page = html(web.client.get(f"/jobs/{other}"))
        assert note in page and 'id="model-note"' in page
        assert note in web.client.get(f"/jobs/{other}/report.html").get_data(as_text=True)


def test_question_downloads(web: WebEnv, caller: Caller) -> None:
    job_id = quote_job(web, caller)
    sign_in(web.client, caller)
    lines = ndjson_records(web.client.get(f"/jobs/{job_id}/results.ndjson").get_data(as_text=True))
    assert [x["custom_id"] for x in lines] == ["b", "r", "f", "i"]
    assert [x["outcome"] for x in lines] == ["quoted", "no_answer", "failed", "incomplete"]
    assert lines[3]["quote"] is None and lines[3]["incomplete_steps"]
    rows = csv_records(web.client.get(f"/jobs/{job_id}/results.csv").get_data(as_text=True))
    assert [r["outcome"] for r in rows] == ["quoted", "no_answer", "failed", "incomplete"]
    assert rows[0]["quote"] == "The adult human body has 206 bones."
    assert rows[0]["url"] == "https://www.britannica.com/science/human-skeleton"
    assert rows[1]["closest_p_answers"] == "0.43"
    assert rows[3]["quote"] == "" and rows[3]["incomplete_steps"].startswith("the rank request of result 3")
    answer_id = answer_job(web, caller)
    rows = csv_records(web.client.get(f"/jobs/{answer_id}/results.csv").get_data(as_text=True))
    assert rows[0]["final_answer"].startswith("John J. Hopfield and Geoffrey Hinton won")
    assert rows[1]["outcome"] == "failed"
    assert rows[2]["outcome"] == "incomplete" and rows[2]["final_answer"] == ""
    assert rows[2]["partial_answer"].startswith("John J. Hopfield and Geoffrey Hinton won")
    assert rows[2]["incomplete_steps"].startswith("the investigation of sentence 3 did not finish")
    report = web.client.get(f"/jobs/{answer_id}/report.html").get_data(as_text=True)
    assert "<script" not in report and "The academy announces prizes in October." in report
    assert "/requests?id=" not in report


def test_unfinished_question_shows_no_report_yet(web: WebEnv, caller: Caller) -> None:
    job_id = submit_questions(web.client.post, caller.headers, "quote", [("b", BONES), ("r", RIVETS)])
    store_reports(web.sessions, job_id, {"b": quote_report(BONES)})
    sign_in(web.client, caller)
    page = html(web.client.get(f"/jobs/{job_id}"))
    assert "The report appears here when the job finishes" in page
    assert "206 bones" not in page
    # The report file can be saved at any time: finished questions in full, the others marked.
    report = web.client.get(f"/jobs/{job_id}/report.html").get_data(as_text=True)
    assert "No report for this question yet (its item is pending)." in report
    assert "The adult human body has 206 bones." in report


# --- injection ---------------------------------------------------------------------------------------------

SCRIPT = "<script>alert(1)</script>"
ATTR = '"onmouseover="alert(1)'
JS_URL = "javascript:alert(1)"
PAYLOAD = f"{SCRIPT} {ATTR} {JS_URL}"
UNSAFE_URLS = (
    JS_URL,
    " javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "java\tscript:alert(1)",
    "data:text/html,x",
)


def assert_inert(page: str) -> None:
    """No payload survived as markup: tags and quotes escaped, no javascript:/data: link anywhere."""
    assert SCRIPT not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert ATTR not in page
    assert "&#34;onmouseover=&#34;alert(1)" in page
    assert not re.search(r"\son\w+\s*=", page, re.I)
    for href in re.findall(r'href="([^"]*)"', page):
        assert href.startswith(("/", "#", "http://", "https://")), href
    assert not re.search(r'href="\s*(javascript|data):', page, re.I)


def test_injection_payloads_are_escaped_in_every_report(web: WebEnv, caller: Caller) -> None:
    claim_rows = [{"id": f"x{n}", "claim": f"Claim {n}: {PAYLOAD}", "label": True} for n in range(3)]
    claims_id = submit_claims(web.client.post, caller.headers, claim_rows, mode="grounded")
    sources = [{"title": PAYLOAD, "url": url, "date": ATTR, "snippet": PAYLOAD} for url in UNSAFE_URLS]
    settle(
        web.sessions,
        claims_id,
        {(r["id"], "grounded"): claim_output(0.5, ATTR, sources=sources) for r in claim_rows},
    )
    finalize(web.sessions, claims_id)

    answer_id = submit_questions(web.client.post, caller.headers, "answer", [("a", f"Q {PAYLOAD}")])
    store_reports(
        web.sessions, answer_id, {"a": answer_report(f"Q {PAYLOAD}", text=PAYLOAD, title=PAYLOAD, url=JS_URL)}
    )
    finalize(web.sessions, answer_id)

    quote_id = submit_questions(web.client.post, caller.headers, "quote", [("q", f"Q {PAYLOAD}")])
    store_reports(
        web.sessions, quote_id, {"q": quote_report(f"Q {PAYLOAD}", text=PAYLOAD, title=PAYLOAD, url=JS_URL)}
    )
    finalize(web.sessions, quote_id)

    sign_in(web.client, caller)
    for job_id in (claims_id, answer_id, quote_id):
        page = html(web.client.get(f"/jobs/{job_id}"))
        assert_inert(page)
        assert "not an http(s) address, so not a link" in page  # the URL is shown, as text
        report = web.client.get(f"/jobs/{job_id}/report.html").get_data(as_text=True)
        assert_inert(report)
    lookup = html(web.client.get("/requests", query_string={"id": ATTR}))
    assert_inert(lookup)
    assert html(web.client.get("/jobs")).count("alert(1)") == 0  # the list shows no user text here


def test_a_tenant_cannot_read_another_tenants_reports(
    web: WebEnv, caller: Caller, other_caller: Caller
) -> None:
    theirs = answer_job(web, other_caller)
    quote = quote_job(web, other_caller)
    sign_in(web.client, caller)
    for job_id in (theirs, quote):
        for suffix in ("", "/report.html", "/results.ndjson", "/results.csv"):
            resp = web.client.get(f"/jobs/{job_id}{suffix}")
            assert resp.status_code == 404
            body: Any = resp.get_data(as_text=True)
            assert "Hopfield" not in body and "206 bones" not in body
    lookup = web.client.get("/requests?id=dec-req-1")
    assert lookup.status_code == 404
