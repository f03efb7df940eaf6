"""factgate clients layer: one httpx client for the Perplexity Decisions, Agent and Search APIs.

Imports nothing of ours; used by the Celery workers, the CLI and the benchmarks.
"""

from __future__ import annotations

from clients.errors import MissingApiKeyError, UpstreamError
from clients.perplexity import AGENT, DECISIONS, DEFAULT_BASE_URL, SEARCH, PerplexityClient
from clients.records import AttemptRecord, CallRecord
from clients.results import AgentAnswer, Answer, Decision, SearchResponse, SearchResult
from clients.retry import RetryPolicy

__all__ = [
    "AGENT",
    "DECISIONS",
    "DEFAULT_BASE_URL",
    "SEARCH",
    "AgentAnswer",
    "Answer",
    "AttemptRecord",
    "CallRecord",
    "Decision",
    "MissingApiKeyError",
    "PerplexityClient",
    "RetryPolicy",
    "SearchResponse",
    "SearchResult",
    "UpstreamError",
]
