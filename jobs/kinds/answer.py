"""The `answer` kind's state changes: the question stage machine with jobs/answers.py's plan and report."""

from __future__ import annotations

from checks.answer_contracts import AnswerReport
from checks.kinds.answer import result_line, summarize_job
from jobs import answers
from jobs.kinds import StageMachine, register
from jobs.stages import staged_kind

KIND = register(
    staged_kind(
        "answer",
        StageMachine(answers.plan, answers.build_report, summarize_job, result_line, report=AnswerReport),
    )
)
