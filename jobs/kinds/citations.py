"""The `citations` kind's state changes: answers into entry items (streamed through the staging table on
Postgres), the stage machine with jobs/citations.py's plan and report, the summary and result lines."""

from __future__ import annotations

from checks.citation_contracts import CitationReport
from checks.kinds.citations import result_line, summarize_job
from jobs import citations
from jobs.kinds import StageMachine, register
from jobs.stages import staged_kind

KIND = register(
    staged_kind(
        "citations",
        StageMachine(
            citations.plan, citations.build_report, summarize_job, result_line, report=CitationReport
        ),
        units=citations.citation_units,
        load=citations.load_citation_rows,
        build=citations.build_citation_items,
    )
)
