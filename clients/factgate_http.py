"""HTTP plumbing of factgate's own API (/v1) shared by its two clients: the CLI's (cli/client.py) and the
Python client teams import (`from factgate import Client`, factgate/client.py).

A 503 is the server saying "a dependency is down for a moment, come back in Retry-After seconds" (a
Postgres restart, docs/operations.md): `patiently` waits as told and asks again, for at most
`UNAVAILABLE_BUDGET_S` in all, and hands back the last answer (a 503 still, once the budget is spent, for
the caller to raise as it raises any error). Only requests that are safe to repeat may go through it: reads,
cancel and delete (idempotent on the server), and a submission only with an Idempotency-Key (the server
answers a repeat with the job it stored the first time). Tenacity does the waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NotRequired, TypedDict

import httpx
from pydantic import JsonValue
from tenacity import RetryCallState, Retrying, nap, retry_if_result, stop_after_delay

__all__ = [
    "NDJSON",
    "SUBMIT_TIMEOUT",
    "TIMEOUT",
    "UNAVAILABLE_BUDGET_S",
    "ErrorBody",
    "JobBody",
    "ScheduleView",
    "error_body",
    "patiently",
]

NDJSON = "application/x-ndjson"
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
# Submissions can be large (up to 64 MB): the server may need a while to validate and store them.
SUBMIT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)
# How long in all a client keeps asking again while the server answers 503: longer than a Postgres restart
# or a Redis failover takes, short enough that a real outage still ends the command.
UNAVAILABLE_BUDGET_S = 60.0
# The longest single wait, whatever Retry-After says (a server may ask for more than the budget allows).
UNAVAILABLE_MAX_WAIT_S = 10.0
DEFAULT_RETRY_AFTER_S = 2.0


class ScheduleView(TypedDict, total=False):
    """A live job's `schedule`: the scheduler's latest view (the server's job object describes each field).
    Every field may be missing: a client reads what the server it talks to writes."""

    state: str
    endpoint: str | None
    share: float
    rate_per_s: float
    remaining: int
    eta_s: float | None
    estimated_completion_at: str | None
    estimated_start_at: str | None
    counts: dict[str, int]
    updated_at: str
    held_reason: str
    resumes_at: str


class JobBody(TypedDict):
    """The job object as a client reads it (GET /v1/jobs/{id}, a submission's or a cancel's answer). Only
    `id`, `kind` and `status` are relied on; the rest may be absent from an older or newer server's object,
    and a field this type does not name is kept in the parsed JSON all the same."""

    id: str
    kind: str
    status: str
    options: NotRequired[dict[str, JsonValue]]
    metadata: NotRequired[dict[str, JsonValue]]
    warnings: NotRequired[list[str]]
    request_counts: NotRequired[dict[str, int]]
    cost_usd: NotRequired[float]
    timestamps: NotRequired[dict[str, str | None]]
    simulated: NotRequired[bool]
    simulated_note: NotRequired[str | None]
    schedule: NotRequired[ScheduleView | None]
    error: NotRequired[str | None]
    # The kind's summary contract (checks/), open here: each kind reads its own with `.read`.
    summary: NotRequired[dict[str, JsonValue] | None]


class ErrorBody(TypedDict, total=False):
    """The API's error object (`{"error": {...}}`, web/errors.py), as much of it as a client reads."""

    type: str
    message: str
    field: str
    line: int
    index: int
    errors: list[dict[str, JsonValue]]
    job_id: str


def _unavailable(response: httpx.Response) -> bool:
    return response.status_code == 503


def _retry_after_s(state: RetryCallState) -> float:
    """The wait the last 503 asked for (its Retry-After in seconds), bounded; a default when absent."""
    outcome = state.outcome
    response = outcome.result() if outcome is not None and not outcome.failed else None
    header = response.headers.get("retry-after") if isinstance(response, httpx.Response) else None
    try:
        wait = float(header) if header is not None else DEFAULT_RETRY_AFTER_S
    except ValueError:  # an HTTP-date: our server sends seconds, so this is a proxy's; use the default
        wait = DEFAULT_RETRY_AFTER_S
    return min(max(wait, 0.0), UNAVAILABLE_MAX_WAIT_S)


def patiently(
    call: Callable[[], httpx.Response],
    *,
    budget_s: float = UNAVAILABLE_BUDGET_S,
    sleep: Callable[[float], None] | None = None,
) -> httpx.Response:
    """`call()` again while it answers 503 (module docstring); the last answer is returned."""
    retrying = Retrying(
        retry=retry_if_result(_unavailable),
        wait=_retry_after_s,
        stop=stop_after_delay(budget_s),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        reraise=True,
        sleep=sleep or nap.sleep,
    )
    response: httpx.Response = retrying(call)
    return response


def error_body(response: httpx.Response) -> ErrorBody:
    """The API's `{"error": {...}}` object of an error response (empty when there is none)."""
    try:
        body = response.json()
    except ValueError:
        return {}
    if not (isinstance(body, dict) and isinstance(body.get("error"), dict)):
        return {}
    err: ErrorBody = body["error"]  # the JSON as parsed: a field of another type is the server's word
    return err
