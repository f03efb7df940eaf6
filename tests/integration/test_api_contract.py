"""The API against its own served contract, by property-based fuzzing (Schemathesis, every check).

Schemathesis reads `/openapi.json` from the app and generates requests for every operation — valid ones
and, with negative data, ones the schema forbids — and checks every response: no 5xx, the status is
documented, the body matches the documented schema, the content type is documented, invalid requests are
refused. A CI-sized run (a few examples per operation); `FACTGATE_FUZZ_EXAMPLES` raises it for a long run.
"""

# Fixtures are imported from web_fixtures, so their names reappear as parameters.
# ruff: noqa: F811

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, reject, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from checks.claims import ClaimsValidationError, validate_rows
from checks.options import OptionsError, parse_claims_options, parse_questions_options
from checks.questions import validate_question_rows
from checks.usage import RangeError, parse_day_range
from config import Settings
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)
from web.errors import ApiError
from web.intake import check_metadata
from web.openapi import openapi_document

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("FACTGATE_FUZZ_EXAMPLES") or 8)


@schemathesis.serializer("application/x-ndjson")
def _ndjson(_ctx: Any, value: Any) -> bytes:
    """An NDJSON body: the generated row (or rows) as JSON lines."""
    rows = value if isinstance(value, list) else [value]
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


@schemathesis.serializer("text/csv")
def _csv(_ctx: Any, value: Any) -> bytes:
    """A CSV body: a header naming every field of the generated row (or rows), then one record each."""
    rows = [r for r in (value if isinstance(value, list) else [value]) if isinstance(r, dict)]
    columns = list(dict.fromkeys(k for row in rows for k in row)) or ["id"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        cells = [row.get(c) for c in columns]
        writer.writerow(["" if v is None else str(v).lower() if isinstance(v, bool) else v for v in cells])
    return out.getvalue().encode()


# The document the app serves at /openapi.json (a test checks they are the same); each test points the
# schema at its own app, so requests go through the WSGI app in process.
# Negative data must be refused; besides Schemathesis' default refusals, a request the server refuses for
# its size (413 body, 414 request line, 431 headers: documented on every operation) is refused too — a
# generated over-long value in a query string is exactly what 414 is for.
REFUSALS = [400, 401, 403, 404, 405, 406, 409, 413, 414, 415, 422, 428, 429, 431, "5xx"]
schema = schemathesis.openapi.from_dict(
    openapi_document(),
    config=SchemathesisConfig.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": REFUSALS}}}
    ),
)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_every_operation_holds_its_contract(case: Any, web: WebEnv, caller: Caller) -> None:
    case.operation.schema.app = web.app
    _as_documented_in_prose(case)
    case.call_and_validate(headers={**(case.headers or {}), **caller.headers}, app=web.app)


def _as_documented_in_prose(case: Any) -> None:
    """Rules a schema cannot state (they tie parts of a request together), stated in the operations'
    descriptions. A generated request the schema allows but such a rule forbids is not a valid request, so
    it is dropped (hypothesis draws another) rather than counted as "valid data refused"; negative requests
    are sent as generated. The rules are decided by the same pure functions the API uses, and each has its
    own named tests (line and field of every row problem, the usage range, the query of a submission).

    - POST /v1/jobs: the query parameters (kind, options, metadata) belong to NDJSON and CSV submissions,
      whose lines carry only rows; a JSON body carries them itself and takes no query parameters; rows
      follow the row rules (unique printable ids, claims within the byte limit, ...) and options the
      option rules;
    - GET /v1/usage: `from` is not after `to`, and the range is at most MAX_USAGE_DAYS days.
    """
    if case.meta is not None and case.meta.generation.mode != GenerationMode.POSITIVE:
        return
    if case.method == "POST" and case.path == "/v1/jobs" and case.media_type == "application/json":
        case.query = {}
        _reject_unless_valid_submission(case.body)
    streamed = ("application/x-ndjson", "text/csv")
    if case.method == "POST" and case.path == "/v1/jobs" and case.media_type in streamed:
        query = dict(case.query or {})
        if "kind" not in query:
            reject()  # an NDJSON submission names its kind in the query
        rows = case.body if isinstance(case.body, list) else [case.body]
        options = {k: v for k, v in query.items() if k not in ("kind", "metadata")}
        metadata = None
        if "metadata" in query:
            try:
                metadata = json.loads(str(query["metadata"]))
            except ValueError:
                reject()
        _reject_unless_valid_submission(
            {"kind": query["kind"], "options": options, "items": rows, "metadata": metadata}
        )
    if case.method == "GET" and case.path == "/v1/usage":
        query = case.query or {}
        try:
            parse_day_range(query.get("from"), query.get("to"), today=datetime.now(UTC).date())
        except RangeError:
            reject()


def _reject_unless_valid_submission(body: object) -> None:
    settings = Settings()
    if not isinstance(body, dict):
        return
    try:
        if body.get("kind") == "claims":
            parse_claims_options(body.get("options") or {})
            validate_rows(
                body.get("items") or [],
                max_rows=settings.max_rows_per_job,
                max_claim_bytes=settings.max_claim_bytes,
            )
        else:
            parse_questions_options(body.get("options") or {})
            validate_question_rows(body.get("items") or [], max_rows=settings.max_rows_per_job)
        check_metadata(body.get("metadata"))
    except (ClaimsValidationError, OptionsError, ApiError):
        reject()


# Path and query values: every operation that takes them, fuzzed again with odd values mixed into what the
# schema generates (about half the cases carry one in a path parameter or a query parameter of the operation):
# NUL characters, the ends of the calendar, numbers beyond a float, bidi and astral characters, dot segments.
# Each must be a 4xx with the usual error body or an answer, never a 5xx; bodies are left to the test above.
# Many of these values are valid for the schema's type and refused all the same (a NUL in `after`, a date
# before 1970), so the check that schema-valid data is accepted is off here; every other check holds.
ODD_VALUES = [
    "\x00",
    "a\x00b",
    "00000000-0000-0000-0000-00000000000\x00",
    "0001-01-01",
    "0001-01-05",
    "9999-12-30",
    "9999-12-31",
    "1969-12-31",
    "2026-02-30",
    "99999999-9999-9999-9999-999999999999",
    "00000000-0000-0000-0000-000000000000",
    "..",
    "%00",
    "\u202eevil",
    "\U0001f4a5",
    " ",
    "-1",
    "1e309",
    "NaN",
    "9" * 40,
]
odd_schema = schemathesis.openapi.from_dict(
    openapi_document(),
    config=SchemathesisConfig.from_dict(
        {
            "checks": {
                "negative_data_rejection": {"expected-statuses": REFUSALS},
                "positive_data_acceptance": {"enabled": False},
            }
        }
    ),
).exclude(path="/v1/jobs", method="POST")


def _names_in(ctx: Any, location: str) -> list[str]:
    operation = ctx.operation
    if operation is None:
        return []
    return sorted(p.name for p in operation.iter_parameters() if p.location.value == location)


def _with_an_odd_value(value: Any, names: list[str]) -> Any:
    """`value` (a dict of parameters) as generated, or with one parameter of `names` set to an odd value."""
    if not names:
        return st.just(value)
    base = dict(value or {})
    odd = st.tuples(st.sampled_from(names), st.sampled_from(ODD_VALUES)).map(lambda p: {**base, p[0]: p[1]})
    return st.one_of(st.just(value), odd)


@odd_schema.hook("flatmap_path_parameters")
def _odd_path(ctx: Any, value: Any) -> Any:
    return _with_an_odd_value(value, _names_in(ctx, "path"))


@odd_schema.hook("flatmap_query")
def _odd_query(ctx: Any, value: Any) -> Any:
    return _with_an_odd_value(value, _names_in(ctx, "query"))


@odd_schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_odd_path_and_query_values_are_never_a_server_error(case: Any, web: WebEnv, caller: Caller) -> None:
    case.operation.schema.app = web.app
    _as_documented_in_prose(case)
    case.call_and_validate(headers={**(case.headers or {}), **caller.headers}, app=web.app)


def test_the_fuzzed_document_is_the_served_one(web: WebEnv) -> None:
    assert web.client.get("/openapi.json").get_json() == openapi_document()
