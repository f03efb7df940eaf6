"""Typed answers from the three APIs, as the validators return them.

Only shapes that passed validation become these objects, so callers can trust every
probability is a float in [0, 1] and every search result has a URL. Every string in them has
passed `clients.sanitize.clean`, so it can be stored as it is; `sanitized` names each field the
cleaning changed, by its path in the object (`"model"`, `"search_results[2].snippet"`), so an
answer that needed it says so. `record` is filled in by the client once the call is finished; a
freshly validated object carries an empty one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import JsonValue

from clients.records import CallRecord


def _unsent(endpoint: str) -> CallRecord:
    return CallRecord(endpoint=endpoint, model=None)


@dataclass(frozen=True)
class SearchResult:
    """A web page a call searched: Decisions `search_results`, Agent results, Search results.

    `id` is the Agent API's citation number (a `[3]` marker points at id 3); None elsewhere.
    """

    url: str
    title: str = ""
    snippet: str = ""
    date: str | None = None
    last_updated: str | None = None
    id: int | None = None


@dataclass(frozen=True)
class Answer:
    """One Decisions answer. Fields not used by the question's type stay None/empty.

    noul: `noul`. choice: `choice` (an option key sent), `probabilities` per option,
    `confidence`. score: `score`, `probabilities` per level ("0", "1", …), `legend`,
    `confidence`.
    """

    type: str
    noul: float | None = None
    choice: str | None = None
    score: float | None = None
    probabilities: dict[str, float] = field(default_factory=dict)
    confidence: float | None = None
    legend: dict[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """A validated Decisions response. `search_results` is [] when ungrounded or nothing was found."""

    answers: dict[str, Answer]
    input_tokens: int
    output_tokens: int
    search_results: list[SearchResult]
    model: str | None
    sanitized: list[str] = field(default_factory=list)
    record: CallRecord = field(default_factory=lambda: _unsent("decisions"), compare=False)


@dataclass(frozen=True)
class AgentAnswer:
    """A validated Agent response: the message text and the search results it may cite."""

    text: str
    results: list[SearchResult]
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    sanitized: list[str] = field(default_factory=list)
    record: CallRecord = field(default_factory=lambda: _unsent("agent"), compare=False)

    def result(self, result_id: int) -> SearchResult | None:
        """The result a `[result_id]` marker points at, or None (a "missing id")."""
        for found in reversed(self.results):  # a later search result with the same id wins
            if found.id == result_id:
                return found
        return None


@dataclass(frozen=True)
class SearchResponse:
    """A validated Search response."""

    results: list[SearchResult]
    id: str | None = None
    sanitized: list[str] = field(default_factory=list)
    record: CallRecord = field(default_factory=lambda: _unsent("search"), compare=False)
