"""What the wire layer needs from the engine, and the response envelopes it wraps the answers in.

The engine is typed structurally here (`SimEngine`), so the wire layer depends on the shape of
`simulator.engine.Engine`, not on its module, and tests can pass a small fake. Every envelope names the
model with a `-simulated` suffix, so no simulated answer can pass for a real one (the SDK accepts any
string there).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

SIMULATED_SUFFIX = "-simulated"


class DecisionResult(Protocol):
    @property
    def answers(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def search_results(self) -> Sequence[Mapping[str, Any]] | None: ...


class AgentResult(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def results(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...


class SimEngine(Protocol):
    """The content engine's facade (simulator/engine.py); methods are called from many threads."""

    def decide(self, body: dict[str, Any]) -> DecisionResult: ...
    def agent(self, body: dict[str, Any]) -> AgentResult: ...
    def search(self, body: dict[str, Any]) -> Sequence[Mapping[str, Any]]: ...


def simulated(model: str) -> str:
    return f"{model}{SIMULATED_SUFFIX}"


def decisions_envelope(model: str, outcome: DecisionResult) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": simulated(model),
        "answers": {name: dict(answer) for name, answer in outcome.answers.items()},
        "usage": {"input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens},
    }
    if outcome.search_results is not None:
        payload["search_results"] = [dict(result) for result in outcome.search_results]
    return payload


def agent_envelope(body: Mapping[str, Any], outcome: AgentResult) -> dict[str, Any]:
    """A Responses-API object: a `search_results` item, then the assistant `message` item."""
    model = body.get("model") or f"preset/{body.get('preset') or 'default'}"
    query = body["input"] if isinstance(body["input"], str) else None
    search_item: dict[str, Any] = {
        "type": "search_results",
        "results": [dict(result) for result in outcome.results],
    }
    if query is not None:
        search_item["queries"] = [query]
    message = {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": outcome.text, "annotations": []}],
    }
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "model": simulated(str(model)),
        "status": "completed",
        "output": [search_item, message],
        "usage": {
            "input_tokens": outcome.input_tokens,
            "output_tokens": outcome.output_tokens,
            "total_tokens": outcome.input_tokens + outcome.output_tokens,
        },
    }


def search_envelope(results: Sequence[Mapping[str, Any]], max_results: int) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "results": [dict(result) for result in results[:max_results]]}
