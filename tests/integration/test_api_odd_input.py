"""Odd input in the URL is a 4xx with the usual error body on every route, never a 500.

A NUL character (`%00`) in a path segment or a query value reached Postgres, which refuses it in any text it
is sent (`GET /v1/requests/%00` was a 500); dates at the ends of the calendar overflowed the usage report's
arithmetic (`from=9999-12-30&to=9999-12-31`, `to=0001-01-05`). The Schemathesis run
(test_api_contract.py) fuzzes path and query values too; these are the measured cases, named.
"""

# Fixtures are imported from web_fixtures, so their names reappear as parameters.
# ruff: noqa: F811

from __future__ import annotations

import pytest

from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)

pytestmark = pytest.mark.integration

JOB = "00000000-0000-0000-0000-000000000000"


def _is_usual_4xx(resp: object, field: str | None = None) -> dict[str, object]:
    status = getattr(resp, "status_code", 0)
    assert 400 <= status < 500, (status, getattr(resp, "get_data", lambda **_: "")(as_text=True))
    body = resp.get_json()  # type: ignore[attr-defined]
    err = body["error"]
    assert set(err) >= {"type", "message"}
    if field is not None:
        assert err["field"] == field
    return dict(err)


@pytest.mark.parametrize(
    ("method", "url", "field"),
    [
        ("GET", "/v1/requests/%00", "path"),
        ("GET", "/v1/requests/req%00x", "path"),
        ("GET", "/v1/jobs/%00", "path"),
        ("GET", f"/v1/jobs/{JOB}%00/results", "path"),
        ("GET", "/v1/jobs/%00/errors", "path"),
        ("GET", "/v1/jobs/%00/scorecard", "path"),
        ("POST", "/v1/jobs/%00/cancel", "path"),
        ("POST", "/v1/jobs/%00/retry", "path"),
        ("DELETE", "/v1/jobs/%00", "path"),
        ("GET", "/v1/jobs?status=queued%00", "status"),
        ("GET", "/v1/jobs?kind=%00claims", "kind"),
        ("GET", "/v1/jobs?cursor=%00", "cursor"),
        ("GET", "/v1/usage?from=2026-01-01%00", "from"),
        ("GET", f"/v1/jobs/{JOB}/results?format=%00", "format"),
        ("POST", "/v1/jobs?kind=claims%00", "kind"),
    ],
)
def test_a_nul_in_the_url_is_a_400_naming_where(
    web: WebEnv, caller: Caller, method: str, url: str, field: str
) -> None:
    resp = web.client.open(url, method=method, headers=caller.ndjson_headers(), data=b'{"id": "a"}\n')
    assert resp.status_code == 400
    err = _is_usual_4xx(resp, field)
    assert err["type"] == "invalid_request_error"
    assert "NUL" in str(err["message"])


@pytest.mark.parametrize(
    "query",
    ["from=9999-12-30&to=9999-12-31", "to=0001-01-05", "to=9999-12-31", "from=0001-01-01&to=0001-01-02"],
)
def test_dates_at_the_ends_of_the_calendar_are_a_400(web: WebEnv, caller: Caller, query: str) -> None:
    resp = web.client.get(f"/v1/usage?{query}", headers=caller.headers)
    assert resp.status_code == 400
    _is_usual_4xx(resp)


def test_a_nul_is_refused_before_authentication_too(web: WebEnv) -> None:
    resp = web.client.get("/v1/requests/%00")
    assert resp.status_code in (400, 401)
    _is_usual_4xx(resp)


def test_a_page_with_a_nul_in_its_query_is_a_400_page(web: WebEnv) -> None:
    resp = web.client.get("/requests?request_id=%00")
    assert resp.status_code == 400
    assert "NUL" in resp.get_data(as_text=True) or "Bad request" in resp.get_data(as_text=True)
