"""The `citations` recipe (docs/spec.md §8): a team's own answers with their own sources and `[n]`
markers; every sentence scored against the passages it cites (and, for misattribution, the row's other
sources), labelled at the job's cutoffs, with citation recall and precision per answer and per job.

Three stages: `answer` (no upstream call: the answer is split and each sentence's passages chosen) →
`cited_sentence` (one Decisions request each) → `rewrite` (option `review: agent`: the answer kind's
investigation, one Agent call plus a Decisions request per rewrite sentence, for the first flagged
sentences of an answer that has a `question`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import JsonValue

from checks.citation_contracts import (
    CitationCutoffs,
    CitationMetrics,
    CitationReport,
    CitationsResult,
    CitationsSummary,
)
from checks.citation_formats import INPUT_FORMATS, format_note
from checks.citation_rows import (
    ALLOWED_FIELDS,
    CSV_REFUSAL,
    MAX_ANSWER_BYTES,
    MAX_ROW_BYTES,
    MAX_SOURCE_BYTES,
    MAX_SOURCES,
    CitationRow,
    parse_citation_lines,
    validate_citation_rows,
)
from checks.citation_verdicts import add_metrics, check_cutoffs
from checks.contracts import ItemStatusName
from checks.fairness import Priority
from checks.kinds._schemas import (
    AUDIT_SHARE_OPTION,
    BUDGET_OPTION,
    PACK_SIZE_OPTION,
    PRIORITY_OPTION,
    REUSE_MAX_AGE_OPTION,
    REUSE_OPTION,
    WEBHOOK_URL_OPTION,
)
from checks.ndjson import RowLine
from checks.options import (
    CUTOFFS_MODEL,
    REUSE_OPTION_NAMES,
    OptionsError,
    audit_share_option,
    budget_option,
    known_options,
    model_option,
    number_option,
    pack_size_option,
    priority_option,
    reuse_options,
    webhook_url_option,
    without_unset_webhook,
)
from checks.packing import AUDIT_STAGE, DEFAULT_AUDIT_SHARE, MAX_PACK_SIZE
from checks.packing_audit import AuditPart, combine
from checks.pricing import KNOWN_MODELS
from checks.questions import MAX_QUESTION_BYTES, MAX_QUESTION_ID_CHARS
from checks.recipes import Recipe, RowLimits, StageSpec, register
from checks.reuse import Reuse

ENTRY_STAGE: Final = "answer"
SENTENCE_STAGE: Final = "cited_sentence"
REWRITE_STAGE: Final = "rewrite"
REVIEWS: Final = ("none", "agent")
Review = Literal["none", "agent"]
OPTION_NAMES: Final = frozenset(
    {
        "model",
        "supported_min",
        "weak_min",
        "contradicted_min",
        "checkable_min",
        "misattribution",
        "review",
        "budget_usd",
        "priority",
        "webhook_url",
        "pack_size",
        "audit_share",
        "input_format",
    }
    | REUSE_OPTION_NAMES
)
CSV_COLUMNS: Final = (
    "custom_id",
    "sentence",
    "paragraph",
    "text",
    "label",
    "rule",
    "cited",
    "supported_by",
    "misattributed",
    "missing_ids",
    "checkable",
    "best_support",
    "max_contradiction",
    "request_id",
    "review_outcome",
    "suggestion",
    "answer_outcome",
    "model_note",
    "reused_from",
)
_BOOLEANS: Final = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclass(frozen=True)
class CitationsOptions:
    """Options of a `citations` job: the model, the four label cutoffs, misattribution, review, budget."""

    model: str = CUTOFFS_MODEL
    supported_min: float = 0.7
    weak_min: float = 0.4
    contradicted_min: float = 0.6
    checkable_min: float = 0.5
    misattribution: bool = True
    review: Review = "none"
    budget_usd: float | None = None
    priority: Priority = "batch"
    webhook_url: str | None = None
    # Sentences of one answer per Decisions request (docs/spec.md §9): by default as many as fit.
    pack_size: int = MAX_PACK_SIZE
    audit_share: float = DEFAULT_AUDIT_SHARE
    input_format: str = "auto"
    reuse: Reuse = "auto"
    reuse_max_age_hours: float | None = None

    @property
    def cutoffs(self) -> CitationCutoffs:
        return CitationCutoffs(
            supported_min=self.supported_min,
            weak_min=self.weak_min,
            contradicted_min=self.contradicted_min,
            checkable_min=self.checkable_min,
        )

    def as_dict(self) -> dict[str, JsonValue]:
        return without_unset_webhook(
            {
                "model": self.model,
                **self.cutoffs.model_dump(),
                "misattribution": self.misattribution,
                "review": self.review,
                "budget_usd": self.budget_usd,
                "priority": self.priority,
                "webhook_url": self.webhook_url,
                "pack_size": self.pack_size,
                "audit_share": self.audit_share,
                # Stored only when named: a job read as detected keeps the options it always had.
                **({"input_format": self.input_format} if self.input_format != "auto" else {}),
                "reuse": self.reuse,
                "reuse_max_age_hours": self.reuse_max_age_hours,
            }
        )


def _boolean(raw: Mapping[str, object], name: str, default: bool) -> bool:
    value = raw.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _BOOLEANS:
        return _BOOLEANS[value.strip().lower()]
    raise OptionsError(name, f"must be true or false, got {value!r}")


def parse_options(raw: Mapping[str, object] | None) -> CitationsOptions:
    """Validate `citations` options; raises OptionsError naming the first bad option."""
    raw = known_options(raw, OPTION_NAMES)
    model = model_option(raw, CUTOFFS_MODEL)
    defaults = CitationCutoffs()
    values: dict[str, float] = {}
    for name, default in defaults.model_dump().items():
        value = number_option(raw, name, float(default))
        assert value is not None
        values[name] = value
    cutoffs = CitationCutoffs(**values)
    if problem := check_cutoffs(cutoffs):
        raise OptionsError(problem.split(" ", 1)[0], problem.split(" ", 1)[1])
    review = raw.get("review") or "none"
    if review not in REVIEWS:
        raise OptionsError("review", f"must be one of {', '.join(REVIEWS)}, got {review!r}")
    budget = budget_option(raw)
    input_format = raw.get("input_format") or "auto"
    if input_format not in INPUT_FORMATS:
        raise OptionsError(
            "input_format", f"must be one of {', '.join(INPUT_FORMATS)}, got {str(input_format)[:40]!r}"
        )
    reuse, max_age = reuse_options(raw)
    return CitationsOptions(
        input_format=str(input_format),
        model=model,
        **values,
        misattribution=_boolean(raw, "misattribution", True),
        review="agent" if review == "agent" else "none",
        budget_usd=budget,
        priority=priority_option(raw),
        webhook_url=webhook_url_option(raw),
        pack_size=pack_size_option(raw, MAX_PACK_SIZE),
        audit_share=audit_share_option(raw, DEFAULT_AUDIT_SHARE),
        reuse=reuse,
        reuse_max_age_hours=max_age,
    )


def rows_from_lines(lines: Iterable[RowLine], limits: RowLimits) -> Sequence[CitationRow]:
    return parse_citation_lines(lines, max_rows=limits.max_rows, input_format=limits.input_format)


def rows_from_items(items: Sequence[object], limits: RowLimits) -> Sequence[CitationRow]:
    return validate_citation_rows(items, max_rows=limits.max_rows, input_format=limits.input_format)


def rows_note(rows: Iterable[CitationRow], input_format: str) -> list[str]:
    """The job's note on how its rows were read (a RAGAS or DeepEval body), or none."""
    formats: set[str] = set()
    answers = unmarked = 0
    for row in rows:
        formats.add(row.input_format)
        answers += 1
        unmarked += 1 if row.entry.unmarked else 0
    found = formats.pop() if len(formats) == 1 else "factgate"
    note = format_note(found, detected=input_format == "auto", answers=answers, unmarked=unmarked)
    return [note] if note else []


# --- job summary and result lines (pure: over stored reports) -------------------------------------------

SUMMARY_TOTALS: Final = (
    "sentences",
    "decisions_requests",
    "reused_requests",
    "decisions_input_tokens",
    "agent_calls",
    "reviewed",
    "replaced",
    "not_confirmed",
    "not_reviewed",
    "failed_sentences",
    "failed_reviews",
)
OUTCOMES: Final = ("done", "failed", "skipped", "incomplete")


def summarize_job(reports: Iterable[tuple[str | None, Mapping[str, object] | None]]) -> CitationsSummary:
    """Totals and the job's citation metrics over every answer's (report status, report summary)."""
    outcomes = dict.fromkeys(OUTCOMES, 0)
    totals: dict[str, float] = dict.fromkeys(SUMMARY_TOTALS, 0)
    steps: dict[str, int] = {}
    metrics: list[CitationMetrics] = []
    cutoffs: CitationCutoffs | None = None
    answers = 0
    audits: list[AuditPart] = []
    for status, summary in reports:
        answers += 1
        if status is not None:
            outcomes[status] = outcomes.get(status, 0) + 1
        s = summary or {}
        for name in SUMMARY_TOTALS:
            value = s.get(name)
            totals[name] += float(value) if isinstance(value, int | float) else 0
        missing = s.get("incomplete_steps")
        if isinstance(missing, Mapping):
            for step, n in missing.items():
                steps[str(step)] = steps.get(str(step), 0) + int(n)
        if isinstance(found := s.get("metrics"), Mapping):
            metrics.append(CitationMetrics.read(found))
        if cutoffs is None and isinstance(found := s.get("cutoffs"), Mapping):
            cutoffs = CitationCutoffs.read(found)
        if isinstance(found := s.get("packing_audit"), Mapping):
            audits.append(AuditPart.read(found))
    return CitationsSummary(
        questions=answers,
        outcomes=outcomes,
        incomplete_steps=steps,
        totals={k: int(v) for k, v in totals.items()},
        metrics=add_metrics(metrics),
        cutoffs=cutoffs or CitationCutoffs(),
        packing_audit=combine(audits),
    )


def result_line(
    custom_id: str, question: str | None, status: ItemStatusName, report: Mapping[str, object] | None
) -> CitationsResult:
    """One results-export line: the answer's outcome, metrics and whole report."""
    if not isinstance(report, Mapping):
        return CitationsResult(custom_id=custom_id, question=question, status=status)
    head = CitationReport.read(report)
    return CitationsResult(
        custom_id=custom_id,
        question=question,
        status=status,
        outcome=head.status,
        incomplete_steps=[s.dump() for s in head.incomplete_steps],
        model_note=head.model_note,
        metrics=head.metrics,
        request_ids=_request_ids(head),
        usage=head.usage,
        report=head,
    )


def _request_ids(report: CitationReport) -> list[str]:
    ids = [i for s in report.sentences for i in s.request_ids]
    ids += [i for s in report.sentences if s.review is not None for i in s.review.request_ids]
    return ids


# --- schemas (the parsers above are the authority; these document them) --------------------------------

ROW_SCHEMA: Final[Mapping[str, object]] = {
    "type": "object",
    "description": "One answer of a `citations` job, with the sources it cites by `[id]` markers "
    f"(at most {MAX_ROW_BYTES:,} bytes a row). NDJSON or JSON only: a CSV body is refused. A body may "
    "instead hold RAGAS samples (`user_input`, `response`, `retrieved_contexts`, `reference`) or DeepEval "
    "test cases (`input`, `actual_output`, `retrieval_context`, `name`), one format a body (option "
    "`input_format`; docs/spec.md §8.1).",
    "required": ["id", "answer", "sources"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "maxLength": MAX_QUESTION_ID_CHARS, "description": "Unique in the batch."},
        "answer": {
            "type": "string",
            "minLength": 1,
            "description": "The answer with `[n]`, `[n][m]` or `[n, m]` markers (at most "
            f"{MAX_ANSWER_BYTES:,} bytes of UTF-8); `n` is a source id.",
        },
        "question": {
            "type": ["string", "null"],
            "description": f"What was asked (at most {MAX_QUESTION_BYTES:,} bytes); `review: agent` "
            "needs it.",
        },
        "sources": {
            "type": "array",
            "maxItems": MAX_SOURCES,
            "items": {
                "type": "object",
                "required": ["text"],
                "additionalProperties": False,
                "properties": {
                    "id": {
                        "type": ["string", "integer", "null"],
                        "description": "What markers name; without one a source is numbered by its "
                        "position, 1-based.",
                    },
                    "text": {
                        "type": "string",
                        "minLength": 1,
                        "description": f"The passage or document (at most {MAX_SOURCE_BYTES:,} bytes; "
                        "long ones are cut into passages).",
                    },
                    "title": {"type": ["string", "null"]},
                    "url": {"type": ["string", "null"], "format": "uri"},
                },
            },
        },
    },
}

_CUTOFF = {"type": "number", "minimum": 0, "maximum": 1}
OPTIONS_SCHEMA: Final[Mapping[str, object]] = {
    "type": "object",
    "additionalProperties": False,
    "description": "Options of a `citations` job. Cutoffs are applied by factgate, never sent to the model; "
    "the report replays other cutoffs over the stored probabilities.",
    "properties": {
        "model": {"type": "string", "enum": sorted(KNOWN_MODELS), "default": CUTOFFS_MODEL},
        "supported_min": {**_CUTOFF, "default": 0.7},
        "weak_min": {**_CUTOFF, "default": 0.4},
        "contradicted_min": {**_CUTOFF, "default": 0.6},
        "checkable_min": {**_CUTOFF, "default": 0.5},
        "misattribution": {
            "type": "boolean",
            "default": True,
            "description": "Also ask whether each source a sentence does not cite supports it.",
        },
        "review": {
            "type": "string",
            "enum": list(REVIEWS),
            "default": "none",
            "description": "`agent`: the first 4 flagged sentences of an answer with a question get a "
            "suggested rewrite from a fresh Agent API search.",
        },
        "priority": PRIORITY_OPTION,
        "budget_usd": BUDGET_OPTION,
        "webhook_url": WEBHOOK_URL_OPTION,
        "pack_size": {**PACK_SIZE_OPTION, "default": MAX_PACK_SIZE},
        "audit_share": AUDIT_SHARE_OPTION,
        "input_format": {
            "type": "string",
            "enum": list(INPUT_FORMATS),
            "default": "auto",
            "description": "How the rows are written: factgate's own (id, answer, sources, question), RAGAS "
            "samples (user_input, response, retrieved_contexts, reference) or DeepEval test cases (input, "
            "actual_output, retrieval_context, name); `auto` decides by the first row.",
        },
        "reuse": REUSE_OPTION,
        "reuse_max_age_hours": REUSE_MAX_AGE_OPTION,
    },
}

RECIPE = register(
    Recipe(
        name="citations",
        title="Citation check",
        order=4,
        stages=(
            StageSpec(ENTRY_STAGE, "decisions", sends=False),  # it splits; the sentences send
            StageSpec(SENTENCE_STAGE, "decisions"),
            StageSpec(REWRITE_STAGE, "agent"),
            StageSpec(AUDIT_STAGE, "decisions"),
        ),
        parse_options=parse_options,
        rows_from_lines=rows_from_lines,
        rows_from_items=rows_from_items,
        result_line=CitationsResult,
        summary=CitationsSummary,
        report=CitationReport,
        csv_columns=CSV_COLUMNS,
        row_required=("id", "answer", "sources"),
        row_fields=ALLOWED_FIELDS,
        option_names=OPTION_NAMES,
        description="check your own answers against the sources they cite",
        row_schema=ROW_SCHEMA,
        options_schema=OPTIONS_SCHEMA,
        schema_names=("CitationRow", "CitationsOptions"),
        csv_refusal=CSV_REFUSAL,
    )
)
