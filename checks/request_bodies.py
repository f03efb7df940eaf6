"""The JSON bodies factgate sends upstream, as the builders in checks/ make them: the Decisions request
(claims, answer and citation sentences, quote rank and compare), the Search request (quote) and the Agent
request (answer). `clients/perplexity.py` sends them as they are, so the keys here are the wire's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NotRequired, TypedDict

__all__ = ["AgentRequest", "AgentTool", "DecisionsQuestion", "DecisionsRequest", "SearchRequest"]


class DecisionsQuestion(TypedDict):
    """One named question of a Decisions request: `noul` (a yes/no probability) or `choice` (one of the
    options named in `criteria`)."""

    type: Literal["noul", "choice"]
    instructions: str
    criteria: NotRequired[dict[str, str]]


class DecisionsRequest(TypedDict):
    """A Decisions request: questions about one state, asked of one model."""

    model: str
    # A claim's text, or an object each builder shapes for its own questions (passages, sentences,
    # candidates): the API takes any JSON here, so the builder, not this type, fixes its keys.
    state: str | Mapping[str, object]
    questions: dict[str, DecisionsQuestion]
    mode: NotRequired[Literal["web_grounding"]]


class SearchRequest(TypedDict):
    query: str
    max_results: int
    max_tokens_per_page: int


class AgentTool(TypedDict):
    type: Literal["web_search"]


class AgentRequest(TypedDict):
    input: str
    preset: str
    instructions: str
    tools: list[AgentTool]
