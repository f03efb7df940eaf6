"""Turn the client's call record into `api_calls` rows, with their cost.

Grounded Decisions attempts each count one search: the search is billed when it returns even if the
decision then fails, so every grounded attempt is an upper bound on billed searches (docs/spec.md §1).
"""

from __future__ import annotations

from clients.records import CallRecord
from jobs.records import CallRow


def call_rows(record: CallRecord, *, search_cost_usd: float, token_cost_per_m: float) -> list[CallRow]:
    """One row per attempt; tokens (and their cost) on the attempt that produced the answer."""
    rows: list[CallRow] = []
    last = len(record.attempts) - 1
    for i, attempt in enumerate(record.attempts):
        answered = i == last and attempt.status == 200 and record.input_tokens is not None
        tokens_in = (record.input_tokens or 0) if answered else 0
        tokens_out = (record.output_tokens or 0) if answered else 0
        searches = 1 if record.grounded else 0
        rows.append(
            CallRow(
                endpoint=record.endpoint,
                attempt=i + 1,
                status_code=attempt.status,
                request_id=attempt.request_id,
                latency_ms=attempt.latency_s * 1000.0,
                wait_ms=attempt.queue_wait_s * 1000.0,
                model=record.model,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                searches=searches,
                search_results=record.search_results if answered else 0,
                cost_usd=tokens_in * token_cost_per_m / 1_000_000 + searches * search_cost_usd,
                error=attempt.error,
            )
        )
    return rows
