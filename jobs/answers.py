"""The `answer` job kind's application side (docs/spec.md §3): which items come next for a question, its
report, the job summary and the result lines.

A question item's output holds the Agent answer and its sentences; `sentence` children score them;
`investigation` children (the first MAX_INVESTIGATIONS flagged sentences) rewrite and rescore. The
report is rebuilt from those stored outputs only, so it can be built at any time: after a failed
investigation, after a cancel, or again after a retry. Every stored input and output is read as its
record (checks/answer_contracts.py), and the report is an `AnswerReport`.

A report never says more than happened: a question with any step that did not run to the end (a sentence
not scored, an investigation failed or never started, the job cancelled) is `incomplete` and names each
such step in `incomplete_steps`; only a question where every step ran is `done` (docs/spec.md §3.6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checks import answers as gate
from checks.answer_contracts import (
    AgentFacts,
    AgentView,
    AnswerQuestionOutput,
    AnswerReport,
    AnswerReportSummary,
    AnswerRequestIds,
    EvidencePassage,
    EvidenceRow,
    FinalAnswerView,
    FinalSentenceView,
    FinalSource,
    InvestigationInput,
    InvestigationOutput,
    InvestigationView,
    RewriteSentence,
    SentenceScores,
    SentenceSpec,
    SentenceVerdict,
)
from checks.citation_contracts import SentenceScore
from checks.contracts import IncompleteStep, QuestionInput, given_reused_from
from checks.options import CUTOFFS_MODEL, cutoffs_model_note
from checks.packing import (
    AUDIT_STAGE,
    DEFAULT_AUDIT_SHARE,
    PackPlace,
    RequestTally,
    answer_plan,
    group_sentences,
    tally_requests,
)
from checks.packing_audit import AuditPair, AuditPart, audit_part, audited
from checks.stage_steps import incomplete_step, job_model, seconds_since, step_counts, why
from jobs.intake import UnitSpec
from models import Item, Job, utcnow

SENTENCE = "sentence"
INVESTIGATION = "investigation"
AUDIT = AUDIT_STAGE  # a packed sentence asked again alone (docs/spec.md §9.6)


@dataclass(frozen=True)
class _Sentence:
    """A `sentence` child with its records: the spec it was sent and what it stored."""

    item: Item
    spec: SentenceSpec
    verdict: SentenceVerdict

    @property
    def number(self) -> int:
        return self.spec.number

    @property
    def label(self) -> str | None:
        """The sentence's label, or None when its scoring did not produce one (failed, skipped)."""
        return self.verdict.label if self.item.status == "done" and self.verdict.label else None


@dataclass(frozen=True)
class _Investigation:
    """An `investigation` child with its records."""

    item: Item
    input: InvestigationInput
    output: InvestigationOutput

    @property
    def agent(self) -> AgentFacts:
        return self.output.agent or AgentFacts()


def _question_output(question: Item) -> AnswerQuestionOutput:
    return AnswerQuestionOutput.read(question.output or {})


# --- what comes next -----------------------------------------------------------------------------------


def sentence_units(question: Item, pack_size: int = 1) -> list[UnitSpec]:
    """One `sentence` item per sentence of the answer: the claim and its passages exactly as sent; with
    `pack_size` above 1 grouped into packs as citations' sentences are (docs/spec.md §9): one request asks
    about several sentences, each still an item of its own."""
    specs = _question_output(question).sentences
    groups = group_sentences([answer_plan(s.number, s.claim, s.passages) for s in specs], pack_size)
    pack_of = {index: number for number, group in enumerate(groups) if len(group) > 1 for index in group}
    return [
        UnitSpec(
            stage=SENTENCE,
            custom_id=f"{question.custom_id}:s{spec.number}",
            mode=SENTENCE,
            input=SentenceSpec(
                number=spec.number,
                text=spec.text,
                claim=spec.claim,
                paragraph=spec.paragraph,
                source_ids=spec.source_ids,
                passages=spec.passages,
                urls=spec.urls,
                titles=spec.titles,  # stored even when the question's sentences have none
                missing_ids=spec.missing_ids,
            ).dump(),
            pack=pack_of.get(index),
        )
        for index, spec in enumerate(specs)
    ]


def audit_units(question: Item, children: Iterable[Item], audit_share: float) -> list[UnitSpec]:
    """For an audited question (`audit_share`, checks/packing_audit.py:audited; docs/spec.md §9.6), each
    packed sentence once more on its own — planned once its packs have answered, and only for packs sent
    upstream: a pack answered from the verdict store (§10) is not audited again, so a question answered
    wholly from the store sends nothing, and an edited re-run audits only its new packs."""
    if not audited(question.position, audit_share):
        return []
    return [
        UnitSpec(
            stage=AUDIT,
            custom_id=f"{question.custom_id}:a{s.number}",
            mode="audit",
            input=s.item.input,
        )
        for s in _sentences(children)
        if s.item.status == "done"
        and (place := PackPlace.of(s.item.output)) is not None
        and place.size > 1
        and s.verdict.reused_from is None
    ]


def _sentences(children: Iterable[Item]) -> list[_Sentence]:
    found = [
        _Sentence(c, SentenceSpec.read(c.input), SentenceVerdict.read(c.output or {}))
        for c in children
        if c.stage == SENTENCE
    ]
    return sorted(found, key=lambda s: s.number)


def _investigations(children: Iterable[Item]) -> dict[int, _Investigation]:
    found = (
        _Investigation(c, InvestigationInput.read(c.input), InvestigationOutput.read(c.output or {}))
        for c in children
        if c.stage == INVESTIGATION
    )
    return {i.input.sentence_number: i for i in found}


def _scored(sentences: Sequence[_Sentence]) -> list[_Sentence]:
    return [s for s in sentences if s.label is not None]


def plan(job: Job, question: Item, children: Sequence[Item]) -> list[UnitSpec]:
    """The items to create next, given every child is settled; empty means: build the report.

    No investigation starts unless every sentence was scored (`gate.review_may_start`): the run stops at
    a failed step as the reference recipe does, and the report says so.
    """
    if question.status != "done":
        return []
    sentences = _sentences(children)
    options = job.options or {}
    if not sentences:
        return sentence_units(question, int(options.get("pack_size") or 1))
    units: list[UnitSpec] = []
    if not any(c.stage == AUDIT for c in children):
        share = options.get("audit_share")
        units += audit_units(question, children, DEFAULT_AUDIT_SHARE if share is None else float(share))
    if not _investigations(children):
        units += _investigation_units(question, sentences)
    return units


def _investigation_units(question: Item, sentences: Sequence[_Sentence]) -> list[UnitSpec]:
    """The first flagged sentences' investigations, once every sentence was scored."""
    if not gate.review_may_start([s.label for s in sentences]):
        return []
    scored = _scored(sentences)
    chosen, _not_reviewed = gate.select_for_review([str(s.label) for s in scored])
    agent = _question_output(question).agent
    answer_text = str(agent.text or "") if agent is not None else ""
    asked = QuestionInput.read(question.input).question
    units: list[UnitSpec] = []
    for position in chosen:
        sentence = scored[position]
        units.append(
            UnitSpec(
                stage=INVESTIGATION,
                custom_id=f"{question.custom_id}:i{sentence.number}",
                mode=INVESTIGATION,
                input=InvestigationInput(
                    question=asked,
                    answer_text=answer_text,
                    sentence_number=sentence.number,
                    claim=sentence.spec.claim,
                    label=sentence.label,
                ).dump(),
            )
        )
    return units


# --- the report ----------------------------------------------------------------------------------------


def _scored_record(spec: SentenceSpec, scores: SentenceScores, paragraph: int) -> gate.Scored:
    assert scores.label is not None, "only scored sentences have a record"
    return gate.Scored(
        claim=spec.claim,
        paragraph=paragraph,
        label=scores.label,
        urls=spec.cited_urls(),
        input_tokens=int(scores.input_tokens or 0),
    )


def _passages(spec: SentenceSpec, scores: SentenceScores | None) -> list[EvidencePassage]:
    supports = scores.supports if scores is not None else {}
    contradicts = scores.contradicts if scores is not None else {}
    return [
        EvidencePassage(
            id=n,
            text=text,
            url=spec.urls.get(n, ""),
            title=spec.titles.get(n, ""),
            supports=supports.get(n),
            contradicts=contradicts.get(n),
        )
        for n, text in spec.passages.items()
    ]


def _evidence_row(
    spec: SentenceSpec,
    scores: SentenceScores,
    *,
    status: str,
    error: str | None,
    stored_error: str | None,
    custom_id: str,
    number: int,
    rewrite_number: int | None,
) -> EvidenceRow:
    done = status == "done" and bool(scores.label)
    return EvidenceRow(
        role="original" if rewrite_number is None else "rewrite",
        number=number,
        rewrite_number=rewrite_number,
        custom_id=custom_id,
        text=spec.text,
        claim=spec.claim,
        paragraph=spec.paragraph,
        status=status,
        label=scores.label if done else None,
        rule=scores.rule if done else None,
        checkable=scores.checkable if done else None,
        passages=_passages(spec, scores if done else None),
        missing_ids=list(spec.missing_ids),
        request_id=scores.request_id,
        request_ids=list(scores.request_ids),
        input_tokens=scores.input_tokens,
        error=error if status != "done" else stored_error,
    )


def empty_summary() -> AnswerReportSummary:
    return AnswerReportSummary.empty()


# --- steps that did not run to the end ------------------------------------------------------------------


def cancelled_step() -> IncompleteStep:
    """The entry of a question whose job was cancelled before every planned step ran."""
    return incomplete_step(
        "cancelled", "cancelled", "the job was cancelled before every step of this question ran"
    )


def _incomplete_steps(
    sentences: Sequence[_Sentence],
    investigations: Mapping[int, _Investigation],
    chosen_numbers: Sequence[int],
    flagged_numbers: Sequence[int],
    *,
    cancelled: bool,
) -> list[IncompleteStep]:
    """Every step of this question that did not run to the end, in the order the flow runs them."""
    steps: list[IncompleteStep] = []
    for s in sentences:
        if s.label is not None:
            continue
        error = s.item.error or s.verdict.error or ("no label" if s.item.status == "done" else None)
        status = "failed" if s.item.status == "done" else s.item.status
        steps.append(
            incomplete_step(
                "score",
                status,
                f"sentence {s.number} was not scored ({why(status, error)})",
                error=error,
                request_ids=s.verdict.request_ids,
                sentence=s.number,
            )
        )
    if steps and not investigations:  # the review never started (gate.review_may_start)
        flagged = ", ".join(str(n) for n in flagged_numbers) or "none so far"
        steps.append(
            incomplete_step(
                "review",
                "not_started",
                "no investigation was started, because not every sentence was scored "
                f"(flagged sentences: {flagged})",
                sentences=list(flagged_numbers),
            )
        )
    else:
        for number in chosen_numbers:
            inv = investigations.get(number)
            if inv is None:
                steps.append(
                    incomplete_step(
                        "investigate",
                        "not_started",
                        f"sentence {number} was flagged but its investigation never started",
                        sentence=number,
                    )
                )
            elif inv.item.status != "done":
                error = inv.item.error or inv.output.error
                steps.append(
                    incomplete_step(
                        "investigate",
                        inv.item.status,
                        f"the investigation of sentence {number} did not finish "
                        f"({why(inv.item.status, error)})",
                        error=error,
                        request_ids=inv.output.request_ids,
                        sentence=number,
                    )
                )
    if cancelled:
        steps.append(cancelled_step())
    return steps


def build_report(job: Job, question: Item, children: Sequence[Item], *, incomplete: bool) -> dict[str, Any]:
    """The question's report as stored (shape: docs/spec.md §6; `report` builds it)."""
    return report(job, question, children, incomplete=incomplete).dump()


def report(job: Job, question: Item, children: Sequence[Item], *, incomplete: bool) -> AnswerReport:
    """The question's report (shape: docs/spec.md §6), from stored items only.

    `incomplete` is what jobs/stages.py passes when the job was cancelled before every planned step of this
    question ran (planned items never created, or pending ones skipped by the cancel); it adds a
    `cancelled` entry to `incomplete_steps`. Every other missing step is read from the children.
    """
    now = utcnow()
    out = _question_output(question)
    asked = QuestionInput.read(question.input).question
    model = job_model(job.options)
    if question.status != "done":
        summary = empty_summary().model_copy(update={"agent_calls": 1 if question.status == "failed" else 0})
        return AnswerReport(
            kind="answer",
            question=asked,
            built_at=now.isoformat(),
            model=model,
            cutoffs_model=CUTOFFS_MODEL,
            model_note=cutoffs_model_note(model),
            agent=_agent_view(out.agent),
            errors=[],
            incomplete_steps=[],
            status="skipped" if question.status == "skipped" else "failed",
            error=question.error or out.error or question.status,
            final=None,
            evidence=[],
            summary=summary,
            request_ids=AnswerRequestIds(agent=list(out.request_ids), decisions=[]),
        )

    sentences = _sentences(children)
    investigations = _investigations(children)
    errors: list[str] = []

    # Originals that were scored, and where each sits among them (checks/ works on scored ones only).
    scored = _scored(sentences)
    position_of = {s.number: i for i, s in enumerate(scored)}
    originals = [_scored_record(s.spec, s.verdict, s.spec.paragraph) for s in scored]
    chosen, past_limit = gate.select_for_review([o.label for o in originals])
    if not investigations and not gate.review_may_start([s.label for s in sentences]):
        # The review never started, so no flagged sentence is "not reviewed" for being past the limit:
        # none was reviewed, and `incomplete_steps` says why.
        chosen, past_limit = [], []
    reviews: dict[int, gate.Review] = {p: gate.Review.not_reviewed() for p in past_limit}
    rewrites: dict[int, list[RewriteSentence]] = {}  # sentence number -> rewrite sentences
    partial_tokens = 0
    requests = _requests(scored)
    for position in chosen:
        number = scored[position].number
        inv = investigations.get(number)
        if inv is None:
            continue
        rewrite = inv.output.sentences
        rewrites[number] = rewrite
        requests += _rewrite_requests(rewrite, inv.output.reused())
        if inv.item.status == "done":
            paragraph = originals[position].paragraph
            reviews[position] = gate.Review.of(
                [_scored_record(s, s, paragraph) for s in rewrite if s.status == "done"]
            )
        else:
            done = [s for s in rewrite if s.status == "done"]
            partial_tokens += sum(int(s.input_tokens or 0) for s in done)
            errors.append(
                f"investigation of sentence {number} {inv.item.status}: {inv.item.error or ''}".rstrip(": ")
            )

    for s in sentences:
        if s.item.status != "done":
            errors.append(f"sentence {s.number} {s.item.status}: {s.item.error or ''}".rstrip(": "))

    figures = gate.summarize(originals, reviews, seconds_since(out.started_at, now))
    steps = _incomplete_steps(
        sentences,
        investigations,
        [scored[p].number for p in chosen],
        [s.number for s in scored if s.label in gate.FLAGGED_LABELS],
        cancelled=incomplete,
    )
    audited = sum(1 for c in children if c.stage == AUDIT and c.status == "done")  # always sent
    summary = AnswerReportSummary(
        sentences=len(sentences),
        investigated=figures.investigated,
        replaced=figures.replaced,
        not_confirmed=sum(1 for r in reviews.values() if r.outcome == gate.NOT_CONFIRMED),
        not_reviewed=sum(1 for r in reviews.values() if r.outcome == gate.NOT_REVIEWED),
        decisions_requests=requests.sent + audited,
        reused_requests=requests.reused,
        decisions_input_tokens=figures.decisions_input_tokens + partial_tokens,
        agent_calls=1 + sum(1 for i in investigations.values() if i.item.status in ("done", "failed")),
        seconds=round(figures.seconds, 1),
        before=dict(figures.before),
        after=dict(figures.after),
        failed_sentences=sum(1 for s in sentences if s.item.status != "done"),
        failed_investigations=sum(1 for i in investigations.values() if i.item.status != "done"),
        incomplete_steps=step_counts(steps),
    )
    audit = _audit_part(sentences, [c for c in children if c.stage == AUDIT])
    if audit is not None:
        summary = summary.model_copy(update={"packing_audit": audit})

    final = _final(
        originals,
        reviews,
        sentences=sentences,
        position_of=position_of,
        investigations=investigations,
        titles=_titles(out, investigations),
    )
    evidence = _evidence(
        question,
        sentences,
        position_of=position_of,
        reviews=reviews,
        investigations=investigations,
        rewrites=rewrites,
    )
    # A packed request answered several sentences: its id once.
    decisions_ids = list(dict.fromkeys(i for row in evidence for i in row.request_ids))
    agent_ids = list(out.request_ids)
    for inv in investigations.values():
        agent_ids += list(inv.agent.request_ids)
    return AnswerReport(
        kind="answer",
        question=asked,
        built_at=now.isoformat(),
        model=model,
        cutoffs_model=CUTOFFS_MODEL,
        model_note=cutoffs_model_note(model),
        agent=_agent_view(out.agent),
        errors=errors,
        incomplete_steps=steps,
        status="incomplete" if steps else "done",
        error=None,
        final=final,
        evidence=evidence,
        summary=summary,
        request_ids=AnswerRequestIds(agent=agent_ids, decisions=decisions_ids),
    )


def _score(verdict: SentenceVerdict) -> SentenceScore:
    return SentenceScore(
        checkable=verdict.checkable or 0.0, supports=verdict.supports, contradicts=verdict.contradicts
    )


def _audit_part(sentences: Sequence[_Sentence], audits: Sequence[Item]) -> AuditPart | None:
    """The question's packed sentences that were also asked alone, compared (checks/packing_audit.py)."""
    solo = {
        SentenceSpec.read(a.input).number: SentenceVerdict.read(a.output or {})
        for a in audits
        if a.status == "done"
    }
    pairs: list[AuditPair] = []
    for s in sentences:
        place = PackPlace.of(s.item.output)
        alone = solo.get(s.number)
        if s.label is None or place is None or alone is None or alone.label is None:
            continue
        if s.verdict.checkable is None or alone.checkable is None:
            continue
        pairs.append(
            AuditPair(
                position=place.position,
                packed=_score(s.verdict),
                solo=_score(alone),
                packed_label=s.label,
                solo_label=alone.label,
            )
        )
    return audit_part(pairs) if pairs else None


def _requests(scored: Sequence[_Sentence]) -> RequestTally:
    """Decisions requests that answered the scored sentences, sent or answered from the verdict store: a
    pack once (docs/spec.md §9.2, §10)."""
    return tally_requests([(s.item.output, s.verdict.reused_from is not None) for s in scored])


def _rewrite_requests(rewrite: Sequence[RewriteSentence], reused: Mapping[str, object]) -> RequestTally:
    """Decisions requests that answered a rewrite's scored sentences: a pack once; `reused` holds the
    investigation's requests answered from the verdict store, by original request id."""
    done = [s for s in rewrite if s.status == "done"]
    tally = RequestTally()
    packs: dict[int, bool] = {}
    for s in done:
        from_store = bool(s.request_id) and s.request_id in reused
        if s.pack is None:
            tally += RequestTally(0, 1) if from_store else RequestTally(1, 0)
        else:
            packs[s.pack.first] = from_store
    return tally + RequestTally(sum(1 for r in packs.values() if not r), sum(1 for r in packs.values() if r))


def _agent_view(agent: AgentFacts | None) -> AgentView | None:
    if agent is None:
        return None
    return AgentView(
        text=agent.text,
        request_id=agent.request_id,
        request_ids=list(agent.request_ids),
        input_tokens=agent.input_tokens,
        results=list(agent.results),
    )


def _titles(out: AnswerQuestionOutput, investigations: Mapping[int, _Investigation]) -> dict[str, str]:
    """URL -> title over every search the question made (the first title seen wins)."""
    titles: dict[str, str] = {}
    agents = [out.agent] + [i.output.agent for i in investigations.values()]
    for agent in agents:
        for result in agent.results if agent is not None else []:
            titles.setdefault(result.url, result.title)
    return titles


def _final(
    originals: Sequence[gate.Scored],
    reviews: Mapping[int, gate.Review],
    *,
    sentences: Sequence[_Sentence],
    position_of: Mapping[int, int],
    investigations: Mapping[int, _Investigation],
    titles: Mapping[str, str],
) -> FinalAnswerView:
    """The final answer, with sentences whose scoring failed kept in place (label null, "not scored").

    checks/ decides what stays and what replaces it; this only puts unscored sentences back where they
    were and numbers citations by URL in order of first appearance, as `final_answer` does.
    """
    answer = gate.final_answer(originals, reviews)
    by_origin: dict[int, list[gate.FinalSentence]] = {}
    for fs in answer.sentences:
        by_origin.setdefault(fs.origin, []).append(fs)
    numbers: dict[str, int] = {}

    def cite(urls: Iterable[str]) -> list[int]:
        return [numbers.setdefault(url, len(numbers) + 1) for url in dict.fromkeys(urls) if url]

    final: list[FinalSentenceView] = []
    for s in sentences:
        inv = investigations.get(s.number)
        inv_error = None
        if inv is not None and inv.item.status != "done":
            inv_error = inv.item.error or inv.item.status
        position = position_of.get(s.number)
        if position is None:  # scoring failed or was skipped: keep the sentence, unlabelled
            final.append(
                FinalSentenceView(
                    text=s.spec.claim,
                    paragraph=s.spec.paragraph,
                    label=None,
                    citations=cite(s.spec.cited_urls()),
                    origin=s.number,
                    replaced=False,
                    outcome=None,
                    investigation_error=None,
                )
            )
            continue
        for fs in by_origin.get(position, []):
            urls = [answer.sources[k - 1] for k in fs.citations]
            final.append(
                FinalSentenceView(
                    text=fs.claim,
                    paragraph=fs.paragraph,
                    label=fs.label,
                    citations=cite(urls),
                    origin=s.number,
                    replaced=fs.replaced,
                    outcome=gate.REPLACED if fs.replaced else fs.outcome,
                    investigation_error=inv_error,
                )
            )
    paragraphs: dict[int, list[int]] = {}
    for index, entry in enumerate(final):
        paragraphs.setdefault(entry.paragraph, []).append(index)
    return FinalAnswerView(
        sentences=final,
        paragraphs=list(paragraphs.values()),
        sources=[FinalSource(number=n, url=url, title=titles.get(url, "")) for url, n in numbers.items()],
    )


def _evidence(
    question: Item,
    sentences: Sequence[_Sentence],
    *,
    position_of: Mapping[int, int],
    reviews: Mapping[int, gate.Review],
    investigations: Mapping[int, _Investigation],
    rewrites: Mapping[int, Sequence[RewriteSentence]],
) -> list[EvidenceRow]:
    """Every scored sentence: each original, then its rewrite sentences, used or dropped."""
    rows: list[EvidenceRow] = []
    for s in sentences:
        row = _evidence_row(
            s.spec,
            s.verdict,
            status=s.item.status,
            error=s.item.error,
            stored_error=s.verdict.error,
            custom_id=s.item.custom_id,
            number=s.number,
            rewrite_number=None,
        )
        position = position_of.get(s.number)
        review = reviews.get(position) if position is not None else None
        inv = investigations.get(s.number)
        view = None
        if inv is not None:
            view = InvestigationView(
                status=inv.item.status,
                custom_id=inv.item.custom_id,
                text=inv.agent.text,
                request_id=inv.agent.request_id,
                request_ids=list(inv.agent.request_ids or inv.output.request_ids),
                error=inv.item.error if inv.item.status != "done" else None,
            )
        outcome = review.outcome if review is not None else None
        rows.append(
            row.model_copy(
                update={"outcome": outcome, "investigation": view, **given_reused_from(s.verdict.reused_from)}
            )
        )
        replaced = review is not None and review.outcome == gate.REPLACED
        reused = inv.output.reused() if inv is not None else {}
        for rewrite in rewrites.get(s.number, []):
            sub = _evidence_row(
                rewrite,
                rewrite,
                status=rewrite.status,
                error=rewrite.error,
                stored_error=rewrite.error,
                custom_id=inv.item.custom_id if inv is not None else f"{question.custom_id}:i{s.number}",
                number=s.number,
                rewrite_number=rewrite.number,
            )
            used = replaced and sub.label == "supported"
            origin = reused.get(rewrite.request_id or "")
            rows.append(sub.model_copy(update={"used": used, **given_reused_from(origin)}))
    return rows
