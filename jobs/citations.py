"""The `citations` kind's application side (docs/spec.md §8): rows into entry items (in memory
or streamed through the staging table), which items come next for an answer, and its report.

An entry item holds one answer and its sources (`CitationEntry`). Its handler calls nothing upstream: it
only checks that the answer splits. `plan` then makes one `cited_sentence` item per sentence, with the
passages its request asks about (`checks/citation_passages.py:plan_sentences`, recomputed here rather
than stored on the entry item, so the passages are stored once, on the sentence item that sends them).
With `review: agent`, once every sentence is scored the first flagged ones of an answer with a question
get a `rewrite` item: the answer kind's investigation. The report is built from the stored items only and
labels every sentence at the job's cutoffs from its stored probabilities.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Unpack, cast

from sqlalchemy import CursorResult, text
from sqlalchemy.orm import Session

from checks import answers as gate
from checks.citation_contracts import (
    CitationCutoffs,
    CitationEntry,
    CitationReport,
    CitationReview,
    CitationSentence,
    SentencePlan,
    SentenceScore,
)
from checks.citation_formats import format_note
from checks.citation_passages import plan_sentences
from checks.citation_rows import CitationRow, stream_citation_rows
from checks.citation_verdicts import judge, metrics_of
from checks.contracts import IncompleteStep, ItemStatusName
from checks.kinds.citations import (
    ENTRY_STAGE,
    RECIPE,
    REWRITE_STAGE,
    SENTENCE_STAGE,
    CitationsOptions,
    rows_note,
)
from checks.ndjson import RowLine
from checks.options import CUTOFFS_MODEL, cutoffs_model_note
from checks.packing import (
    AUDIT_STAGE,
    PackPlace,
    RequestTally,
    flash_warning,
    group_sentences,
    tally_requests,
)
from checks.packing_audit import AuditPair, AuditPart, audit_part, audited
from checks.recipes import RowLimits
from checks.stage_steps import StepPlace, incomplete_step, step_counts
from jobs import bulk_load
from jobs.intake import UnitSpec
from jobs.kinds import Staged
from models import Item, Job, utcnow

__all__ = [
    "build_citation_items",
    "build_report",
    "citation_units",
    "cutoffs_of",
    "load_citation_rows",
    "plan",
]


def cutoffs_of(job: Job) -> CitationCutoffs:
    """The job's label cutoffs, as stored with its options (defaults for any not stored)."""
    options = job.options or {}
    return CitationCutoffs(**{k: float(options[k]) for k in CitationCutoffs.model_fields if k in options})


# --- intake --------------------------------------------------------------------------------------------


def _input_format(options: object) -> str:
    return str(getattr(options, "input_format", "auto"))


def citation_units(rows: Sequence[CitationRow], options: object) -> tuple[list[UnitSpec], list[str]]:
    """One entry item per answer (the in-memory path: JSON bodies, and every body on SQLite); the note on
    a RAGAS or DeepEval body is the job's warning."""
    units = [
        UnitSpec(
            stage=ENTRY_STAGE,
            custom_id=row.id,
            mode="",
            input=row.entry.dump(),
            endpoint=RECIPE.endpoint_of(ENTRY_STAGE),
        )
        for row in rows
    ]
    return units, rows_note(rows, _input_format(options)) + _warnings(options)


def _warnings(options: object) -> list[str]:
    """The intake warnings a citations job's options earn (a flash model packed)."""
    if not isinstance(options, CitationsOptions):
        return []
    flash = flash_warning(options.model, options.pack_size)
    return [flash] if flash else []


class _Stager:
    """Stages each valid row's entry input as JSON text in the COPY, counting items for the quota."""

    def __init__(self, staged: bulk_load.StagedRows, quota: Callable[[int], None]) -> None:
        self._staged = staged
        self._quota = quota
        self.items = 0
        self.head: list[CitationRow] = []  # the first row, whose format is the body's
        self.unmarked = 0

    def append(self, row: CitationRow, /) -> None:
        self.head = self.head or [row]
        self.unmarked += 1 if row.entry.unmarked else 0
        self.items += 1
        self._quota(self.items)
        self._staged.add(row.id, json.dumps(row.entry.dump(), ensure_ascii=False, separators=(",", ":")))


def load_citation_rows(
    session: Session,
    job: Job,
    options: object,
    lines: Iterable[RowLine],
    *,
    limits: RowLimits,
    quota: Callable[[int], None],
) -> Staged:
    """The streamed intake of NDJSON bodies (`jobs.kinds.StreamLoad`): each valid answer is staged as it
    is read; `build_citation_items` makes the entry items."""
    with bulk_load.StagedRows(session, job.id) as staged:
        stager = _Stager(staged, quota)
        stream_citation_rows(lines, stager, max_rows=limits.max_rows, input_format=limits.input_format)
    note = [
        format_note(r.input_format, detected=limits.input_format == "auto", answers=stager.items,
                    unmarked=stager.unmarked)
        for r in stager.head
    ]  # fmt: skip
    return Staged(rows=staged.count, items=stager.items, warnings=[n for n in note if n] + _warnings(options))


def build_citation_items(session: Session, job: Job) -> int:
    """One entry item per staged answer, its input the staged JSON (`jobs.kinds.JobKind.build`)."""
    result = session.execute(
        text(
            "INSERT INTO items (job_id, stage, position, custom_id, mode, endpoint, input, status, attempts) "
            "SELECT :job, :stage, s.row, s.id, '', 'decisions', CAST(s.body AS jsonb), 'pending', 0 "
            "FROM intake_rows s WHERE s.job_id = :job"
        ),
        {"job": job.id, "stage": ENTRY_STAGE},
    )
    return int(cast("CursorResult[Any]", result).rowcount)


# --- what comes next -----------------------------------------------------------------------------------


def _entry(item: Item) -> CitationEntry:
    return CitationEntry.read(item.input)


def _misattribution(job: Job) -> bool:
    return bool((job.options or {}).get("misattribution", True))


def _by_stage(children: Iterable[Item], stage: str) -> list[Item]:
    return sorted((c for c in children if c.stage == stage), key=lambda c: int(c.input["number"]))


def _judged(
    sentences: Sequence[Item], cutoffs: CitationCutoffs, entry: CitationEntry
) -> list[CitationSentence]:
    """Every sentence item as a report sentence: labelled at `cutoffs` when scored, else its status."""
    judged: list[CitationSentence] = []
    for item in sentences:
        plan_ = SentencePlan.read(item.input)
        if item.status == "done" and item.output:
            try:
                judged.append(judge(plan_, SentenceScore.read(item.output), cutoffs, entry.sources))
                continue
            except ValueError as exc:
                error: str | None = f"unusable Decisions answer: {exc}"
        else:
            error = item.error or str((item.output or {}).get("error") or "") or None
        judged.append(
            CitationSentence(
                number=plan_.number,
                text=plan_.text,
                claim=plan_.claim,
                paragraph=plan_.paragraph,
                status=cast("ItemStatusName", "failed" if item.status == "done" else item.status),
                error=error,
                cited=plan_.cited,
                missing=plan_.missing,
                unchecked=plan_.unchecked,
                unmarked=plan_.unmarked,
                request_ids=[str(i) for i in (item.output or {}).get("request_ids") or []],
            )
        )
    return judged


def plan(job: Job, entry_item: Item, children: Sequence[Item]) -> list[UnitSpec]:
    """The items to create next, given every child is settled; empty means: build the report."""
    if entry_item.status != "done":
        return []
    entry = _entry(entry_item)
    sentences = _by_stage(children, SENTENCE_STAGE)
    if not sentences:
        try:
            plans = plan_sentences(entry, misattribution=_misattribution(job))
        except gate.SplitError:
            return []  # the handler refused this answer already; nothing to score
        return _sentence_units(job, entry_item, plans)
    units: list[UnitSpec] = []
    if not any(c.stage == AUDIT_STAGE for c in children):
        units += _audit_units(job, entry_item, sentences)
    if not any(c.stage == REWRITE_STAGE for c in children):
        units += _rewrite_units(job, entry_item, entry, sentences)
    return units


def _rewrite_units(
    job: Job, entry_item: Item, entry: CitationEntry, sentences: Sequence[Item]
) -> list[UnitSpec]:
    """With `review: agent`, the first flagged sentences of an answer with a question, investigated."""
    if (job.options or {}).get("review") != "agent" or not entry.question:
        return []
    judged = _judged(sentences, cutoffs_of(job), entry)
    if not gate.review_may_start([s.label for s in judged]):
        return []
    chosen, _past = gate.select_for_review([str(s.label) for s in judged])
    return [
        UnitSpec(
            stage=REWRITE_STAGE,
            custom_id=f"{entry_item.custom_id}:r{judged[i].number}",
            mode="rewrite",
            input={
                "question": entry.question,
                "answer_text": entry.answer,
                "sentence_number": judged[i].number,
                "claim": judged[i].claim,
                "label": judged[i].label,
            },
        )
        for i in chosen
    ]


def _audit_units(job: Job, entry_item: Item, sentences: Sequence[Item]) -> list[UnitSpec]:
    """For an audited answer (docs/spec.md §9.4), each packed sentence once more on its own — once the
    packs have answered, and only those a pack sent upstream: a pack answered from the verdict store
    (docs/spec.md §10) is not audited again, so a job answered wholly from the store sends nothing."""
    share = float((job.options or {}).get("audit_share") or 0.0)
    if not audited(entry_item.position, share):
        return []
    sent = [
        i
        for i in sentences
        if i.status == "done"
        and (place := PackPlace.of(i.output)) is not None
        and place.size > 1
        and not (i.output or {}).get("reused_from")
    ]
    return [
        UnitSpec(
            stage=AUDIT_STAGE,
            custom_id=f"{entry_item.custom_id}:a{SentencePlan.read(i.input).number}",
            mode="audit",
            input=i.input,
        )
        for i in sent
    ]


def _sentence_units(job: Job, entry_item: Item, plans: Sequence[SentencePlan]) -> list[UnitSpec]:
    """One item per sentence, grouped into packs of the job's `pack_size` (a job stored before packing
    has none: one request each, as it was sent then)."""
    options = job.options or {}
    pack_size = int(options.get("pack_size") or 1)
    groups = group_sentences(plans, pack_size)
    units: list[UnitSpec] = []
    for number, group in enumerate(groups):
        for index in group:
            p = plans[index]
            units.append(
                UnitSpec(
                    stage=SENTENCE_STAGE,
                    custom_id=f"{entry_item.custom_id}:s{p.number}",
                    mode="sentence",
                    input=p.dump(),
                    pack=number if len(group) > 1 else None,
                )
            )
    return units


def _audit_part(
    sentences: Sequence[Item], audits: Sequence[Item], cutoffs: CitationCutoffs, entry: CitationEntry
) -> AuditPart | None:
    """The answer's packed sentences that were also asked alone, compared (checks/packing_audit.py)."""
    solo = {SentencePlan.read(a.input).number: a for a in audits if a.status == "done" and a.output}
    pairs: list[AuditPair] = []
    for item in sentences:
        plan_ = SentencePlan.read(item.input)
        place = PackPlace.of(item.output)
        alone = solo.get(plan_.number)
        if item.status != "done" or place is None or alone is None or alone.output is None:
            continue
        try:
            packed_score = SentenceScore.read(item.output)
            solo_score = SentenceScore.read(alone.output)
            pairs.append(
                AuditPair(
                    position=place.position,
                    packed=packed_score,
                    solo=solo_score,
                    packed_label=judge(plan_, packed_score, cutoffs, entry.sources).label,
                    solo_label=judge(plan_, solo_score, cutoffs, entry.sources).label,
                )
            )
        except ValueError:
            continue  # an unusable answer is reported as the sentence's own error, not compared
    return audit_part(pairs) if pairs else None


def _requests(sentences: Sequence[Item]) -> RequestTally:
    """Decisions requests that answered the scored sentences, sent or answered from the verdict store: a
    pack once, an unpacked sentence each (the report adds the audit's and the review's, always sent)."""
    return tally_requests(
        [(i.output, bool((i.output or {}).get("reused_from"))) for i in sentences if i.status == "done"]
    )


# --- the report ----------------------------------------------------------------------------------------


def _review_requests(rewrites: Iterable[Item]) -> RequestTally:
    """Decisions requests of the reviews' rewrite sentences, one a sentence (a citations rewrite is not
    packed), sent or answered from the verdict store: the rewrite's `reused_from` names the latter's ids."""
    tally = RequestTally()
    for item in rewrites:
        out: Mapping[str, object] = item.output or {}
        found = out.get("reused_from")
        origins = found if isinstance(found, list) else [found]
        reused = {str(o["request_id"]) for o in origins if isinstance(o, dict) and o.get("request_id")}
        for sentence in cast("list[object]", out.get("sentences") or []):
            if isinstance(sentence, dict):
                from_store = str(sentence.get("request_id") or "") in reused
                tally += RequestTally(0, 1) if from_store else RequestTally(1, 0)
    return tally


def _review(item: Item | None, outcome: str | None) -> CitationReview:
    """A rewrite item as the review of its sentence: outcome, the suggestion its supported sentences make."""
    if item is None:
        return CitationReview(outcome=outcome)
    out: Mapping[str, object] = item.output or {}
    rewrite = [s for s in cast("list[object]", out.get("sentences") or []) if isinstance(s, dict)]
    agent = out.get("agent")
    supported = [str(s.get("claim") or "") for s in rewrite if s.get("label") == "supported"]
    return CitationReview(
        outcome=(str(out.get("outcome")) if out.get("outcome") else None) if item.status == "done" else None,
        status=cast("ItemStatusName", item.status),
        suggestion=" ".join(supported) or None,
        rewrite=str(agent.get("text")) if isinstance(agent, dict) and agent.get("text") else None,
        sentences=[
            {
                "claim": s.get("claim"),
                "label": s.get("label"),
                "rule": s.get("rule"),
                "urls": list(cast("dict[str, str]", s.get("urls") or {}).values()),
            }
            for s in rewrite
        ],
        request_ids=[str(i) for i in cast("list[object]", out.get("request_ids") or [])],
        error=item.error if item.status != "done" else None,
    )


def _step(step: str, status: str, message: str, **place: Unpack[StepPlace]) -> IncompleteStep:
    """One entry of `incomplete_steps` (docs/spec.md §6.3), without the error and request ids the answer
    kind's entries add."""
    return incomplete_step(step, status, message, detail=False, **place)


def build_report(
    job: Job, entry_item: Item, children: Sequence[Item], *, incomplete: bool
) -> dict[str, object]:
    """The answer's report (shape: docs/spec.md §8.7), from stored items only, at the job's cutoffs."""
    entry = _entry(entry_item)
    cutoffs = cutoffs_of(job)
    options = job.options or {}
    model = str(options.get("model") or CUTOFFS_MODEL)
    head = CitationReport(
        kind="citations",
        question=entry.question,
        built_at=utcnow().isoformat(),
        model=model,
        cutoffs_model=CUTOFFS_MODEL,
        model_note=cutoffs_model_note(model),
        cutoffs=cutoffs,
        misattribution=_misattribution(job),
        review=str(options.get("review") or "none"),
        answer=entry.answer,
        sources=entry.sources,
    )
    if entry_item.status != "done":
        out = entry_item.output or {}
        failed = {
            "status": "skipped" if entry_item.status == "skipped" else "failed",
            "error": entry_item.error or str(out.get("error") or entry_item.status),
            "summary": {"sentences": 0, "cutoffs": cutoffs.dump()},
        }
        return head.model_copy(update=failed).dump()

    sentence_items = _by_stage(children, SENTENCE_STAGE)
    audit_items = _by_stage(children, AUDIT_STAGE)
    sentences = _judged(sentence_items, cutoffs, entry)
    rewrites = {int(c.input["sentence_number"]): c for c in children if c.stage == REWRITE_STAGE}
    steps: list[IncompleteStep] = [
        _step(
            "score",
            s.status,
            f"sentence {s.number} was not scored ({s.status}: {s.error})",
            sentence=s.number,
        )
        for s in sentences
        if s.label is None
    ]
    reviewing = options.get("review") == "agent" and bool(entry.question)
    outcomes: dict[int, str] = {}
    if reviewing and not steps:
        chosen, past = gate.select_for_review([str(s.label) for s in sentences])
        outcomes = {sentences[i].number: gate.NOT_REVIEWED for i in past}
        for i in chosen:
            number = sentences[i].number
            item = rewrites.get(number)
            if item is None:
                steps.append(
                    _step("review", "not_started", f"sentence {number} was flagged but not reviewed")
                )
            elif item.status != "done":
                steps.append(
                    _step(
                        "review",
                        item.status,
                        f"the review of sentence {number} did not finish",
                        sentence=number,
                    )
                )
    elif reviewing and steps:
        steps.append(_step("review", "not_started", "no review started: not every sentence was scored"))
    if incomplete:
        steps.append(
            _step("cancelled", "cancelled", "the job was cancelled before every step of this answer ran")
        )
    if reviewing:
        sentences = [
            s.model_copy(update={"review": _review(rewrites.get(s.number), outcomes.get(s.number))})
            if s.number in rewrites or s.number in outcomes
            else s
            for s in sentences
        ]
    metrics = metrics_of(sentences)
    reviews = [s.review for s in sentences if s.review is not None]
    tally = _requests(sentence_items) + _review_requests(rewrites.values())
    summary: dict[str, object] = {
        "sentences": len(sentences),
        "decisions_requests": tally.sent + sum(1 for a in audit_items if a.status == "done"),
        "reused_requests": tally.reused,
        "decisions_input_tokens": sum(s.input_tokens or 0 for s in sentences),
        "agent_calls": sum(1 for c in rewrites.values() if c.status in ("done", "failed")),
        "reviewed": sum(1 for r in reviews if r.status is not None),
        "replaced": sum(1 for r in reviews if r.outcome == gate.REPLACED),
        "not_confirmed": sum(1 for r in reviews if r.outcome == gate.NOT_CONFIRMED),
        "not_reviewed": sum(1 for r in reviews if r.outcome == gate.NOT_REVIEWED),
        "failed_sentences": sum(1 for s in sentences if s.label is None),
        "failed_reviews": sum(1 for c in rewrites.values() if c.status != "done"),
        "incomplete_steps": step_counts(steps),
        "metrics": metrics.dump(),
        "cutoffs": cutoffs.dump(),
    }
    audit = _audit_part(sentence_items, audit_items, cutoffs, entry)
    if audit is not None:
        summary["packing_audit"] = audit.dump()
    done = {
        "status": "incomplete" if steps else "done",
        "incomplete_steps": steps,
        "sentences": sentences,
        "metrics": metrics,
        "summary": summary,
        "errors": [f"sentence {s.number} {s.status}: {s.error}" for s in sentences if s.label is None],
    }
    return head.model_copy(update=done).dump()
