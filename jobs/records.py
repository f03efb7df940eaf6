"""Plain records that cross from workers into jobs/ (jobs/ never imports the HTTP client)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallRow:
    """One upstream HTTP attempt, as stored in `api_calls`."""

    endpoint: str
    attempt: int
    status_code: int | None
    request_id: str | None
    latency_ms: float
    wait_ms: float = 0.0
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    searches: int = 0
    search_results: int = 0
    cost_usd: float = 0.0
    error: str | None = None
    # An answer taken from the tenant's verdict store: not an HTTP attempt (no status, cost 0), `request_id`
    # the original request's.
    reused: bool = False


@dataclass(frozen=True)
class ClaimedItem:
    """An item a worker holds. `token` (the attempt number) proves the lease is still ours; `kind` is its
    job's (stages that several kinds share, like `question`, find their handler by it)."""

    id: int
    job_id: uuid.UUID
    tenant_id: uuid.UUID
    stage: str
    mode: str
    custom_id: str
    input: dict[str, Any]
    token: int
    options: dict[str, Any]
    dedupe_key: str | None
    kind: str = ""
