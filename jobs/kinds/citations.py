"""The `citations` kind's state changes: answers into entry items (streamed through the staging table on
Postgres), the stage machine with jobs/citations.py's plan and report, the summary and result lines."""

from __future__ import annotations

from checks.citation_contracts import CitationReport
from checks.kinds.citations import result_line, summarize_job
from jobs import citations
from jobs.kinds import JobKind, StageMachine, register
from jobs.stages import question_results_page, questions_ready, questions_summary

KIND = register(
    JobKind(
        "citations",
        units=citations.citation_units,
        summarize=questions_summary,
        results_page=question_results_page,
        machine=StageMachine(
            citations.plan, citations.build_report, summarize_job, result_line, report=CitationReport
        ),
        ready=lambda session, job: questions_ready(session, job.id),
        load=citations.load_citation_rows,
        build=citations.build_citation_items,
    )
)
