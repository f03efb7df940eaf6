"""The `answer` recipe (docs/spec.md §3): ask the Agent API, score every sentence against its sources with
Decisions requests, investigate and rewrite the weak ones, report the checked answer.

Three stages: `question` (one Agent call) → `sentence` (one Decisions request each) → `investigation` (one
Agent call plus a Decisions request per rewritten sentence).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field

from checks import answers as gate
from checks.contracts import ItemStatusName, reused_in
from checks.kinds._questions import (
    QUESTION_RECIPE_PARTS,
    QuestionLine,
    QuestionsSummary,
    as_report,
    reported_line,
)
from checks.packing import AUDIT_STAGE
from checks.packing_audit import AuditPart, PackingAudit, combine
from checks.recipes import Recipe, StageSpec, register

CSV_COLUMNS = (
    "custom_id",
    "question",
    "status",
    "outcome",
    "final_answer",
    "request_ids",
    "incomplete_steps",
    "partial_answer",
    "model_note",
    "reused_from",
)


class AnswerResult(QuestionLine):
    """A results line of an answer job. `final_answer` only when every step ran (outcome `done`); an
    incomplete question's sentences so far are in `partial_answer`."""

    final_answer: str | None = Field(
        default=None, description="The answer after review, citations renumbered by URL."
    )
    partial_answer: str | None = None


class AnswerSummary(QuestionsSummary):
    kind: Literal["answer"] = "answer"
    before: dict[str, int] = Field(default_factory=dict, description="Sentence labels before review.")
    after: dict[str, int] = Field(default_factory=dict, description="Sentence labels after review.")
    packing_audit: PackingAudit | None = Field(
        default=None,
        description="Packed sentences asked again one per request, compared (docs/spec.md §9.6); null when "
        "the job packed nothing or audited nothing.",
    )


# --- job summary and results lines (pure: over stored reports) ------------------------------------------

SUMMARY_TOTALS = (
    "sentences",
    "investigated",
    "replaced",
    "not_confirmed",
    "not_reviewed",
    "decisions_requests",
    "reused_requests",
    "decisions_input_tokens",
    "agent_calls",
    "seconds",
    "failed_sentences",
    "failed_investigations",
)
OUTCOMES = ("done", "failed", "skipped", "incomplete")


def summarize_job(reports: Iterable[tuple[str | None, Mapping[str, Any] | None]]) -> AnswerSummary:
    """Totals over every question: (report status, report summary) pairs; missing reports count as none.

    `outcomes.done` counts only questions where every step ran; `incomplete_steps` counts the steps that
    did not, by step name, over every incomplete question.
    """
    outcomes = dict.fromkeys(OUTCOMES, 0)
    totals: dict[str, float] = dict.fromkeys(SUMMARY_TOTALS, 0)
    before: dict[str, int] = {}
    after: dict[str, int] = {}
    steps: dict[str, int] = {}
    audits: list[AuditPart] = []
    questions = 0
    for status, summary in reports:
        questions += 1
        if isinstance(found := (summary or {}).get("packing_audit"), Mapping):
            audits.append(AuditPart.read(found))
        if status is not None:
            outcomes[status] = outcomes.get(status, 0) + 1
        for name in SUMMARY_TOTALS:
            totals[name] += (summary or {}).get(name) or 0
        for target, key in ((before, "before"), (after, "after"), (steps, "incomplete_steps")):
            for label, n in ((summary or {}).get(key) or {}).items():
                target[label] = target.get(label, 0) + int(n)
    totals["seconds"] = round(float(totals["seconds"]), 1)
    order: dict[str, int] = {label: i for i, label in enumerate(gate.LABELS)}
    return AnswerSummary(
        questions=questions,
        outcomes=outcomes,
        incomplete_steps=steps,
        totals={k: (v if k == "seconds" else int(v)) for k, v in totals.items()},
        before=dict(sorted(before.items(), key=lambda kv: order.get(kv[0], 99))),
        after=dict(sorted(after.items(), key=lambda kv: order.get(kv[0], 99))),
        packing_audit=combine(audits),
    )


def answer_text(final: Mapping[str, Any]) -> str:
    """The sentences of a report's `final` as text: ` [n]` citations, paragraphs split by a blank line."""
    paragraphs = []
    for indexes in final["paragraphs"]:
        parts = []
        for i in indexes:
            sentence = final["sentences"][i]
            cites = "".join(f"[{n}]" for n in sentence["citations"])
            parts.append(f"{sentence['text']}{' ' + cites if cites else ''}")
        paragraphs.append(" ".join(parts))
    return "\n\n".join(paragraphs)


def result_line(
    custom_id: str, question: str, status: ItemStatusName, report: Mapping[str, Any] | None
) -> AnswerResult:
    """One results-export line: the final answer as text with renumbered citations, and the report.

    `final_answer` is set only when every step ran (outcome `done`); an incomplete question's sentences so
    far are in `partial_answer` instead, next to the steps that are missing, so no consumer reads a
    partly checked answer as a checked one.
    """
    head = as_report(report)
    if report is None or head is None:
        return AnswerResult(custom_id=custom_id, question=question, status=status)
    text: dict[str, str] = {}
    final = report.get("final")
    if final:
        text["final_answer" if head.status == "done" else "partial_answer"] = answer_text(final)
    return AnswerResult(
        **reported_line(custom_id, question, status, head),
        reused_from=reused_in(report.get("evidence") or []),
        **text,
    )


RECIPE = register(
    Recipe(
        name="answer",
        title="Answer check",
        order=2,
        stages=(
            StageSpec("question", "agent"),
            StageSpec("sentence", "decisions"),
            StageSpec("investigation", "agent"),
            # a packed sentence asked again alone, for the packing audit (docs/spec.md §9.6)
            StageSpec(AUDIT_STAGE, "decisions"),
        ),
        result_line=AnswerResult,
        summary=AnswerSummary,
        csv_columns=CSV_COLUMNS,
        **QUESTION_RECIPE_PARTS,
        description="answer each question and check the answer",
    )
)
