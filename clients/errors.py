"""The one error type every failed upstream call raises, plus the missing-key error.

Callers (Celery tasks, the CLI, benchmarks) branch on `retryable` and `status`, store
`record` (one `api_calls` row per attempt) and show `str(err)` — one line, key-free.
"""

from __future__ import annotations

from typing import Any, TypedDict

from clients.records import CallRecord

API_KEY_ENV = "PERPLEXITY_API_KEY"

ENDPOINT_LABELS = {"decisions": "Decisions", "agent": "Agent", "search": "Search"}


class MissingApiKeyError(ValueError):
    """No API key configured. The message names the variable, never a value."""

    def __init__(self) -> None:
        super().__init__(
            f"{API_KEY_ENV} is not set; export it (or point PERPLEXITY_API_BASE at the simulator)"
        )


class UpstreamError(Exception):
    """A call that did not produce a valid answer.

    `status` is the HTTP status of the last attempt (None when no response arrived: transport
    error or timeout; 200 when the body was malformed). `message` is the body's
    `error.message`, a 422 `detail`, or the raw text, already key-redacted and one line.
    `retryable` says whether the failure was of a transient kind (429, 5xx, transport): the
    client has already spent its own retries, so a task may try again later. A malformed 200
    is never retryable.
    """

    def __init__(
        self,
        *,
        endpoint: str,
        status: int | None,
        message: str,
        request_id: str | None,
        retryable: bool,
        record: CallRecord,
    ) -> None:
        self.endpoint = endpoint
        self.status = status
        self.message = message
        self.request_id = request_id
        self.retryable = retryable
        self.record = record
        super().__init__(self._line())

    def _line(self) -> str:
        label = ENDPOINT_LABELS.get(self.endpoint, self.endpoint)
        head = str(self.status) if self.status is not None else "no response:"
        notes = []
        if self.request_id:
            notes.append(f"request id {self.request_id}")
        if self.record.attempt_count > 1:
            notes.append(f"{self.record.attempt_count} attempts")
        tail = f" ({'; '.join(notes)})" if notes else ""
        return f"{label} API failed: {head} {self.message}{tail}"

    def __str__(self) -> str:
        return self._line()

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only __init__ does not survive the default Exception pickling (Celery
        # result backends and multiprocessing pickle exceptions).
        state: _State = {
            "endpoint": self.endpoint,
            "status": self.status,
            "message": self.message,
            "request_id": self.request_id,
            "retryable": self.retryable,
            "record": self.record,
        }
        return (_rebuild, (state,))


class _State(TypedDict):
    """What a pickled UpstreamError carries: its keyword arguments, in this order."""

    endpoint: str
    status: int | None
    message: str
    request_id: str | None
    retryable: bool
    record: CallRecord


class CallInterrupted(Exception):  # noqa: N818 - it is not an error of the call itself
    """`before_attempt` raised (no rate-limiter slot, the limiter's store unreachable) after the call had
    already sent attempts. `record` keeps those attempts — they happened and may be billed — and `cause`
    is what stopped the call; no further POST was sent."""

    def __init__(self, record: CallRecord, cause: BaseException) -> None:
        super().__init__(f"call stopped before attempt {record.attempt_count + 1}: {type(cause).__name__}")
        self.record = record
        self.cause = cause


def _rebuild(state: _State) -> UpstreamError:
    return UpstreamError(**state)
