"""The new-job page through the Flask test client on real Postgres: NDJSON, JSON, CSV and pasted rows
create the job and 303 to its page; a bad file re-shows the form (400) naming the line and field with the
user's choices kept and nothing stored; CSRF is required; quota refusals are shown on the form.

No worker runs here: a created job is checked in the database and by its start message on the in-memory
broker (tests/e2e/test_browser_upload.py runs uploads to `completed`).
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import io
import json
import re
from html import unescape
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobs.tenancy import set_tenant
from models import session_scope
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)

pytestmark = pytest.mark.integration

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
JOB_PAGE = re.compile(r"/jobs/([0-9a-f-]{36})$")

CLAIMS_NDJSON = (
    b'{"id": "n1", "claim": "Rust 1.0 was released in May 2015.", "label": true}\n'
    b'{"id": "n2", "claim": "The Linux kernel was first released in 1998.", "label": false}\n'
)
CLAIMS_CSV = (
    b"id,claim,label\n"
    b"c1,Rust 1.0 was released in May 2015.,true\n"
    b'c2,"Git was created by Linus Torvalds, in 2005.",\n'
)


def signed_in(web: WebEnv, who: Caller) -> str:
    """Sign the test client in; returns the CSRF token of the new-job form."""
    page = web.client.get("/sign-in").get_data(as_text=True)
    token = CSRF_RE.search(page)
    assert token
    resp = web.client.post("/sign-in", data={"token": who.token, "csrf_token": token.group(1)})
    assert resp.status_code == 302
    form = web.client.get("/jobs/new")
    assert form.status_code == 200
    match = CSRF_RE.search(form.get_data(as_text=True))
    assert match
    return match.group(1)


def post_form(
    client: FlaskClient,
    csrf: str | None,
    *,
    file: tuple[bytes, str] | None = None,
    **fields: str,
) -> Any:
    data: dict[str, Any] = {"kind": "claims", **fields}
    if csrf is not None:
        data["csrf_token"] = csrf
    if file is not None:
        content, filename = file
        data["file"] = (io.BytesIO(content), filename)
    return client.post("/jobs/new", data=data, content_type="multipart/form-data")


def created_job(web: WebEnv, resp: Any) -> str:
    assert resp.status_code == 303, resp.get_data(as_text=True)[:800]
    match = JOB_PAGE.search(resp.headers["Location"])
    assert match, resp.headers["Location"]
    job_id = match.group(1)
    assert web.started_job_ids() == [job_id]  # enqueued after commit, like the API
    return job_id


def test_new_job_form_is_linked_and_labelled(web: WebEnv, caller: Caller) -> None:
    signed_in(web, caller)
    jobs = web.client.get("/jobs").get_data(as_text=True)
    assert jobs.count('href="/jobs/new"') >= 2  # the nav and the jobs list
    page = web.client.get("/jobs/new").get_data(as_text=True)
    assert 'enctype="multipart/form-data"' in page
    for control in ("kind", "file", "paste", "mode", "supported_min", "contradicted_max", "budget_usd"):
        assert f'<label for="{control}">' in page, control
    for control in ("priority", "webhook_url"):
        assert f'<label for="{control}">' in page
    assert 'aria-current="page">New job' in page


def test_ndjson_file_creates_the_job_and_lands_on_its_page(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    resp = post_form(
        web.client,
        csrf,
        file=(CLAIMS_NDJSON, "claims.ndjson"),
        mode="both",
        supported_min="0.7",
        contradicted_max="0.3",
        budget_usd="2.5",
        priority="interactive",
        webhook_url="https://hooks.example.com/factgate",
        name="nightly batch",
    )
    job_id = created_job(web, resp)
    job = web.job(job_id)
    assert (job.kind, job.status, job.total_items, job.tenant_id) == ("claims", "queued", 4, caller.tenant_id)
    assert job.options["mode"] == "both" and job.options["supported_min"] == 0.7
    assert job.options["contradicted_max"] == 0.3 and job.options["budget_usd"] == 2.5
    assert job.options["webhook_url"] == "https://hooks.example.com/factgate"
    assert job.priority == "interactive" and job.meta == {"name": "nightly batch"}
    assert [(i.custom_id, i.mode) for i in web.items(job_id)] == [
        ("n1", "ungrounded"),
        ("n1", "grounded"),
        ("n2", "ungrounded"),
        ("n2", "grounded"),
    ]
    page = web.client.get(resp.headers["Location"]).get_data(as_text=True)
    assert "Job submitted: 4 items" in page and "data-progress-url" in page


def test_csv_file_creates_claims_with_labels(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    job_id = created_job(web, post_form(web.client, csrf, file=(CLAIMS_CSV, "claims.csv")))
    items = web.items(job_id)
    assert [(i.custom_id, i.mode) for i in items] == [("c1", "grounded"), ("c2", "grounded")]
    assert items[1].input["claim"] == "Git was created by Linus Torvalds, in 2005."
    assert items[0].input["label"] is True and items[1].input.get("label") is None


def test_json_file_and_question_kinds(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    rows = [{"id": "q1", "question": "How many bones are in the adult human body?"}]
    resp = post_form(web.client, csrf, file=(json.dumps(rows).encode(), "questions.json"), kind="quote")
    job = web.job(created_job(web, resp))
    assert (job.kind, job.total_items) == ("quote", 1)
    # Claims options of a script-less browser (every group is sent) do not apply to a quote job.
    csv_rows = b"id,question\nq1,Who won the 2024 Nobel Prize in Physics?\nq2,What is K2-18b?\n"
    resp = post_form(web.client, csrf, file=(csv_rows, "q.csv"), kind="answer", mode="both", priority="batch")
    job = web.job(created_job(web, resp))
    assert (job.kind, job.total_items) == ("answer", 2)
    assert "mode" not in job.options


def test_citations_from_the_form_keep_their_own_cutoffs_and_refuse_a_csv(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    row = {
        "id": "a1",
        "answer": "Tea began in China [1].",
        "sources": [{"id": "1", "text": "Tea began in China."}],
    }
    # A script-less browser sends the claims group too: its supported_min (0.8) is claims', not citations'.
    resp = post_form(web.client, csrf, file=(json.dumps(row).encode(), "answers.jsonl"), kind="citations",
                     supported_min="0.8", contradicted_max="0.2", mode="grounded")  # fmt: skip
    job = web.job(created_job(web, resp))
    assert (job.kind, job.total_items) == ("citations", 1)
    assert job.options["supported_min"] == 0.7 and "mode" not in job.options
    refused = post_form(web.client, csrf, file=(b"id,answer\na1,x\n", "answers.csv"), kind="citations")
    assert refused.status_code == 400
    assert "NDJSON or JSON" in refused.get_data(as_text=True)


TEA = json.dumps(
    {"id": "a1", "answer": "Tea began in China [1].", "sources": [{"id": "1", "text": "Tea began in China."}]}
).encode()
CUTOFFS = ("supported_min", "weak_min", "contradicted_min", "checkable_min")


def test_citations_options_from_their_own_group(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    form = web.client.get("/jobs/new").get_data(as_text=True)
    # The group is shown for citations alone; each field starts at the option's default.
    assert 'id="citations-options" data-kinds="citations"' in form
    for name, default in zip(CUTOFFS, ("0.7", "0.4", "0.6", "0.5"), strict=True):
        assert re.search(rf'id="citations_{name}" name="citations_{name}"[^>]* value="{default}"', form), name
    typed = dict(zip(CUTOFFS, ("0.8", "0.3", "0.55", "0.45"), strict=True))
    fields = {f"citations_{name}": value for name, value in typed.items()}
    resp = post_form(
        web.client, csrf, file=(TEA, "answers.jsonl"), kind="citations", supported_min="0.9",
        citations_misattribution="false", citations_review="agent", **fields,
    )  # fmt: skip
    job = web.job(created_job(web, resp))
    assert job.kind == "citations"
    assert {name: job.options[name] for name in CUTOFFS} == {k: float(v) for k, v in typed.items()}
    assert (job.options["misattribution"], job.options["review"]) == (False, "agent")
    # A claims job is never sent the citations group (a browser without script submits it too).
    resp = post_form(web.client, csrf, file=(CLAIMS_NDJSON, "c.ndjson"), citations_supported_min="0.1")
    claims = web.job(created_job(web, resp))
    assert "weak_min" not in claims.options and claims.options["supported_min"] != 0.1


QUESTIONS_CSV = b"id,question\nq1,How deep is the Mariana Trench?\n"


def test_answer_and_quote_packing_options_from_their_own_group(web: WebEnv, caller: Caller) -> None:
    """`pack_size` and `audit_share` of the answer and quote kinds (docs/spec.md §9.6, §9.7) have fields of
    their own, shown for those kinds only and starting at the kinds' defaults; citations keeps its own."""
    csrf = signed_in(web, caller)
    form = web.client.get("/jobs/new").get_data(as_text=True)
    assert 'id="questions-options" data-kinds="answer quote"' in form
    assert re.search(r'id="questions_pack_size" name="questions_pack_size"[^>]* value="1"', form)
    assert re.search(r'id="questions_audit_share" name="questions_audit_share"[^>]* value="0.02"', form)
    # A browser without script sends every group: each kind takes only its own fields.
    others = {"citations_pack_size": "9", "citations_audit_share": "0.1", "claims_pack_size": "7"}
    resp = post_form(web.client, csrf, file=(QUESTIONS_CSV, "q.csv"), kind="answer",
                     questions_pack_size="4", questions_audit_share="0.5", **others)  # fmt: skip
    answer = web.job(created_job(web, resp))
    assert (answer.kind, answer.options["pack_size"], answer.options["audit_share"]) == ("answer", 4, 0.5)
    resp = post_form(web.client, csrf, file=(QUESTIONS_CSV, "q.csv"), kind="quote", questions_pack_size="3")
    quote = web.job(created_job(web, resp))
    assert (quote.kind, quote.options["pack_size"]) == ("quote", 3)
    theirs = {"questions_pack_size": "2", "questions_audit_share": "0.9", "citations_pack_size": "16"}
    resp = post_form(web.client, csrf, file=(TEA, "answers.jsonl"), kind="citations", **theirs)
    citations = web.job(created_job(web, resp))
    assert (citations.options["pack_size"], citations.options["audit_share"]) == (16, 0.02)


@pytest.mark.parametrize(("field", "value"), [("questions_pack_size", "0"), ("questions_audit_share", "2")])
def test_a_bad_answer_packing_option_points_at_its_own_field(
    web: WebEnv, caller: Caller, field: str, value: str
) -> None:
    csrf = signed_in(web, caller)
    before = web.table_counts()
    resp = post_form(web.client, csrf, file=(QUESTIONS_CSV, "q.csv"), kind="answer", **{field: value})
    page = refused(web, resp)
    assert f'<a href="#{field}">' in page
    assert f'aria-describedby="{field}-hint {field}-error" aria-invalid="true"' in page
    assert re.search(rf'id="{field}"[^>]* value="{value}"', page)  # what the user typed comes back
    assert web.table_counts() == before


def test_a_bad_citations_option_points_at_its_own_field(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    before = web.table_counts()
    resp = post_form(
        web.client, csrf, file=(TEA, "answers.jsonl"), kind="citations",
        citations_supported_min="0.3", citations_weak_min="0.5",
    )  # fmt: skip
    page = refused(web, resp)
    assert '<a href="#citations_weak_min">' in page
    assert 'aria-describedby="citations_weak_min-hint citations_weak_min-error" aria-invalid="true"' in page
    assert re.search(r'id="citations_weak_min"[^>]* value="0.5"', page)  # what the user typed comes back
    assert '<a href="#weak_min">' not in page and '<a href="#supported_min">' not in page
    assert web.table_counts() == before


def test_a_json_object_file_brings_items_and_metadata_but_not_kind(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    body = {
        "items": [{"id": "o1", "claim": "Rust 1.0 was released in May 2015."}],
        "metadata": {"team": "qa"},
    }
    job = web.job(created_job(web, post_form(web.client, csrf, file=(json.dumps(body).encode(), "b.json"))))
    assert (job.total_items, job.meta) == (1, {"team": "qa"})
    before = web.table_counts()
    body = {"kind": "quote", "items": []}
    page = refused(web, post_form(web.client, csrf, file=(json.dumps(body).encode(), "b.json")))
    assert "the JSON file has a field 'kind': it holds the rows" in page
    assert web.table_counts() == before


def test_pasted_rows_are_used_when_no_file_is_chosen(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    # An empty file part is what a browser sends when no file is chosen.
    resp = post_form(
        web.client, csrf, file=(b"", ""), paste="id,claim\np1,Rust 1.0 was released in May 2015.\n"
    )
    assert [i.custom_id for i in web.items(created_job(web, resp))] == ["p1"]
    resp = post_form(web.client, csrf, paste=CLAIMS_NDJSON.decode())
    assert [i.custom_id for i in web.items(created_job(web, resp))] == ["n1", "n2"]


def test_a_file_of_unknown_type_is_read_by_its_first_character(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    job_id = created_job(web, post_form(web.client, csrf, file=(CLAIMS_NDJSON, "rows.txt")))
    assert [i.custom_id for i in web.items(job_id)] == ["n1", "n2"]
    job_id = created_job(web, post_form(web.client, csrf, file=(CLAIMS_CSV, "export")))
    assert [i.custom_id for i in web.items(job_id)] == ["c1", "c2"]


def test_what_the_user_typed_is_escaped_when_the_form_comes_back(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    payload = "</textarea><script>alert(1)</script>"
    resp = post_form(
        web.client, csrf, file=(b"id,claim\na,\n", f"{payload}.csv"), name=payload, budget_usd=payload
    )
    assert resp.status_code == 400
    raw = resp.get_data(as_text=True)
    assert "<script>alert(1)" not in raw and "&lt;script&gt;alert(1)&lt;/script&gt;" in raw
    resp = post_form(web.client, csrf, paste=payload)
    raw = resp.get_data(as_text=True)
    assert resp.status_code == 400 and "<script>alert(1)" not in raw
    assert "&lt;/textarea&gt;&lt;script&gt;" in raw


def refused(web: WebEnv, resp: Any, status: int = 400) -> str:
    assert resp.status_code == status, resp.get_data(as_text=True)[:800]
    assert web.started_job_ids() == []
    return unescape(resp.get_data(as_text=True))


@pytest.mark.parametrize(
    ("content", "filename", "expected"),
    [
        (b'{"id": "a", "claim": "fine"}\n{"id": "b"}\n', "bad.ndjson", 'line 2: field "claim": is required'),
        (b"id,claim,label\na,fine,true\nb,also,maybe\n", "bad.csv", 'line 3: field "label": must be true'),
        (b"id,claim\na,fine\nb,x,extra\n", "bad.csv", "line 3: has 3 fields; the header has 2"),
        (b"id,text\n", "bad.csv", 'line 1: unknown column "text"'),
        (b'[{"id": "a", "claim": "fine"}, {"id": "b"}]', "bad.json", "items[1].claim: is required"),
        (b'[{"id": "a",\n "claim": "x"},\n]', "bad.json", "the JSON file is not valid JSON: Expecting value"),
    ],
)
def test_a_bad_file_reshows_the_form_naming_line_and_field(
    web: WebEnv, caller: Caller, content: bytes, filename: str, expected: str
) -> None:
    csrf = signed_in(web, caller)
    before = web.table_counts()
    resp = post_form(
        web.client, csrf, file=(content, filename), mode="ungrounded", supported_min="0.75", name="kept"
    )
    page = refused(web, resp)
    assert expected in page
    assert web.table_counts() == before  # no job, no items
    # The error summary links to the file input, which points at its own message.
    assert 'id="error-summary"' in page and '<a href="#file">' in page
    assert 'aria-describedby="file-hint file-error" aria-invalid="true"' in page
    assert 'id="file-error"' in page
    # The user's choices are kept.
    assert '<option value="ungrounded" selected>' in page
    assert 'value="0.75"' in page and 'value="kept"' in page
    assert filename in page  # "choose the file again"


def test_many_bad_rows_list_the_first_ten_and_count_the_rest(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    content = b"id,claim\n" + b"".join(b"r%d,\n" % n for n in range(15))
    page = refused(web, post_form(web.client, csrf, file=(content, "many.csv")))
    assert page.count('<li><a href="#file">line ') == 10
    assert 'line 2: field "claim": must not be empty' in page
    assert 'line 11: field "claim"' in page and 'line 12: field "claim"' not in page
    assert "<li>and 5 more</li>" in page


def test_a_bad_option_points_at_its_field(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    before = web.table_counts()
    resp = post_form(
        web.client, csrf, file=(CLAIMS_NDJSON, "c.ndjson"), supported_min="0.2", contradicted_max="0.5"
    )
    page = refused(web, resp)
    assert 'option "contradicted_max": must be below supported_min' in page
    assert '<a href="#contradicted_max">' in page
    assert 'aria-describedby="contradicted_max-hint contradicted_max-error" aria-invalid="true"' in page
    resp = post_form(web.client, csrf, file=(CLAIMS_NDJSON, "c.ndjson"), webhook_url="ftp://example.com/x")
    assert '<a href="#webhook_url">' in refused(web, resp)
    assert web.table_counts() == before


def test_nothing_to_submit_and_bad_paste_name_their_box(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    page = refused(web, post_form(web.client, csrf, paste="  \n"))
    assert "choose a file, or paste a few rows" in page and '<a href="#file">' in page
    page = refused(web, post_form(web.client, csrf, paste='{"id": "a", "claim": ""}'))
    assert 'line 1: field "claim": must not be empty' in page
    assert '<a href="#paste">' in page and "{&#34;id&#34;" not in page
    assert '<textarea id="paste"' in page and '"claim": ""}</textarea>' in page  # kept, escaped


def test_csrf_token_is_required(web: WebEnv, caller: Caller) -> None:
    signed_in(web, caller)
    before = web.table_counts()
    resp = post_form(web.client, None, file=(CLAIMS_NDJSON, "c.ndjson"))
    assert resp.status_code == 400
    assert "Form not accepted" in resp.get_data(as_text=True)
    resp = post_form(web.client, "not-the-token", file=(CLAIMS_NDJSON, "c.ndjson"))
    assert resp.status_code == 400
    assert web.table_counts() == before


def test_signed_out_users_are_sent_to_sign_in(web: WebEnv) -> None:
    resp = web.client.get("/jobs/new")
    assert resp.status_code == 302 and "/sign-in" in resp.headers["Location"]


def test_quota_refusals_are_shown_on_the_form(web: WebEnv, caller: Caller) -> None:
    csrf = signed_in(web, caller)
    with session_scope(web.sessions) as s:
        set_tenant(s, caller.tenant_name, max_items_per_job=1)
    before = web.table_counts()
    page = refused(web, post_form(web.client, csrf, file=(CLAIMS_NDJSON, "c.ndjson"), mode="ungrounded"), 413)
    assert "Not submitted, nothing was stored" in page and 'id="error-summary"' in page
    assert "the job has 2 items (rows × modes), the limit is 1 per job" in page
    assert '<option value="ungrounded" selected>' in page
    with session_scope(web.sessions) as s:
        set_tenant(s, caller.tenant_name, max_items_per_job=None, max_active_jobs=1)
    one_row = CLAIMS_NDJSON.splitlines(keepends=True)[0]
    created_job(web, post_form(web.client, csrf, file=(one_row, "one.ndjson")))
    before = web.table_counts()
    page = refused(web, post_form(web.client, csrf, file=(CLAIMS_NDJSON, "c.ndjson")), 429)
    assert "jobs are still running or queued, the limit is 1" in page
    assert web.table_counts() == before


def test_a_large_file_streams_through_the_apis_intake(web: WebEnv, caller: Caller) -> None:
    """12,000 CSV rows go through `submit_stream` (the API's streamed path, COPY on Postgres): one bad row
    far down the file is named by its line and nothing is stored; the file fixed becomes 12,000 items.
    (Kept under 500 kB: over that the test client spools its multipart body to a file it never closes.)"""
    csrf = signed_in(web, caller)
    rows = [b"r%d,Claim number %d is true.,true\n" % (n, n) for n in range(12_000)]
    bad = list(rows)
    bad[9_998] = b"r9998,,true\n"  # data line 9,999 is line 10,000 of the file (the header is line 1)
    before = web.table_counts()
    body = b"id,claim,label\n" + b"".join(bad)
    page = refused(web, post_form(web.client, csrf, file=(body, "big.csv"), mode="ungrounded"))
    assert 'line 10000: field "claim": must not be empty' in page
    assert web.table_counts() == before
    body = b"id,claim,label\n" + b"".join(rows)
    resp = post_form(web.client, csrf, file=(body, "big.csv"), mode="ungrounded")
    assert resp.status_code == 303, resp.get_data(as_text=True)[:500]
    jobs, items, _calls, staged = web.table_counts()
    assert (jobs, items, staged) == (
        before[0] + 1,
        before[1] + 12_000,
        before[3],
    )  # built, nothing left staged
