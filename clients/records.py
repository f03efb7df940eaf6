"""What one upstream call cost and how it went, kept whether it succeeded or not.

The database stores one `api_calls` row per HTTP attempt, and support looks calls up by
`x-request-id`, so every POST gets its own `AttemptRecord` — failed attempts included.
Records never hold headers, request bodies or the API key.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AttemptRecord:
    """One POST sent upstream.

    `status` is None when no response arrived (transport error or timeout). `retry_after_s` is
    the wait the retry policy chose after this attempt (the server's `Retry-After`, or the
    backoff) for a retryable outcome; on the last attempt it is advisory, since no retry
    followed. `error` is a one-line, key-redacted description; None on success. Both
    `request_id` and `error` have passed `clients.sanitize`, so they fit their columns. `queue_wait_s`
    is the time spent in `before_attempt` (waiting for a rate-limiter slot) before this POST and in
    `before_send` (the wire gate) during it: our queue, kept apart from `latency_s`, which is the POST
    alone.
    """

    status: int | None
    request_id: str | None
    latency_s: float
    error: str | None = None
    retry_after_s: float | None = None
    queue_wait_s: float = 0.0


@dataclass(frozen=True)
class CallRecord:
    """One logical call: every attempt, plus what the final answer used.

    `latency_s` is wall time for the whole call — limiter waits, retries and backoff included.
    Tokens and `search_results` come from the validated answer and stay None/0 on failure.
    `grounded` means each attempt may have run a billed web search (Decisions with
    `mode: "web_grounding"`, Agent with the `web_search` tool, every Search call), so
    `len(attempts)` of a grounded record is an upper bound on billed searches.
    `sanitized` names every field `clients.sanitize` changed during the call: the answer's own
    paths (`"model"`, `"results[0].snippet"`), then per attempt `"attempt[N].request_id"` and
    `"attempt[N].error"`, N counted from 1 as `api_calls.attempt` is.
    `reused`: nothing was sent; the answer was taken from the caller's store of earlier answers, and
    `attempts` holds one entry naming the original request's id (its status and latency are not this call's).
    """

    endpoint: str
    model: str | None
    attempts: list[AttemptRecord] = field(default_factory=list)
    latency_s: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None
    search_results: int = 0
    grounded: bool = False
    sanitized: list[str] = field(default_factory=list)
    reused: bool = False

    @property
    def attempt_count(self) -> int:
        """POSTs sent."""
        return 0 if self.reused else len(self.attempts)

    @property
    def status(self) -> int | None:
        """Status of the last attempt (None when nothing was sent or nothing came back)."""
        return self.attempts[-1].status if self.attempts else None

    @property
    def request_id(self) -> str | None:
        """Request id of the last attempt; earlier ones stay in `attempts`."""
        return self.attempts[-1].request_id if self.attempts else None

    @property
    def request_ids(self) -> list[str]:
        """Every request id received, in attempt order."""
        return [a.request_id for a in self.attempts if a.request_id]
