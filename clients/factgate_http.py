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
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, nap, retry_if_result, stop_after_delay

__all__ = [
    "NDJSON",
    "SUBMIT_TIMEOUT",
    "TIMEOUT",
    "UNAVAILABLE_BUDGET_S",
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


def error_body(response: httpx.Response) -> dict[str, Any]:
    """The API's `{"error": {...}}` object of an error response (empty when there is none)."""
    try:
        body = response.json()
    except ValueError:
        return {}
    err = body.get("error") if isinstance(body, dict) else None
    return err if isinstance(err, dict) else {}
