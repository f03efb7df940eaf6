"""Streamed intake (NDJSON and CSV straight into COPY) and chunked exports, against real Postgres.

A streamed body is validated line by line while its rows go into the job's transaction: a bad row at
any line is a 400 naming that line and field, and nothing is stored. Exports are read in short keyset
chunks and end with a trailer; a reader slower than Postgres' idle-in-transaction timeout still gets
every row.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import select, text

from jobs.tenancy import revoke_token
from models import ApiToken, session_scope
from tests.integration.export_files import csv_records, ndjson_records
from tests.integration.item_rows import DEDUPE_KEY, LEADER_ID, item_rows
from tests.integration.test_api_intake import Unchanged, error_of
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    ROWS,
    Caller,
    WebEnv,
    caller,
    make_env,
    memory_celery,
    ndjson,
    settle_items,
    web,
    web_settings,
)
from tests.services import create_pg_database, drop_pg_database
from web.exports import CHUNK_ITEMS

pytestmark = pytest.mark.integration


def csv_headers(caller: Caller) -> dict[str, str]:
    return {**caller.headers, "Content-Type": "text/csv"}


# --- streamed intake -------------------------------------------------------------------------------------


def test_streamed_ndjson_stores_what_the_json_path_stores(web: WebEnv, caller: Caller) -> None:
    """Same rows, same items: input documents, positions, dedupe keys (only for repeats, linked to the
    first), warnings for claims outside their query, totals."""
    long_claim = "A claim that is far too long for the grounding query. " * 8
    rows = [
        *ROWS,
        {"id": "c4", "claim": ROWS[0]["claim"]},  # a repeat of c1's request
        {"id": "c5", "claim": long_claim, "source": "https://example.org/a"},
    ]
    from_json = web.client.post(
        "/v1/jobs",
        json={"kind": "claims", "options": {"mode": "both"}, "items": rows},
        headers=caller.headers,
    )
    streamed = web.client.post(
        "/v1/jobs?kind=claims&mode=both", data=ndjson(rows), headers=caller.ndjson_headers()
    )
    assert from_json.status_code == 202 and streamed.status_code == 202, streamed.get_json()
    a, b = from_json.get_json()["id"], streamed.get_json()["id"]
    assert item_rows(web, b) == item_rows(web, a)
    assert sum(1 for r in item_rows(web, b) if r[DEDUPE_KEY] is not None) == 4  # c1 and c4, both modes
    assert sum(1 for r in item_rows(web, b) if r[LEADER_ID] is not None) == 2  # c4's two items point at c1's
    job_a, job_b = web.job(a), web.job(b)
    assert job_b.total_items == job_a.total_items == 10
    assert job_b.warnings == job_a.warnings and "c5" in job_b.warnings[0]
    assert job_b.submission_sha256 is not None


def test_bad_row_deep_in_a_large_body_names_its_line_and_stores_nothing(web: WebEnv, caller: Caller) -> None:
    """150,000 rows, the bad one last: read in chunks, loaded as it streams, all of it rolled back."""
    body = bytearray()
    for i in range(1, 150_000):
        body += b'{"id":"r%d","claim":"Claim %d."}\n' % (i, i)
    body += b'{"id":"r150000","claim":""}\n'
    with Unchanged(web):
        resp = web.client.post("/v1/jobs?kind=claims", data=bytes(body), headers=caller.ndjson_headers())
        err = error_of(resp, 400)
    assert err["line"] == 150_000
    assert err["message"].endswith('first: line 150000: field "claim": must not be empty')


def test_duplicate_id_across_chunk_and_copy_batch_boundaries(web: WebEnv, caller: Caller) -> None:
    """The duplicate comes after several 256 KiB body chunks and 5,000-row COPY batches."""
    rows = [{"id": f"row-{i:05d}", "claim": f"Claim number {i} about something."} for i in range(12_000)]
    rows.append({"id": "row-00001", "claim": "Again."})
    assert len(ndjson(rows)) > 2 * 256 * 1024
    with Unchanged(web):
        err = error_of(
            web.client.post("/v1/jobs?kind=claims", data=ndjson(rows), headers=caller.ndjson_headers()), 400
        )
    assert err["line"] == 12_001 and err["field"] == "id"
    assert 'duplicate id "row-00001" (first on line 2)' in err["message"]


def test_streamed_quota_counts_items_while_reading(web: WebEnv, caller: Caller) -> None:
    with web.sessions() as s:
        s.execute(text("UPDATE tenants SET max_items_per_job = 4 WHERE id = :t"), {"t": caller.tenant_id})
        s.commit()
    body = "id,claim\n" + "".join(f"r{i},Claim {i}.\n" for i in range(3))
    with Unchanged(web):
        resp = web.client.post("/v1/jobs?kind=claims&mode=both", data=body, headers=csv_headers(caller))
        err = error_of(resp, 413)
    assert err["type"] == "quota_exceeded" and err["field"] == "max_items_per_job"


def test_streamed_idempotency_key_returns_the_job_or_409(web: WebEnv, caller: Caller) -> None:
    body = "id,claim\nc1,A claim.\n"
    headers = {**csv_headers(caller), "Idempotency-Key": "csv-1"}
    first = web.client.post("/v1/jobs?kind=claims", data=body, headers=headers)
    assert first.status_code == 202
    web.drain_messages()
    with Unchanged(web):
        again = web.client.post("/v1/jobs?kind=claims", data=body, headers=headers)
        assert again.status_code == 200 and again.get_json()["id"] == first.get_json()["id"]
        other = web.client.post("/v1/jobs?kind=claims", data=body + "c2,Another.\n", headers=headers)
        assert error_of(other, 409)["job_id"] == first.get_json()["id"]


# --- CSV bodies ----------------------------------------------------------------------------------------


def test_csv_claims_store_what_ndjson_stores(web: WebEnv, caller: Caller) -> None:
    """Header in any order, label optional (true/false in any case), a quoted cell over two lines."""
    rows = [
        {"id": "c1", "claim": "Python 3.12 was released in October 2023.", "label": True, "kind": "stable"},
        {"id": "c2", "claim": 'Git, "the stupid content tracker", was\nwritten in 2005.', "label": False},
        {"id": "c3", "claim": "Rust 1.0 was released in May 2015."},
    ]
    body = (
        "claim,label,id,kind\r\n"
        "Python 3.12 was released in October 2023.,TRUE,c1,stable\r\n"
        '"Git, ""the stupid content tracker"", was\nwritten in 2005.",false,c2,\r\n'
        "\r\n"
        "Rust 1.0 was released in May 2015.,,c3,\r\n"
    )
    from_csv = web.client.post("/v1/jobs?kind=claims", data=body.encode(), headers=csv_headers(caller))
    from_ndjson = web.client.post("/v1/jobs?kind=claims", data=ndjson(rows), headers=caller.ndjson_headers())
    assert from_csv.status_code == 202, from_csv.get_json()
    assert item_rows(web, from_csv.get_json()["id"]) == item_rows(web, from_ndjson.get_json()["id"])


@pytest.mark.parametrize("kind", ["answer", "quote"])
def test_csv_questions(web: WebEnv, caller: Caller, kind: str) -> None:
    body = (
        "\ufeffid,question\nq1,How deep is the Mariana Trench?\nq2,Who won the 2024 Nobel Prize in Physics?\n"
    )
    resp = web.client.post(f"/v1/jobs?kind={kind}", data=body.encode(), headers=csv_headers(caller))
    assert resp.status_code == 202, resp.get_json()
    items = web.items(resp.get_json()["id"])
    assert [(i.custom_id, i.input, i.position, i.stage) for i in items] == [
        ("q1", {"kind": kind, "question": "How deep is the Mariana Trench?"}, 0, "question"),
        ("q2", {"kind": kind, "question": "Who won the 2024 Nobel Prize in Physics?"}, 1, "question"),
    ]
    assert {i.endpoint for i in items} == {"agent" if kind == "answer" else "search"}


@pytest.mark.parametrize(
    ("kind", "body", "words"),
    [
        ("claims", "id,text\nc1,A claim.\n", 'line 1: unknown column "text" (allowed: id, claim'),
        ("claims", "id,label\nc1,true\n", 'line 1: column "claim": is missing from the header'),
        ("claims", "id,claim,id\nc1,A,c2\n", 'line 1: column "id": appears twice in the header'),
        ("answer", "id,claim\nq1,A?\n", 'line 1: unknown column "claim"'),
        ("claims", "", "the file is empty; line 1 must be the header"),
        ("claims", "id,claim\n", "no claims"),
        ("claims", 'id,claim\nc1,"unterminated\n', "line 2: is not valid CSV"),
        ("claims", "id,claim\nc1,A claim.,extra\n", "line 2: has 3 fields; the header has 2"),
        (
            "claims",
            "id,claim,label\nc1,A claim.,yes\n",
            'line 2: field "label": must be true or false, got "yes"',
        ),
        ("claims", b"id,claim\nc1,caf\xe9\n", "line 2: is not valid UTF-8"),
    ],
)
def test_csv_header_and_cell_errors_name_the_line(
    web: WebEnv, caller: Caller, kind: str, body: str | bytes, words: str
) -> None:
    with Unchanged(web):
        resp = web.client.post(f"/v1/jobs?kind={kind}", data=body, headers=csv_headers(caller))
        err = error_of(resp, 400)
    assert words in err["message"], err["message"]


@pytest.mark.parametrize(
    ("row_id", "words"),
    [
        ("", 'field "id": must not be empty'),
        ("   ", 'field "id": must not be empty'),
        ("bad\u202eid", 'field "id": must not contain control or formatting characters'),
        ("tab\tid", 'field "id": must not contain control or formatting characters'),
        ("zero\u200bwidth", 'field "id": must not contain control or formatting characters'),
        ("x" * 201, 'field "id": is 201 characters, over the limit of 200'),
        ("c1", 'field "id": duplicate id "c1" (first on line 2)'),
    ],
)
def test_id_rules_on_the_csv_path(web: WebEnv, caller: Caller, row_id: str, words: str) -> None:
    body = f'id,claim\nc1,A claim.\n"{row_id}",Another claim.\n'
    with Unchanged(web):
        err = error_of(web.client.post("/v1/jobs?kind=claims", data=body, headers=csv_headers(caller)), 400)
    assert err["line"] == 3 and err["field"] == "id"
    assert f"line 3: {words}" in err["message"]


def test_question_id_rules_on_the_csv_path(web: WebEnv, caller: Caller) -> None:
    body = 'id,question\nq1,How?\n"q\u202e2",Why?\nq1,Again?\n'
    with Unchanged(web):
        err = error_of(web.client.post("/v1/jobs?kind=answer", data=body, headers=csv_headers(caller)), 400)
    messages = [e["message"] for e in err["errors"]]
    assert [e["line"] for e in err["errors"]] == [3, 4]
    assert "control or formatting characters" in messages[0] and "duplicate id" in messages[1]


def test_415_names_every_accepted_type(web: WebEnv, caller: Caller) -> None:
    resp = web.client.post("/v1/jobs", data="x", headers={**caller.headers, "Content-Type": "text/plain"})
    err = error_of(resp, 415)
    assert "text/csv" in err["message"] and "application/x-ndjson" in err["message"]


# --- exports -------------------------------------------------------------------------------------------


def claims_job(web: WebEnv, caller: Caller, n: int, mode: str = "ungrounded") -> str:
    body = "id,claim\n" + "".join(f"r{i:05d},Claim {i}.\n" for i in range(n))
    resp = web.client.post(f"/v1/jobs?kind=claims&mode={mode}", data=body, headers=csv_headers(caller))
    assert resp.status_code == 202, resp.get_json()
    job_id: str = resp.get_json()["id"]
    return job_id


def test_ndjson_export_resumes_after_an_id(web: WebEnv, caller: Caller) -> None:
    jid = claims_job(web, caller, 1_600, mode="both")
    url = f"/v1/jobs/{jid}/results"
    full = web.client.get(url, headers=caller.headers).get_data(as_text=True)
    assert json.loads(full.splitlines()[-1]) == {"_end": {"count": 1_600, "after": None, "last_id": "r01599"}}
    records = ndjson_records(full)
    rest = web.client.get(f"{url}?after=r01234", headers=caller.headers).get_data(as_text=True)
    assert json.loads(rest.splitlines()[-1]) == {
        "_end": {"count": 365, "after": "r01234", "last_id": "r01599"}
    }
    assert ndjson_records(rest) == records[1_235:]
    last = web.client.get(f"{url}?after=r01599", headers=caller.headers).get_data(as_text=True)
    assert ndjson_records(last) == []


@pytest.mark.parametrize(
    ("query", "field"), [("after=nope", "after"), ("after=r00001&format=csv", "after"), ("after=", "after")]
)
def test_bad_after_is_400(web: WebEnv, caller: Caller, query: str, field: str) -> None:
    jid = claims_job(web, caller, 3)
    err = error_of(web.client.get(f"/v1/jobs/{jid}/results?{query}", headers=caller.headers), 400)
    assert err["field"] == field


def test_csv_export_ends_with_its_row_count(web: WebEnv, caller: Caller) -> None:
    jid = claims_job(web, caller, 1_100, mode="both")
    text_ = web.client.get(f"/v1/jobs/{jid}/results?format=csv", headers=caller.headers).get_data(
        as_text=True
    )
    assert text_.endswith("\r\n#end,2200\r\n")
    assert len(csv_records(text_)) == 2_200


def received_text(pieces: list[Any]) -> str:
    return "".join(p.decode() if isinstance(p, bytes) else p for p in pieces)


@pytest.mark.parametrize("fmt", ["ndjson", "csv"])
def test_an_export_stops_at_the_next_chunk_once_its_token_is_revoked(
    web: WebEnv, caller: Caller, fmt: str
) -> None:
    """Access ends with the grant: a download under way when its token is revoked stops before its next
    1,000-item chunk, without the trailer, so the file reads as incomplete, never as whole."""
    jid = claims_job(web, caller, 2_500)
    resp = web.client.get(f"/v1/jobs/{jid}/results?format={fmt}", headers=caller.headers, buffered=False)
    assert resp.status_code == 200
    pieces = iter(resp.response)
    received: list[Any] = []
    while received_text(received).count("\n") < 3:  # under way: the first chunk is being sent
        received.append(next(pieces))
    with session_scope(web.sessions) as s:
        token_id = s.scalar(select(ApiToken.id).where(ApiToken.tenant_id == caller.tenant_id))
        assert revoke_token(s, str(token_id)) == 1
    received.extend(pieces)
    resp.close()
    text_ = received_text(received)
    if fmt == "ndjson":
        ids = [json.loads(line)["custom_id"] for line in text_.splitlines()]  # no `_end` line among them
    else:
        assert text_.startswith("custom_id,") and "#end" not in text_
        ids = [row["custom_id"] for row in csv.DictReader(io.StringIO(text_))]
    # The rest of the chunk in hand, in order, and not one chunk more.
    assert 3 <= len(ids) <= CHUNK_ITEMS and ids == [f"r{i:05d}" for i in range(len(ids))]
    # The same token now gets nothing at all.
    assert web.client.get(f"/v1/jobs/{jid}/results", headers=caller.headers).status_code == 401


@pytest.fixture
def own_db_web(web_settings: dict[str, Any], memory_celery: Celery) -> Iterator[WebEnv]:
    """An app on a database of its own, whose settings a test may change."""
    url = create_pg_database(migrated=True)
    env = make_env({**web_settings, "database_url": url}, memory_celery)
    try:
        yield env
    finally:
        env.app.extensions["factgate"].engine.dispose()
        drop_pg_database(url)


def end_idle_transactions_after_3s(web: WebEnv) -> None:
    """From now on, Postgres ends any transaction of the app's left idle for more than 3 s."""
    with web.sessions() as s:
        name = s.execute(text("SELECT current_database()")).scalar_one()
        s.execute(text(f"ALTER DATABASE \"{name}\" SET idle_in_transaction_session_timeout = '3s'"))
        s.commit()
    web.app.extensions["factgate"].engine.dispose()  # new connections take the setting
    with web.sessions() as s:
        assert s.execute(text("SHOW idle_in_transaction_session_timeout")).scalar_one() == "3s"


def test_export_read_slower_than_the_idle_transaction_timeout_is_complete(own_db_web: WebEnv) -> None:
    """The reader pauses 3.5 s inside the first two 1,000-item chunks: a transaction held across the
    transfer would be ended by Postgres after 3 s (and the file silently cut); short per-chunk sessions are
    not. (3 s, not 1 s: a chunk's own short transaction builds 1,000 result lines, which took over a second in
    a CI run on a busy machine.) The timeout is set after the job is stored: the upload is not what this test
    measures (on a busy machine its own transaction could sit idle for a second between reads of the body)."""
    web = own_db_web
    caller = web.new_caller()
    jid = claims_job(web, caller, 2_500)
    end_idle_transactions_after_3s(web)
    resp = web.client.get(f"/v1/jobs/{jid}/results", headers=caller.headers, buffered=False)
    received: list[str] = []
    for piece in resp.response:
        received.append(piece.decode() if isinstance(piece, bytes) else piece)
        if len(received) in {1, 1_001}:  # inside a chunk, and the next: each one's session is closed already
            time.sleep(3.5)
    resp.close()
    records = ndjson_records("".join(received))
    assert [r["custom_id"] for r in records] == [f"r{i:05d}" for i in range(2_500)]


def test_errors_export_skips_long_gaps_between_failed_items(web: WebEnv, caller: Caller) -> None:
    """Failed items far apart: empty 1,000-position windows are skipped through the index."""
    jid = claims_job(web, caller, 2_600)
    settle_items(
        web.sessions,
        jid,
        {
            ("r00003", "ungrounded"): ("failed", "upstream 500"),
            ("r02450", "ungrounded"): ("skipped", "budget"),
        },
    )
    lines = ndjson_records(
        web.client.get(f"/v1/jobs/{jid}/errors", headers=caller.headers).get_data(as_text=True)
    )
    assert [(e["custom_id"], e["status"]) for e in lines] == [("r00003", "failed"), ("r02450", "skipped")]
