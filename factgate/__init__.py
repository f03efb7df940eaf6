"""factgate's Python client: submit rows, wait for the job, read its typed results (docs/client.md).

from factgate import Client

with Client("https://factgate.example.com", token) as fg:
    job_id = fg.submit("citations", rows)
    job = fg.wait(job_id, progress="bar")
    for line in fg.results(job_id):
        print(line.custom_id, line.metrics)
"""

from __future__ import annotations

from checks.citation_contracts import CitationsResult, CitationsSummary
from checks.kinds.answer import AnswerResult
from checks.kinds.claims import ClaimResult, ClaimsSummary
from checks.kinds.quote import QuoteResult
from factgate.client import Client, FactgateError, Job, RejectedError

__all__ = [
    "AnswerResult",
    "CitationsResult",
    "CitationsSummary",
    "ClaimResult",
    "ClaimsSummary",
    "Client",
    "FactgateError",
    "Job",
    "QuoteResult",
    "RejectedError",
]
