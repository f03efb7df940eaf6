"""The `answer` kind's pages and downloads: a CSV row per question with the checked answer; its report."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.orm import Session

from models import Job
from web.csv_exports import answers_csv
from web.kinds import WebKind, register
from web.pages_questions import ANSWER_STATUSES, questions_report_context


def report(session: Session, job: Job, args: Mapping[str, str], interactive: bool) -> dict[str, object]:
    return questions_report_context(
        session, job, args, interactive, template="report_answer.html", statuses=ANSWER_STATUSES
    )


KIND = register(WebKind("answer", csv=answers_csv, report=report))
