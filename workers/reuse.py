"""A Decisions answer as the verdict store keeps it, and back (jobs/verdicts.py stores the JSON;
checks/reuse.py decides which requests may use it). What is kept is what the client validated: the
answers, the search results, the model, the paths `clients.sanitize` changed, and the tokens; the
request id and time go in their own columns, and become the reused item's `reused_from`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from clients.records import AttemptRecord, CallRecord
from clients.results import Answer, Decision, SearchResult
from jobs.verdicts import StoredVerdict


@dataclass(frozen=True)
class ReusedFrom:
    """Which earlier request answered a reused one: what the item's output says as `reused_from`."""

    request_id: str | None
    answered_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "answered_at": self.answered_at.isoformat()}


def decision_json(decision: Decision) -> dict[str, Any]:
    """The validated answer as plain JSON (no call record: that one is the original call's)."""
    return {
        "answers": {name: asdict(answer) for name, answer in decision.answers.items()},
        "search_results": [asdict(result) for result in decision.search_results],
        "model": decision.model,
        "sanitized": list(decision.sanitized),
    }


def stored_decision(stored: StoredVerdict, *, grounded: bool) -> Decision:
    """The Decision a stored entry stands for, with a call record that says nothing was sent (`reused`) and
    names the original request id."""
    answer = stored.answer
    record = CallRecord(
        endpoint="decisions",
        model=stored.model,
        attempts=[AttemptRecord(status=None, request_id=stored.request_id, latency_s=0.0)],
        input_tokens=stored.input_tokens,
        output_tokens=stored.output_tokens,
        search_results=len(answer.get("search_results") or []),
        grounded=grounded,
        sanitized=list(answer.get("sanitized") or []),
        reused=True,
    )
    return Decision(
        answers={name: Answer(**fields) for name, fields in dict(answer.get("answers") or {}).items()},
        input_tokens=stored.input_tokens,
        output_tokens=stored.output_tokens,
        search_results=[SearchResult(**fields) for fields in answer.get("search_results") or []],
        model=answer.get("model"),
        sanitized=list(answer.get("sanitized") or []),
        record=record,
    )
