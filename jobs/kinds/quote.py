"""The `quote` kind's state changes: the question stage machine with jobs/quotes.py's plan and report."""

from __future__ import annotations

from checks.kinds.quote import result_line, summarize_job
from checks.quote_contracts import QuoteReport
from jobs import quotes
from jobs.kinds import StageMachine, register
from jobs.stages import staged_kind

KIND = register(
    staged_kind(
        "quote",
        StageMachine(quotes.plan, quotes.build_report, summarize_job, result_line, report=QuoteReport),
    )
)
