"""The `citations` kind's pages and downloads: a CSV row per sentence; the report page with the cutoff
replay (other cutoffs over the stored probabilities: no upstream request, nothing stored).

The replay relabels the answers shown and, for a job of at most `REPLAY_JOB_MAX_ANSWERS` answers, the
job's metrics too (every report is read); past that the job's metrics stay at the job's own cutoffs and
the page says so, since reading every stored report of a 100,000-answer job for one page view would cost
more than the page is worth.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy.orm import Session

from checks.citation_contracts import CitationCutoffs, CitationMetrics, CitationReport, CitationsResult
from checks.citation_verdicts import add_metrics, check_cutoffs, metrics_of, relabel
from checks.kinds.citations import CSV_COLUMNS
from jobs.citations import cutoffs_of
from jobs.stages import iter_question_reports
from models import Job
from web.csv_exports import CsvTally
from web.csv_safety import SafeCsv
from web.kinds import WebKind, register
from web.pages_questions import ANSWER_LABELS, ANSWER_STATUSES, QUESTIONS_PAGE_SIZE, question_reports

REPLAY_JOB_MAX_ANSWERS: Final = 2_000


def _cell(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _rows(line: CitationsResult) -> Iterator[Sequence[object]]:
    """One row per sentence of the answer; an answer with no sentences yet (or failed) gets one row."""
    report = line.report
    note = line.model_note or ""
    if report is None or not report.sentences:
        yield (line.custom_id, "", "", "", "", (report.error if report else None) or "", "", "", "", "",
               "", "", "", "", "", "", line.outcome or line.status, note, "")  # fmt: skip
        return
    for s in report.sentences:
        cited = [p for p in s.passages if p.role == "cited"]
        best = max((p.supports for p in cited if p.supports is not None), default=None)
        worst = max((p.contradicts for p in cited if p.contradicts is not None), default=None)
        review = s.review
        yield (
            line.custom_id,
            s.number,
            s.paragraph,
            s.text,
            s.label or s.status,
            s.rule or s.error or "",
            " ".join(s.cited),
            " ".join(s.supported_by),
            " ".join(s.misattributed),
            " ".join(s.missing),
            _cell(s.checkable),
            _cell(best),
            _cell(worst),
            s.request_id or "",
            (review.outcome or review.status or "") if review else "",
            (review.suggestion or "") if review else "",
            line.outcome or line.status,
            note,
            s.reused_from.request_id or "" if s.reused_from else "",
        )


def citations_csv(records: Iterator[CitationsResult]) -> Iterator[str]:
    """The results CSV: header, a row per sentence (formula-safe cells), the `#end,<N>` trailer."""
    out = CsvTally(SafeCsv())
    out.header(CSV_COLUMNS)
    for record in records:
        for row in _rows(record):
            out.row(row)
        yield out.take()
    yield out.end()


@dataclass(frozen=True)
class Replay:
    """The cutoff replay's form: the cutoffs shown, the job's own, and any input problem."""

    cutoffs: CitationCutoffs
    stored: CitationCutoffs
    raw: Mapping[str, str]
    error: str | None = None

    @property
    def replayed(self) -> bool:
        return self.cutoffs != self.stored


def replay_from_args(job: Job, args: Mapping[str, str]) -> Replay:
    """The cutoffs asked for in the query string (any left out: the job's); a bad value shows the job's
    own cutoffs with the problem named."""
    stored = cutoffs_of(job)
    raw = {name: args[name] for name in CitationCutoffs.model_fields if args.get(name)}
    if not raw:
        return Replay(stored, stored, raw)
    values = stored.model_dump()
    for name, text in raw.items():
        try:
            values[name] = float(text)
        except ValueError:
            return Replay(stored, stored, raw, f"{name} must be a number, got {text!r}")
    wanted = CitationCutoffs(**values)
    if problem := check_cutoffs(wanted):
        return Replay(stored, stored, raw, problem)
    return Replay(wanted, stored, raw)


def _relabelled(report: object, cutoffs: CitationCutoffs) -> CitationReport | None:
    if not isinstance(report, dict):
        return None
    head = CitationReport.read(report)
    sentences = [relabel(s, cutoffs, head.sources) for s in head.sentences]
    update = {"sentences": sentences, "metrics": metrics_of(sentences), "cutoffs": cutoffs}
    return head.model_copy(update=update)


def report(session: Session, job: Job, args: Mapping[str, str], interactive: bool) -> dict[str, object]:
    """The report template's context: the answers (a page of them, or all for the file), each as its
    report contract at the cutoffs shown, the job's summary and metrics, and the replay form."""
    replay = replay_from_args(job, args) if interactive else replay_from_args(job, {})
    answers = question_reports(session, job, args, page_size=QUESTIONS_PAGE_SIZE if interactive else None)
    cutoffs = replay.cutoffs

    def entries() -> Iterator[dict[str, object]]:
        for entry in answers.entries:
            yield {**entry, "view": _relabelled(entry.get("report"), cutoffs)}

    job_metrics: CitationMetrics | None = None
    job_replayed = False
    summary = dict(job.summary or {})
    if replay.replayed and answers.total <= REPLAY_JOB_MAX_ANSWERS:
        views = (_relabelled(e.get("report"), cutoffs) for e in iter_question_reports(session, job))
        job_metrics = add_metrics(v.metrics for v in views if v is not None)
        job_replayed = True
    elif isinstance(summary.get("metrics"), dict):
        job_metrics = CitationMetrics.read(summary["metrics"])
    return {
        "template": "report_citations.html",
        "questions": answers,
        "entries": list(entries()) if interactive else entries(),
        "summary": summary,
        "metrics": job_metrics,
        "metrics_replayed": job_replayed,
        "replay_job_max": REPLAY_JOB_MAX_ANSWERS,
        "replay": replay,
        "statuses": ANSWER_STATUSES,
        "labels": ANSWER_LABELS,
        "interactive": interactive,
        "input_error": replay.error,
    }


KIND = register(WebKind("citations", csv=citations_csv, report=report))
