"""Real responses of every kind against the served /openapi.json, validated by openapi-core.

The component schemas of result lines, summaries and the scorecard are generated from the pydantic
contracts (checks/kinds/), so this is where a contract and the bytes the API sends are held together: a
job object, a results line of each kind (the report it carries included), the scorecard and the job list.
NDJSON lines are validated one by one against the documented line schema (openapi-core validates whole
bodies; an NDJSON body is a sequence of documents), with openapi-core's own OpenAPI 3.1 schema validator.
"""

# Fixtures are imported from web_fixtures, so their names reappear as parameters.
# ruff: noqa: F811

from __future__ import annotations

import json
from typing import Any

import pytest
from openapi_core import OpenAPI
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from openapi_schema_validator import OAS31Validator
from werkzeug.test import TestResponse

from tests.e2e.builders import (
    answer_report,
    finalize,
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
    make_env,
    memory_celery,
    web,
    web_settings,
)

pytestmark = pytest.mark.integration
NDJSON = "application/x-ndjson"


@pytest.fixture
def served(web: WebEnv) -> dict[str, Any]:
    resp = web.client.get("/openapi.json")
    assert resp.status_code == 200
    doc: dict[str, Any] = resp.get_json()
    return doc


def _check(api: OpenAPI, resp: TestResponse) -> Any:
    """Validate a JSON response against its operation; return its body."""
    assert resp.status_code < 400, resp.get_data(as_text=True)[:500]
    api.validate_response(WerkzeugOpenAPIRequest(resp.request), WerkzeugOpenAPIResponse(resp))
    return resp.get_json()


def _validator(doc: dict[str, Any], schema: dict[str, Any]) -> OAS31Validator:
    """A validator of `schema` whose `#/components/...` references resolve in the served document."""
    return OAS31Validator({"components": doc["components"], **schema})


def _lines(doc: dict[str, Any], resp: TestResponse, component: str) -> list[dict[str, Any]]:
    """Validate every NDJSON line against the operation's line schema and its own component: the kind's
    result line for every line but the last, `ExportEnd` for the trailer. Returns the result lines."""
    assert resp.status_code == 200 and resp.mimetype == NDJSON
    ok = doc["paths"]["/v1/jobs/{job_id}/results"]["get"]["responses"]["200"]
    operation = _validator(doc, ok["content"][NDJSON]["schema"])
    own = _validator(doc, {"$ref": f"#/components/schemas/{component}"})
    end = _validator(doc, {"$ref": "#/components/schemas/ExportEnd"})
    lines = [json.loads(x) for x in resp.get_data(as_text=True).splitlines()]
    assert len(lines) >= 2, lines
    *records, trailer = lines
    for line, validators in [*((r, (operation, own)) for r in records), (trailer, (operation, end))]:
        for validator in validators:
            errors = [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(line)]
            assert not errors, errors
    # Each line matches its own schema only: a result line is no trailer, the trailer no result line.
    assert list(end.iter_errors(records[0])) and list(own.iter_errors(trailer))
    assert trailer["_end"]["count"] == len(records)
    return records


def test_claims_job_status_results_and_scorecard_match_the_served_document(
    web: WebEnv, caller: Caller, served: dict[str, Any]
) -> None:
    api = OpenAPI.from_dict(served)
    rows = reference_rows()[:6]
    job_id = submit_claims(web.client.post, caller.json_headers(), rows, mode="both")
    settle(web.sessions, job_id, simulated_outcomes(rows, ["ungrounded", "grounded"]))
    finalize(web.sessions, job_id)
    h = caller.headers
    job = _check(api, web.client.get(f"/v1/jobs/{job_id}", headers=h))
    assert job["status"] == "completed" and job["summary"]["kind"] == "claims"
    lines = _lines(served, web.client.get(f"/v1/jobs/{job_id}/results", headers=h), "ClaimResult")
    assert {line["custom_id"] for line in lines} == {r["id"] for r in rows}
    card = _check(api, web.client.get(f"/v1/jobs/{job_id}/scorecard?supported_min=0.9", headers=h))
    assert card["cutoffs"]["supported_min"] == 0.9 and set(card["scorecards"]) == {"ungrounded", "grounded"}
    _check(api, web.client.get("/v1/jobs?kind=claims", headers=h))


@pytest.mark.parametrize(
    ("kind", "component", "build"),
    [("answer", "AnswerResult", answer_report), ("quote", "QuoteResult", quote_report)],
)
def test_question_job_status_and_results_with_reports_match_the_served_document(
    web: WebEnv, caller: Caller, served: dict[str, Any], kind: str, component: str, build: Any
) -> None:
    api = OpenAPI.from_dict(served)
    questions = [("q1", "How many bones are in the adult human body?"), ("q2", "Who built the bridge?")]
    job_id = submit_questions(web.client.post, caller.json_headers(), kind, questions)
    store_reports(web.sessions, job_id, {cid: build(q) for cid, q in questions})
    finalize(web.sessions, job_id)
    job = _check(api, web.client.get(f"/v1/jobs/{job_id}", headers=caller.headers))
    assert job["status"] == "completed" and job["summary"]["kind"] == kind
    assert job["summary"]["questions"] == 2
    lines = _lines(served, web.client.get(f"/v1/jobs/{job_id}/results", headers=caller.headers), component)
    assert [line["custom_id"] for line in lines] == ["q1", "q2"]
    assert all(line["report"] is not None and line["report"]["kind"] == kind for line in lines)


def test_a_validating_job_matches_the_served_document(
    web_settings: dict[str, Any], memory_celery: Any, caller: Caller, served: dict[str, Any]
) -> None:
    """A streamed body over FACTGATE_INTAKE_DEFER_ROWS answers `validating` (items still to be built): the
    202, the status read and the empty export with its trailer are what the document says."""
    api = OpenAPI.from_dict(served)
    deferring = make_env({**web_settings, "intake_defer_rows": 0}, memory_celery)
    try:
        rows = "".join(json.dumps({"id": f"c{i}", "claim": f"Claim {i}."}) + "\n" for i in range(3))
        created = deferring.client.post(
            "/v1/jobs?kind=claims&mode=both", data=rows, headers=caller.ndjson_headers()
        )
        assert created.status_code == 202
        job = created.get_json()  # (openapi-core cannot read a streamed request body again: the schema)
        assert not list(_validator(served, {"$ref": "#/components/schemas/Job"}).iter_errors(job))
        assert job["status"] == "validating" and job["request_counts"]["total"] == 6
        read = _check(api, deferring.client.get(f"/v1/jobs/{job['id']}", headers=caller.headers))
        assert read["status"] == "validating"
        export = deferring.client.get(f"/v1/jobs/{job['id']}/results", headers=caller.headers)
        assert export.status_code == 200 and json.loads(export.get_data(as_text=True)) == {
            "_end": {"count": 0, "after": None, "last_id": None}
        }
        end = _validator(served, {"$ref": "#/components/schemas/ExportEnd"})
        assert not list(end.iter_errors(json.loads(export.get_data(as_text=True))))
    finally:
        deferring.app.extensions["factgate"].engine.dispose()


def test_a_line_that_breaks_its_contract_fails_validation(served: dict[str, Any]) -> None:
    """The check can fail: a claims line with an unknown status or a stray field is refused."""
    validator = _validator(served, {"$ref": "#/components/schemas/ClaimResult"})
    good = {"custom_id": "a", "claim": "x", "label": None, "results": {"grounded": {"status": "done"}}}
    assert not list(validator.iter_errors(good))
    assert list(validator.iter_errors({**good, "results": {"grounded": {"status": "lost"}}}))
    assert list(validator.iter_errors({**good, "surprise": 1}))
    end = _validator(served, {"$ref": "#/components/schemas/ExportEnd"})
    trailer = {"_end": {"count": 1, "after": None, "last_id": "a"}}
    assert not list(end.iter_errors(trailer))
    assert list(end.iter_errors({"_end": {"count": 1, "after": None}}))  # last_id is required
    assert list(end.iter_errors({**trailer, "more": True}))
