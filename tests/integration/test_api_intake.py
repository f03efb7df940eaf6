"""POST /v1/jobs against real Postgres: happy paths, idempotency, enqueue-after-commit, and every bad
input answered with a 4xx that names the problem while nothing at all is stored."""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import pytest
from sqlalchemy import select, text, update

from models import ApiToken, Job, utcnow
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    ROWS,
    Caller,
    WebEnv,
    caller,
    make_env,
    memory_celery,
    ndjson,
    other_caller,
    web,
    web_settings,
)
from tests.reference import CLAIMS_FILE
from web.fingerprint import SubmissionFingerprint
from workers.api import START_JOB

pytestmark = pytest.mark.integration


def error_of(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True)[:500])
    body = resp.get_json()
    assert set(body) == {"error"}
    assert {"type", "message"} <= set(body["error"])
    err: dict[str, Any] = body["error"]
    return err


class Unchanged:
    """Asserts that a block stored nothing: jobs, items and api_calls row counts are the same after."""

    def __init__(self, web: WebEnv) -> None:
        self.web = web

    def __enter__(self) -> Unchanged:
        self.before = self.web.table_counts()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.web.table_counts() == self.before
        assert self.web.drain_messages() == []  # and nothing was enqueued


# --- happy paths ---------------------------------------------------------------------------------------


def test_json_submission_creates_job_items_and_enqueues_start(web: WebEnv, caller: Caller) -> None:
    before = web.table_counts()
    resp = web.client.post(
        "/v1/jobs",
        json={
            "kind": "claims",
            "options": {"mode": "both", "model": "pplx-decider-flash-latest", "budget_usd": 2},
            "items": ROWS,
            "metadata": {"project": "q3-review", "owner": {"team": "facts"}},
        },
        headers=caller.headers,
    )
    assert resp.status_code == 202, resp.get_json()
    body = resp.get_json()
    job_id = body["id"]
    assert resp.headers["Location"] == f"/v1/jobs/{job_id}"
    assert body["kind"] == "claims"
    assert body["status"] == "queued"
    assert body["options"] == {
        "model": "pplx-decider-flash-latest",
        "mode": "both",
        "supported_min": 0.8,
        "contradicted_max": 0.2,
        "budget_usd": 2.0,
        "priority": "batch",
        "pack_size": 1,
    }
    assert body["priority"] == "batch"
    assert body["metadata"] == {"project": "q3-review", "owner": {"team": "facts"}}
    assert body["request_counts"] == {
        "total": 6,
        "completed": 0,
        "failed": 0,
        "skipped": 0,
        "pending": 6,
        "running": 0,
    }
    # Stored: one job, one item per claim per mode, in input order.
    assert web.table_counts() == (before[0] + 1, before[1] + 6, before[2], before[3])
    items = web.items(job_id)
    assert [(i.custom_id, i.mode) for i in items] == [
        (r["id"], m) for r in ROWS for m in ("ungrounded", "grounded")
    ]
    assert items[0].input["claim"] == ROWS[0]["claim"]
    assert items[0].input["label"] is True
    assert items[4].input["label"] is True and items[4].input["kind"] is None
    job = web.job(job_id)
    assert job.tenant_id == caller.tenant_id
    assert job.simulated is True
    assert web.started_job_ids() == [job_id]


def test_ndjson_submission_reads_options_and_metadata_from_query(web: WebEnv, caller: Caller) -> None:
    # CRLF endings, a blank line and no final newline are all fine.
    lines = [json.dumps(r) for r in ROWS]
    body = (lines[0] + "\r\n\r\n" + lines[1] + "\n" + lines[2]).encode()
    meta = json.dumps({"batch": 7})
    resp = web.client.post(
        "/v1/jobs",
        query_string={
            "kind": "claims",
            "mode": "ungrounded",
            "model": "pplx-decider-v1.2",
            "supported_min": "0.9",
            "contradicted_max": "0.1",
            "budget_usd": "0.5",
            "priority": "interactive",
            "metadata": meta,
        },
        data=body,
        headers=caller.ndjson_headers(),
    )
    assert resp.status_code == 202, resp.get_json()
    status = resp.get_json()
    assert status["options"] == {
        "model": "pplx-decider-v1.2",
        "mode": "ungrounded",
        "supported_min": 0.9,
        "contradicted_max": 0.1,
        "budget_usd": 0.5,
        "priority": "interactive",
        "pack_size": 1,
    }
    assert status["priority"] == "interactive"
    assert status["metadata"] == {"batch": 7}
    assert [(i.custom_id, i.mode) for i in web.items(status["id"])] == [(r["id"], "ungrounded") for r in ROWS]
    assert web.started_job_ids() == [status["id"]]


def test_reference_claims_file_is_accepted_as_is(web: WebEnv, caller: Caller) -> None:
    data = CLAIMS_FILE.read_bytes()
    resp = web.client.post("/v1/jobs?kind=claims", data=data, headers=caller.ndjson_headers())
    assert resp.status_code == 202, resp.get_json()
    body = resp.get_json()
    assert body["request_counts"]["total"] == 24
    assert body["options"]["mode"] == "grounded"
    assert body["warnings"] == []  # every reference claim fits its search query


def test_claims_outside_their_query_are_warned_about(web: WebEnv, caller: Caller) -> None:
    long_claim = "The committee agreed " + "after a very long deliberation " * 12 + "that it was true."
    body = web.submit(
        caller, [{"id": "long", "claim": long_claim}, {"id": "short", "claim": "Water is wet."}]
    )
    assert len(body["warnings"]) == 1
    assert "long" in body["warnings"][0]
    items = web.items(body["id"])
    assert {i.custom_id: i.input["in_query"] for i in items} == {"long": False, "short": True}


def test_simulated_flag_follows_the_api_key(
    web_settings: dict[str, Any], memory_celery: Any, tmp_path: Any
) -> None:
    env = make_env({**web_settings, "perplexity_api_key": "pplx-test-key"}, memory_celery)
    try:
        caller = env.new_caller()
        body = env.submit(caller)
        assert body["simulated"] is False
        assert "simulated_note" not in body
        assert "pplx-test-key" not in json.dumps(body)
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_enqueue_happens_after_commit(web_settings: dict[str, Any]) -> None:
    """Why a stand-in here: the moment of `send_task` is what matters, and only a recorder can look at
    the database from inside that moment. It checks, from a separate connection, that the job and all
    its items are already committed when the message is sent."""
    seen: list[tuple[str, list[Any], tuple[int, int] | None]] = []
    holder: dict[str, WebEnv] = {}

    class RecordingCelery:
        def send_task(self, name: str, args: list[Any] | None = None, **_kw: Any) -> None:
            env = holder["env"]
            with env.sessions() as session:  # a new connection: sees committed rows only
                job_id = uuid.UUID(args[0]) if args else None
                row = session.execute(
                    text(
                        "SELECT (SELECT count(*) FROM jobs WHERE id = :j),"
                        " (SELECT count(*) FROM items WHERE job_id = :j)"
                    ),
                    {"j": job_id},
                ).one()
            seen.append((name, list(args or []), (int(row[0]), int(row[1]))))

    env = make_env(web_settings, RecordingCelery())  # type: ignore[arg-type]
    holder["env"] = env
    try:
        caller = env.new_caller()
        body = env.submit(caller)
        assert seen == [(START_JOB, [body["id"]], (1, len(ROWS)))]
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_broker_outage_still_answers_202_with_the_job_committed(web_settings: dict[str, Any]) -> None:
    """The job is committed as queued; the sweeper starts queued jobs whose start message was lost."""

    class DownCelery:
        def send_task(self, *_a: Any, **_kw: Any) -> None:
            raise ConnectionError("broker down")

    env = make_env(web_settings, DownCelery())  # type: ignore[arg-type]
    try:
        caller = env.new_caller()
        body = env.submit(caller)
        assert env.job(body["id"]).status == "queued"
        assert len(env.items(body["id"])) == len(ROWS)
    finally:
        env.app.extensions["factgate"].engine.dispose()


# --- idempotency ---------------------------------------------------------------------------------------


def test_idempotency_key_returns_the_existing_job_with_200(
    web: WebEnv, caller: Caller, other_caller: Caller
) -> None:
    payload = {"kind": "claims", "items": ROWS}
    first = web.client.post(
        "/v1/jobs", json=payload, headers={**caller.headers, "Idempotency-Key": "batch-42"}
    )
    assert first.status_code == 202
    job_id = first.get_json()["id"]
    assert web.started_job_ids() == [job_id]

    with Unchanged(web):
        again = web.client.post(
            "/v1/jobs", json=payload, headers={**caller.headers, "Idempotency-Key": "batch-42"}
        )
        assert again.status_code == 200
        assert again.get_json()["id"] == job_id
        assert again.headers["Location"] == f"/v1/jobs/{job_id}"

    # Keys are per tenant: another tenant's identical key is a new job.
    theirs = web.client.post(
        "/v1/jobs", json=payload, headers={**other_caller.headers, "Idempotency-Key": "batch-42"}
    )
    assert theirs.status_code == 202
    assert theirs.get_json()["id"] != job_id


@pytest.mark.parametrize(
    "second",
    [
        b"{not json",  # not even valid: the key is compared before the body is validated
        json.dumps({"kind": "claims", "items": ROWS[:2]}).encode(),  # other claims
        json.dumps({"kind": "claims", "items": ROWS, "options": {"mode": "both"}}).encode(),  # other options
        json.dumps({"kind": "claims", "items": ROWS}, indent=1).encode(),  # same JSON, other bytes
    ],
    ids=["garbage", "other-items", "other-options", "other-bytes"],
)
def test_idempotency_key_with_another_body_is_409_and_stores_nothing(
    web: WebEnv, caller: Caller, second: bytes
) -> None:
    body = json.dumps({"kind": "claims", "items": ROWS}).encode()
    headers = caller.json_headers(**{"Idempotency-Key": "batch-43"})
    first = web.client.post("/v1/jobs", data=body, headers=headers)
    assert first.status_code == 202
    job_id = first.get_json()["id"]
    web.drain_messages()
    with Unchanged(web):
        err = error_of(web.client.post("/v1/jobs", data=second, headers=headers), 409)
    assert err["type"] == "idempotency_conflict"
    assert err["field"] == "Idempotency-Key"
    assert err["job_id"] == job_id
    assert job_id in err["message"]
    # The key still returns its own job for its own submission.
    assert web.client.post("/v1/jobs", data=body, headers=headers).get_json()["id"] == job_id


def test_ndjson_idempotency_covers_query_parameters_and_streamed_bodies(web: WebEnv, caller: Caller) -> None:
    rows = [{"id": f"n{i}", "claim": f"Claim number {i} is a claim."} for i in range(3000)]
    body = ndjson(rows)
    assert len(body) > 3 * 32 * 1024  # several chunks of the reader
    headers = caller.ndjson_headers(**{"Idempotency-Key": "nd-1"})
    first = web.client.post("/v1/jobs?kind=claims&mode=both&supported_min=0.9", data=body, headers=headers)
    assert first.status_code == 202, first.get_json()
    job_id = first.get_json()["id"]
    fingerprint = SubmissionFingerprint(
        "ndjson", [("kind", "claims"), ("mode", "both"), ("supported_min", "0.9")]
    )
    reader = fingerprint.reader(io.BytesIO(body))
    while reader.read(7_000):
        pass
    assert web.job(job_id).submission_sha256 == fingerprint.hexdigest()
    web.drain_messages()

    def chunked() -> dict[str, Any]:
        """No Content-Length, and reads that return at most 10,000 bytes: the body arrives in pieces."""
        return {"input_stream": Trickle(body), "environ_overrides": {"wsgi.input_terminated": True}}

    with Unchanged(web):
        # Same parameters in another order, the same bytes streamed in chunks: the same job.
        same = web.client.post(
            "/v1/jobs?supported_min=0.9&mode=both&kind=claims", headers=headers, **chunked()
        )
        assert same.status_code == 200 and same.get_json()["id"] == job_id
        for query, data in (
            ("kind=claims&mode=grounded&supported_min=0.9", body),  # another option
            ("kind=claims&mode=both&supported_min=0.9", body[: -len(ndjson(rows[-1:]))]),  # a row fewer
        ):
            err = error_of(web.client.post(f"/v1/jobs?{query}", data=data, headers=headers), 409)
            assert err["type"] == "idempotency_conflict" and err["job_id"] == job_id
        # The same bytes as JSON instead of NDJSON are another submission too.
        err = error_of(
            web.client.post(
                "/v1/jobs",
                data=json.dumps({"kind": "claims", "items": ROWS}),
                headers=caller.json_headers(**{"Idempotency-Key": "nd-1"}),
            ),
            409,
        )
        assert err["job_id"] == job_id


class Trickle(io.BytesIO):
    """A body stream whose reads return at most 10,000 bytes."""

    def read(self, size: int | None = -1, /) -> bytes:
        return super().read(10_000 if size is None or size < 0 else min(size, 10_000))


def test_a_retried_key_still_has_the_body_limit(web_settings: dict[str, Any], memory_celery: Any) -> None:
    """The body of a retry is hashed as it streams, never held whole, and still stops at the limit."""
    env = make_env({**web_settings, "max_body_bytes": 2_000}, memory_celery)
    env.app.config["MAX_CONTENT_LENGTH"] = None
    try:
        caller = env.new_caller()
        headers = caller.ndjson_headers(**{"Idempotency-Key": "big"})
        small = ndjson(ROWS)
        assert env.client.post("/v1/jobs?kind=claims", data=small, headers=headers).status_code == 202
        env.drain_messages()
        big = small + ndjson(
            [{"id": f"r{i}", "claim": f"claim number {i} is about something"} for i in range(60)]
        )
        with Unchanged(env):
            resp = env.client.post(
                "/v1/jobs?kind=claims",
                input_stream=Trickle(big),
                headers=headers,
                environ_overrides={"wsgi.input_terminated": True},
            )
            assert "2000 bytes" in error_of(resp, 413)["message"]
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_a_job_stored_without_a_fingerprint_keeps_answering_its_key(web: WebEnv, caller: Caller) -> None:
    """Jobs created before fingerprints were recorded: the key returns them, whatever the body."""
    first = web.client.post(
        "/v1/jobs",
        json={"kind": "claims", "items": ROWS},
        headers={**caller.headers, "Idempotency-Key": "old"},
    )
    job_id = first.get_json()["id"]
    with web.sessions() as session:
        session.execute(update(Job).where(Job.id == uuid.UUID(job_id)).values(submission_sha256=None))
        session.commit()
    web.drain_messages()
    with Unchanged(web):
        again = web.client.post(
            "/v1/jobs",
            json={"kind": "claims", "items": ROWS[:1]},
            headers={**caller.headers, "Idempotency-Key": "old"},
        )
    assert again.status_code == 200 and again.get_json()["id"] == job_id


def test_a_key_raced_by_a_concurrent_request_is_compared_too(
    web: WebEnv, caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view's own look-up misses (the other request had not committed yet); create_job finds the
    winner's job inside its transaction: the same submission gets it with 200, another one 409."""
    payload = {"kind": "claims", "items": ROWS}
    headers = {**caller.headers, "Idempotency-Key": "race-1"}
    job_id = web.client.post("/v1/jobs", json=payload, headers=headers).get_json()["id"]
    web.drain_messages()
    monkeypatch.setattr("web.intake.find_idempotent", lambda *_a, **_k: None)
    with Unchanged(web):
        same = web.client.post("/v1/jobs", json=payload, headers=headers)
        assert same.status_code == 200 and same.get_json()["id"] == job_id
        other = web.client.post("/v1/jobs", json={**payload, "items": ROWS[:1]}, headers=headers)
        assert error_of(other, 409)["job_id"] == job_id


@pytest.mark.parametrize("key", ["x" * 201, "   "])
def test_unstorable_idempotency_key_is_rejected(web: WebEnv, caller: Caller, key: str) -> None:
    with Unchanged(web):
        resp = web.client.post(
            "/v1/jobs",
            json={"kind": "claims", "items": ROWS},
            headers={**caller.headers, "Idempotency-Key": key},
        )
        err = error_of(resp, 400)
    assert err["field"] == "Idempotency-Key"


# --- authentication ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [None, "Bearer fg_not-a-real-token", "Basic dXNlcjpwYXNz", "Bearer", "bearer    "],
)
def test_bad_or_missing_token_is_401_and_stores_nothing(web: WebEnv, header: str | None) -> None:
    headers = {"Content-Type": "application/json"}
    if header is not None:
        headers["Authorization"] = header
    with Unchanged(web):
        resp = web.client.post(
            "/v1/jobs", data=json.dumps({"kind": "claims", "items": ROWS}), headers=headers
        )
        err = error_of(resp, 401)
    assert err["type"] == "authentication_error"
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert "fg_not-a-real-token" not in resp.get_data(as_text=True)


def test_revoked_token_is_401(web: WebEnv, caller: Caller) -> None:
    with web.sessions() as session:
        session.execute(
            update(ApiToken).where(ApiToken.tenant_id == caller.tenant_id).values(revoked_at=utcnow())
        )
        session.commit()
    with Unchanged(web):
        err = error_of(
            web.client.post("/v1/jobs", json={"kind": "claims", "items": ROWS}, headers=caller.headers), 401
        )
    assert err["message"] == "invalid or revoked token"


# --- bad bodies ----------------------------------------------------------------------------------------


def post_json(web: WebEnv, caller: Caller, payload: Any) -> Any:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return web.client.post("/v1/jobs", data=data, headers=caller.json_headers())


def post_ndjson(web: WebEnv, caller: Caller, body: bytes, query: str = "kind=claims") -> Any:
    return web.client.post(f"/v1/jobs?{query}", data=body, headers=caller.ndjson_headers())


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b'{"kind": "claims", "items": [', "not valid JSON"),
        (b"", "empty"),
        (b"\xff\xfe{}", "UTF-8"),
        (b'{"kind": "claims", "items": [{"id": "a", "claim": "x", "label": NaN}]}', "NaN"),
        (b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
    ],
)
def test_body_that_is_not_json_is_400(web: WebEnv, caller: Caller, raw: bytes, needle: str) -> None:
    with Unchanged(web):
        err = error_of(post_json(web, caller, raw), 400)
    assert err["type"] == "invalid_request_error"
    assert needle in err["message"]


def test_not_json_error_names_the_line(web: WebEnv, caller: Caller) -> None:
    with Unchanged(web):
        err = error_of(post_json(web, caller, b'{\n"kind": "claims",\n"items": [}\n'), 400)
    assert err["line"] == 3


@pytest.mark.parametrize(
    ("payload", "field", "needle"),
    [
        # A bare array is a dataset's rows (kind and options in the query): without `?kind=` it is named.
        ([{"kind": "claims"}], "kind", "kind is required"),
        ("not rows", None, "must be a JSON object"),
        ({"kind": "claims", "items": ROWS, "extra": 1}, "extra", "unknown field"),
        ({"kind": "claims"}, "items", "items is required"),
        ({"kind": "claims", "items": {"id": "a"}}, "items", "must be a JSON array"),
        ({"kind": "claims", "items": ROWS, "options": ["grounded"]}, "options", "must be a JSON object"),
        ({"items": ROWS}, "kind", "kind is required"),
        ({"kind": "nonsense", "items": ROWS}, "kind", "unknown kind"),
        ({"kind": 7, "items": ROWS}, "kind", "must be a string"),
        # Claim rows sent as another kind are validated as that kind's rows, and named.
        ({"kind": "answer", "items": ROWS}, "items[0].claim", "unknown field"),
        ({"kind": "quote", "items": ROWS}, "items[0].claim", "unknown field"),
    ],
)
def test_bad_submission_shape_is_400_naming_the_field(
    web: WebEnv, caller: Caller, payload: Any, field: str | None, needle: str
) -> None:
    with Unchanged(web):
        err = error_of(post_json(web, caller, payload), 400)
    assert err.get("field") == field
    assert needle in err["message"]


@pytest.mark.parametrize(
    ("items", "index", "field", "needle"),
    [
        ([ROWS[0], {"id": "b"}], 1, "items[1].claim", "is required"),
        ([ROWS[0], {"claim": "no id"}], 1, "items[1].id", "is required"),
        ([ROWS[0], {"id": "b", "claim": "x", "label": "yes"}], 1, "items[1].label", "must be true or false"),
        ([ROWS[0], {"id": "b", "claim": "x", "label": 1}], 1, "items[1].label", "must be true or false"),
        ([{"id": "a", "claim": "   "}], 0, "items[0].claim", "must not be empty"),
        ([ROWS[0], {**ROWS[1], "id": ROWS[0]["id"]}], 1, "items[1].id", "duplicate id"),
        ([ROWS[0], {**ROWS[1], "colour": "red"}], 1, "items[1].colour", "unknown field"),
        ([ROWS[0], "just a string"], 1, "items[1]", "must be a JSON object"),
        ([{"id": "a", "claim": "nul\u0000inside"}], 0, "items[0].claim", "NUL"),
    ],
)
def test_bad_json_item_is_400_naming_its_index(
    web: WebEnv, caller: Caller, items: list[Any], index: int, field: str, needle: str
) -> None:
    with Unchanged(web):
        err = error_of(post_json(web, caller, {"kind": "claims", "items": items}), 400)
    assert err["index"] == index
    assert err["field"] == field
    assert needle in err["message"]
    assert err["errors"][0]["field"] == field
    assert "nothing was stored" in err["message"]


def test_every_bad_item_is_listed(web: WebEnv, caller: Caller) -> None:
    items = [{"id": "a", "claim": "ok"}, {"id": "b", "label": "no"}, {"id": "a", "claim": "dup"}]
    with Unchanged(web):
        err = error_of(post_json(web, caller, {"kind": "claims", "items": items}), 400)
    fields = [e["field"] for e in err["errors"]]
    assert fields == ["items[1].claim", "items[1].label", "items[2].id"]
    assert "first at items[0]" in err["errors"][2]["message"]
    assert "3 problems" in err["message"]


@pytest.mark.parametrize(
    ("lines", "line", "field", "needle"),
    [
        ([json.dumps(ROWS[0]), "{not json", json.dumps(ROWS[2])], 2, None, "not valid JSON"),
        ([json.dumps(ROWS[0]), json.dumps(ROWS[1]), json.dumps({"id": "z"})], 3, "claim", "is required"),
        (
            [json.dumps(ROWS[0]), json.dumps({"id": "y", "claim": "c", "label": "true"})],
            2,
            "label",
            "true or false",
        ),
        ([json.dumps(ROWS[0]), "", json.dumps(ROWS[0])], 3, "id", "duplicate id"),
        ([json.dumps(ROWS[0]), "[1, 2]"], 2, None, "must be a JSON object"),
    ],
)
def test_bad_ndjson_line_is_400_naming_the_line(
    web: WebEnv, caller: Caller, lines: list[str], line: int, field: str | None, needle: str
) -> None:
    with Unchanged(web):
        err = error_of(post_ndjson(web, caller, ("\n".join(lines) + "\n").encode()), 400)
    assert err["line"] == line
    assert err.get("field") == field
    assert needle in err["message"]
    assert f"line {line}" in err["message"]


def test_invalid_utf8_line_is_named(web: WebEnv, caller: Caller) -> None:
    body = ndjson(ROWS[:1]) + b'{"id": "b", "claim": "caf\xe9"}\n'
    with Unchanged(web):
        err = error_of(post_ndjson(web, caller, body), 400)
    assert err["line"] == 2
    assert "UTF-8" in err["message"]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"", "application/x-ndjson"),
        (b"\n\n  \n", "application/x-ndjson"),
        (b'{"kind":"claims","items":[]}', "json"),
    ],
)
def test_empty_batch_is_400(web: WebEnv, caller: Caller, body: bytes, content_type: str) -> None:
    with Unchanged(web):
        post = post_json if content_type == "json" else post_ndjson
        resp = post(web, caller, body)
        err = error_of(resp, 400)
    assert "no claims" in err["message"]


def test_over_long_claim_is_400(web_settings: dict[str, Any], memory_celery: Any) -> None:
    env = make_env({**web_settings, "max_claim_bytes": 40}, memory_celery)
    try:
        caller = env.new_caller()
        rows = [{"id": "ok", "claim": "short"}, {"id": "long", "claim": "é" * 21}]  # 42 bytes
        with Unchanged(env):
            err = error_of(post_ndjson(env, caller, ndjson(rows)), 400)
            assert err["line"] == 2
            assert err["field"] == "claim"
            assert "42 bytes" in err["message"] and "40" in err["message"]
            err = error_of(post_json(env, caller, {"kind": "claims", "items": rows}), 400)
            assert err["field"] == "items[1].claim"
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_too_many_rows_is_400(web_settings: dict[str, Any], memory_celery: Any) -> None:
    env = make_env({**web_settings, "max_rows_per_job": 3}, memory_celery)
    try:
        caller = env.new_caller()
        rows = [{"id": f"r{i}", "claim": f"claim {i}"} for i in range(5)]
        with Unchanged(env):
            err = error_of(post_ndjson(env, caller, ndjson(rows)), 400)
            assert err["line"] == 4
            assert "too many claims" in err["message"] and "3" in err["message"]
            err = error_of(post_json(env, caller, {"kind": "claims", "items": rows}), 400)
            assert err["field"] == "items"
            assert "too many claims" in err["message"]
        # Exactly at the limit is fine.
        assert post_ndjson(env, caller, ndjson(rows[:3])).status_code == 202
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_body_over_the_limit_is_413(web_settings: dict[str, Any], memory_celery: Any) -> None:
    env = make_env({**web_settings, "max_body_bytes": 2_000}, memory_celery)
    try:
        caller = env.new_caller()
        rows = [{"id": f"r{i}", "claim": f"claim number {i} is about something"} for i in range(60)]
        body = ndjson(rows)
        assert len(body) > 2_000
        with Unchanged(env):
            # Declared length over the limit: refused before reading.
            err = error_of(post_ndjson(env, caller, body), 413)
            assert err["type"] == "request_too_large_error"
            assert "2000 bytes" in err["message"]
            err = error_of(post_json(env, caller, {"kind": "claims", "items": rows}), 413)
            assert "2000 bytes" in err["message"]
            # No Content-Length (chunked upload through a server that terminates the input): the
            # limit is enforced while reading.
            resp = env.client.post(
                "/v1/jobs?kind=claims",
                input_stream=io.BytesIO(body),
                headers=caller.ndjson_headers(),
                environ_overrides={"wsgi.input_terminated": True},
            )
            error_of(resp, 413)
        assert post_ndjson(env, caller, ndjson(rows[:10])).status_code == 202
    finally:
        env.app.extensions["factgate"].engine.dispose()


def test_streamed_reader_enforces_the_limit_itself(web_settings: dict[str, Any], memory_celery: Any) -> None:
    """Without Content-Length and without Flask's own limit, web/body.py still stops at the limit."""
    env = make_env({**web_settings, "max_body_bytes": 2_000}, memory_celery)
    env.app.config["MAX_CONTENT_LENGTH"] = None
    try:
        caller = env.new_caller()
        body = ndjson([{"id": f"r{i}", "claim": f"claim number {i} is about something"} for i in range(60)])
        with Unchanged(env):
            resp = env.client.post(
                "/v1/jobs?kind=claims",
                input_stream=io.BytesIO(body),
                headers=caller.ndjson_headers(),
                environ_overrides={"wsgi.input_terminated": True},
            )
            err = error_of(resp, 413)
        assert "2000 bytes" in err["message"]
    finally:
        env.app.extensions["factgate"].engine.dispose()


# --- bad options and metadata --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field", "needle"),
    [
        ({"mode": "sideways"}, "mode", "must be one of"),
        ({"model": "gpt-4"}, "model", "unknown model"),
        ({"supported_min": "high"}, "supported_min", "must be a number"),
        ({"supported_min": 1.5}, "supported_min", "between 0 and 1"),
        ({"contradicted_max": -0.1}, "contradicted_max", "between 0 and 1"),
        ({"supported_min": 0.3, "contradicted_max": 0.4}, "contradicted_max", "below supported_min"),
        ({"budget_usd": 0}, "budget_usd", "must be positive"),
        ({"budget_usd": "lots"}, "budget_usd", "must be a number"),
        ({"grounded": True}, "grounded", "unknown option"),
    ],
)
def test_bad_option_is_400_naming_it(
    web: WebEnv, caller: Caller, options: dict[str, Any], field: str, needle: str
) -> None:
    with Unchanged(web):
        err = error_of(post_json(web, caller, {"kind": "claims", "options": options, "items": ROWS}), 400)
        assert err["field"] == f"options.{field}"
        assert needle in err["message"]
        # The same option as an NDJSON query parameter is named without the prefix.
        query = "kind=claims&" + "&".join(f"{k}={v}" for k, v in options.items())
        err = error_of(post_ndjson(web, caller, ndjson(ROWS), query), 400)
        assert err["field"] == field
        assert needle in err["message"]


def test_bad_option_fails_before_the_body_is_read(web: WebEnv, caller: Caller) -> None:
    # The body is not even NDJSON; the option error is what comes back.
    with Unchanged(web):
        err = error_of(post_ndjson(web, caller, b"{broken", "kind=claims&mode=wrong"), 400)
    assert err["field"] == "mode"


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [
        (["not", "an", "object"], "must be a JSON object"),
        ({"blob": "x" * (16 * 1024)}, "over the limit of 16,384"),
        ({"k": "nul\u0000"}, "NUL"),
    ],
)
def test_bad_metadata_is_400(web: WebEnv, caller: Caller, metadata: Any, needle: str) -> None:
    with Unchanged(web):
        err = error_of(post_json(web, caller, {"kind": "claims", "items": ROWS, "metadata": metadata}), 400)
        assert err["field"] == "metadata"
        assert needle in err["message"]
        response = web.client.post(
            "/v1/jobs",
            query_string={"kind": "claims", "metadata": json.dumps(metadata)},
            data=ndjson(ROWS),
            headers=caller.ndjson_headers(),
        )
        if len(json.dumps(metadata)) > 8_000:
            # An NDJSON job's metadata rides in the URL, so its request line runs out (8,190 bytes, as
            # gunicorn's) before the metadata limit does: refused as too long, in the API's error shape.
            assert error_of(response, 414)["type"] == "uri_too_long_error"
            return
        err = error_of(response, 400)
        assert err["field"] == "metadata"


def test_ndjson_metadata_that_is_not_json_is_400(web: WebEnv, caller: Caller) -> None:
    with Unchanged(web):
        err = error_of(post_ndjson(web, caller, ndjson(ROWS), "kind=claims&metadata={oops"), 400)
    assert err["field"] == "metadata"


def test_metadata_just_under_the_limit_is_kept(web: WebEnv, caller: Caller) -> None:
    metadata = {"blob": "x" * (16 * 1024 - 20)}
    resp = post_json(web, caller, {"kind": "claims", "items": ROWS, "metadata": metadata})
    assert resp.status_code == 202
    assert web.job(resp.get_json()["id"]).meta == metadata


@pytest.mark.parametrize(
    ("query", "field", "needle"),
    [
        ("mode=grounded", "kind", "kind is required"),
        ("kind=answer", "claim", "unknown field"),  # claim rows are not question rows
        ("kind=poems", "kind", "unknown kind"),
    ],
)
def test_ndjson_kind_problems_are_400(
    web: WebEnv, caller: Caller, query: str, field: str, needle: str
) -> None:
    with Unchanged(web):
        err = error_of(post_ndjson(web, caller, ndjson(ROWS), query), 400)
    assert err["field"] == field
    assert needle in err["message"]


def test_json_body_rejects_query_parameters(web: WebEnv, caller: Caller) -> None:
    with Unchanged(web):
        resp = web.client.post(
            "/v1/jobs?mode=both", json={"kind": "claims", "items": ROWS}, headers=caller.headers
        )
        err = error_of(resp, 400)
    assert err["field"] == "mode"


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_unsupported_content_type_is_415(web: WebEnv, caller: Caller, content_type: str | None) -> None:
    headers = dict(caller.headers)
    if content_type:
        headers["Content-Type"] = content_type
    with Unchanged(web):
        err = error_of(web.client.post("/v1/jobs?kind=claims", data=ndjson(ROWS), headers=headers), 415)
    assert err["type"] == "unsupported_media_type_error"
    assert "application/x-ndjson" in err["message"]


def test_failed_intake_leaves_no_job_for_the_tenant(web: WebEnv, caller: Caller) -> None:
    """All or nothing, seen through the API as well: the tenant's job list stays empty."""
    rows = [*ROWS, {"id": "bad", "claim": "x", "label": "maybe"}]
    error_of(post_json(web, caller, {"kind": "claims", "items": rows}), 400)
    error_of(post_ndjson(web, caller, ndjson(rows)), 400)
    listed = web.client.get("/v1/jobs", headers=caller.headers).get_json()
    assert listed["data"] == []
    with web.sessions() as session:
        assert session.scalars(select(ApiToken.tenant_id).where(ApiToken.tenant_id == caller.tenant_id)).all()


def test_a_json_body_is_bounded_before_it_is_parsed(
    web_settings: dict[str, Any], memory_celery: Any, caller: Caller
) -> None:
    env = make_env({**web_settings, "max_json_body_bytes": 2_000}, memory_celery)
    other = env.new_caller()
    rows = [{"id": f"c{i}", "claim": f"claim number {i} is long enough to matter"} for i in range(100)]
    before = env.table_counts()
    resp = env.client.post("/v1/jobs", json={"kind": "claims", "items": rows}, headers=other.headers)
    assert resp.status_code == 413
    message = resp.get_json()["error"]["message"]
    assert "2000 bytes" in message and "NDJSON" in message
    assert env.table_counts() == before
    # The same rows as NDJSON are read line by line, under the (larger) body limit.
    ok = env.client.post("/v1/jobs?kind=claims", data=ndjson(rows), headers=other.ndjson_headers())
    assert ok.status_code == 202, ok.get_json()
    env.app.extensions["factgate"].engine.dispose()


def test_ndjson_lines_are_rebuilt_exactly_across_chunks() -> None:
    """A line split over many reads (and a CRLF split between two) comes out whole, numbered once."""
    from web.body import iter_body_lines

    body = b"a" * 10 + b"\r\n" + b"" + b"\n" + b"b" * 7 + b"\r\n" + b"tail-without-newline"
    for chunk in (1, 2, 3, 5, 64):
        got = list(iter_body_lines(io.BytesIO(body), 1_000, chunk_bytes=chunk))
        assert got == [(1, b"a" * 10), (2, b""), (3, b"b" * 7), (4, b"tail-without-newline")], chunk


def test_dataset_files_are_accepted_as_their_tools_write_them(web: WebEnv, caller: Caller) -> None:
    """A DeepEval dataset file (`{"test_cases": [...]}`) and a bare JSON array of RAGAS samples, POSTed as
    they are with the kind and options in the query: their rows are read as a submission's items, and a bad
    row is named as an item of the file."""
    root = CLAIMS_FILE.parents[2] / "examples"
    deepeval = (root / "deepeval.json").read_bytes()
    ragas = [json.loads(line) for line in (root / "ragas.jsonl").read_text().splitlines() if line.strip()]
    headers = {**caller.headers, "Content-Type": "application/json"}
    for body, name in ((deepeval, "DeepEval"), (json.dumps(ragas).encode(), "RAGAS")):
        resp = web.client.post("/v1/jobs?kind=citations&misattribution=false", data=body, headers=headers)
        assert resp.status_code == 202, resp.get_data(as_text=True)
        job = resp.get_json()
        assert job["kind"] == "citations" and job["options"]["misattribution"] is False
        assert any(name in w for w in job["warnings"]), job["warnings"]
        assert job["request_counts"]["total"] == len(ragas)
    bad = [dict(ragas[0]), {**ragas[1], "retrieved_contexts": "not a list"}]
    resp = web.client.post("/v1/jobs?kind=citations", data=json.dumps(bad), headers=headers)
    assert resp.status_code == 400
    error = resp.get_json()["error"]
    assert "items[1]" in error["message"] and "retrieved_contexts" in error["message"], error
