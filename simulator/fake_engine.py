"""A corpus-free engine with fixed, well-formed answers.

It lets the wire layer be tested without the corpus and lets the load bench measure what the HTTP layer
alone sustains (the real engine's search cost comes on top). Answers depend only on the request, so
repeated requests get identical bodies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.wire import BYTES_PER_TOKEN, SEARCH_DEFAULT_RESULTS, dumps

FAKE_NOUL = 0.75


@dataclass(frozen=True)
class FakeDecision:
    answers: dict[str, dict[str, Any]]
    input_tokens: int
    output_tokens: int
    search_results: list[dict[str, Any]] | None


@dataclass(frozen=True)
class FakeAgentAnswer:
    text: str
    results: list[dict[str, Any]]
    input_tokens: int
    output_tokens: int


def _page(n: int) -> dict[str, Any]:
    return {
        "title": f"Simulated page {n}",
        "url": f"https://simulator.invalid/page/{n}",
        "snippet": f"Simulated snippet number {n}.",
        "date": f"2025-01-{1 + n % 28:02d}",
        "last_updated": None,
    }


def _answer(question: dict[str, Any]) -> dict[str, Any]:
    kind = question["type"]
    if kind == "noul":
        return {"type": "noul", "noul": FAKE_NOUL}
    if kind == "choice":
        keys = list(question["criteria"])
        probabilities = _favour_one(keys, keys[0])
        return {
            "type": "choice",
            "choice": keys[0],
            "probabilities": probabilities,
            "confidence": probabilities[keys[0]],
        }
    levels = question["criteria"]
    top = str(len(levels) - 1)
    probabilities = _favour_one([str(i) for i in range(len(levels))], top)
    return {
        "type": "score",
        "score": len(levels) - 1,
        "legend": {str(i): level for i, level in enumerate(levels)},
        "probabilities": probabilities,
        "confidence": probabilities[top],
    }


def _favour_one(keys: list[str], favourite: str) -> dict[str, float]:
    """0.6 on `favourite`, the rest spread evenly (1.0 when it is the only key); sums to 1."""
    if len(keys) == 1:
        return {favourite: 1.0}
    rest = 0.4 / (len(keys) - 1)
    return {key: 0.6 if key == favourite else rest for key in keys}


class FakeEngine:
    """Implements `simulator.envelopes.SimEngine` with canned answers; thread-safe (no state)."""

    def __init__(self, grounded_results: int = 2) -> None:
        self.grounded_results = grounded_results

    def decide(self, body: dict[str, Any]) -> FakeDecision:
        questions: dict[str, dict[str, Any]] = body["questions"]
        tokens = (len(dumps(body["state"])) + len(dumps(questions))) // BYTES_PER_TOKEN
        grounded = body.get("mode") == "web_grounding"
        return FakeDecision(
            answers={name: _answer(question) for name, question in questions.items()},
            input_tokens=max(1, tokens),
            output_tokens=len(questions),
            search_results=[_page(n) for n in range(1, self.grounded_results + 1)] if grounded else None,
        )

    def agent(self, body: dict[str, Any]) -> FakeAgentAnswer:
        results = [{"id": n, **_page(n)} for n in (1, 2)]
        for result in results:
            result.pop("last_updated")
        return FakeAgentAnswer(
            text="The simulator answers every question the same way [1]. It cites a second page too [2].",
            results=results,
            input_tokens=max(1, len(dumps(body.get("input"))) // BYTES_PER_TOKEN),
            output_tokens=20,
        )

    def search(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        count = body.get("max_results") or SEARCH_DEFAULT_RESULTS
        return [_page(n) for n in range(1, min(count, 5) + 1)]
