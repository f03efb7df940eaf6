"""The `citations` kind's handlers: the answer (no upstream call: it must split), each sentence (one
Decisions request with its passages), each rewrite (the answer kind's investigation, at the job's cutoffs).

Handlers only call upstream and describe what came back as the kind's contracts; planning the next items
and labelling (at the job's cutoffs, replayable) happen in jobs/citations.py from the stored outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from checks import answers as gate
from checks.answer_labels import LabelCutoffs
from checks.answer_requests import CHECKABLE_QUESTION, contradicts_question, supports_question
from checks.citation_contracts import CitationEntry, SentencePlan, SentenceScore
from checks.citation_markers import cited_sentences
from checks.citation_passages import decisions_request
from checks.packing import AUDIT_STAGE, SentenceAnswers, pack_sentences
from clients.results import Decision
from jobs.records import ClaimedItem
from workers.answers import handle_investigation
from workers.context import WorkerContext
from workers.kinds import WorkerKind, register
from workers.outcomes import Done, Failed, Member, Outcome, PackOutcome
from workers.packed import Share, answer_pack
from workers.steps import Calls, StepError, call_facts, model_of


def handle_answer(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Accept one answer: it must split into sentences (markers alone in a first paragraph do not); the
    stage machine then plans its sentences. Nothing is sent upstream."""
    entry = CitationEntry.read(item.input)
    started = datetime.now(UTC).isoformat()
    try:
        sentences = cited_sentences(entry.answer, [s.id for s in entry.sources])
    except gate.SplitError as exc:
        error = f"the answer could not be split into sentences: {exc}"
        return Failed(error, [], {"kind": "citations", "started_at": started, "error": error})
    return Done({"kind": "citations", "started_at": started, "sentences": len(sentences)}, [])


def handle_sentence(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """One Decisions request for one sentence; every probability stored by passage key."""
    plan = SentencePlan.read(item.input)
    model = model_of(item)
    try:
        body = decisions_request(plan.claim, plan.passages, model)
    except ValueError as exc:
        return Failed(f"cannot score this sentence: {exc}")
    try:
        decision: Decision = calls.decide(body, model)
    except StepError as exc:
        return calls.failed(exc)
    answers = {name: a.noul for name, a in decision.answers.items() if a.noul is not None}
    cited = [p.key for p in plan.passages if p.role == "cited"]
    try:
        score = SentenceScore(
            checkable=answers[CHECKABLE_QUESTION],
            supports={p.key: answers[supports_question(p.key)] for p in plan.passages},
            contradicts={key: answers[contradicts_question(key)] for key in cited},
            input_tokens=decision.input_tokens,
            output_tokens=decision.output_tokens,
            model=decision.model,
            **call_facts(decision.record),
        )
    except KeyError as exc:
        error = f"unusable Decisions answer: no answer to {exc}"
        return Failed(error, calls.rows, {"error": error, "request_ids": decision.record.request_ids})
    return Done(score.dump(), calls.rows)


def handle_sentence_pack(ctx: WorkerContext, items: Sequence[ClaimedItem], calls: Calls) -> PackOutcome:
    """One Decisions request for several sentences of one answer (docs/spec.md §9.1): each sentence's
    probabilities stored on its own item, keyed as its own unpacked request keys them."""
    plans = [SentencePlan.read(i.input) for i in items]
    model = model_of(items[0])

    def member(decision: Decision, share: Share[SentenceAnswers]) -> Member:
        score = SentenceScore(
            checkable=share.answers.checkable,
            supports=share.answers.supports,
            contradicts=share.answers.contradicts,
            input_tokens=share.input_tokens,
            output_tokens=share.output_tokens,
            model=decision.model,
            **call_facts(decision.record),
        )
        return Done(score.dump())

    return answer_pack(
        calls,
        model,
        lambda: pack_sentences(plans, model),
        member,
        cannot="cannot score these sentences",
        left_out="the packed answer left out some of this sentence's questions",
    )


def handle_rewrite(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """The answer kind's investigation of one flagged sentence, its rewrite labelled at the job's cutoffs."""
    options = item.options
    cutoffs = LabelCutoffs(
        **{k: float(options[k]) for k in LabelCutoffs.__dataclass_fields__ if k in options}
    )
    return handle_investigation(ctx, item, calls, cutoffs=cutoffs)


KIND = register(
    WorkerKind(
        "citations",
        {
            "answer": handle_answer,
            "cited_sentence": handle_sentence,
            "rewrite": handle_rewrite,
            # the packing audit asks a packed sentence again in the unpacked shape
            AUDIT_STAGE: handle_sentence,
        },
        packs={"cited_sentence": handle_sentence_pack},
    )
)
