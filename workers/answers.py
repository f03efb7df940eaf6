"""Item handlers of `answer` jobs (docs/spec.md §3): the question (one Agent API call, split and cited), one
sentence (one Decisions request, labelled), one investigation (another Agent call for a flagged sentence,
then one Decisions request per rewrite sentence).

Handlers only call upstream and describe what came back as the kind's records (checks/answer_contracts.py);
creating the next stage's items and building the report happen in jobs/ (`jobs.stages.advance_question`)
from the stored outputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from checks import answers as gate
from checks.answer_contracts import (
    AgentFacts,
    AgentResult,
    AnswerQuestionOutput,
    InvestigationInput,
    InvestigationOutput,
    RewritePack,
    RewriteSentence,
    SentenceSpec,
    SentenceVerdict,
)
from checks.answer_labels import DEFAULT_CUTOFFS, LabelCutoffs
from checks.packing import answer_plan, group_sentences, pack_sentences, split_count, unpacked_answers
from clients.results import AgentAnswer, Decision
from jobs.records import ClaimedItem
from workers.context import WorkerContext
from workers.outcomes import (
    AskAlone,
    Done,
    Failed,
    Member,
    Outcome,
    PackAnswered,
    PackOutcome,
    Transient,
    failed_with,
)
from workers.questions import Answered, ask_question
from workers.steps import Calls, StepError, answers_as_dicts, call_facts, model_of


def agent_results(answer: AgentAnswer) -> list[AgentResult]:
    """The search results a `[n]` marker can point at, in the order returned."""
    return [
        AgentResult(id=r.id, url=r.url, title=r.title, snippet=r.snippet, date=r.date)
        for r in answer.results
        if r.id is not None
    ]


def split_answer(text: str, results: Sequence[AgentResult]) -> list[SentenceSpec]:
    """Split an Agent answer and map each sentence's markers to the passages it will be scored against.

    Raises `gate.SplitError` when some text belongs to no sentence (never dropped silently).
    """
    plain = [r.dump() for r in results]
    titles = {str(r.id): r.title for r in results}
    specs: list[SentenceSpec] = []
    for number, sentence in enumerate(gate.split_sentences(text), start=1):
        cited = gate.cite_passages(sentence.source_ids, plain)
        specs.append(
            SentenceSpec(
                number=number,
                text=sentence.text,
                claim=sentence.claim,
                paragraph=sentence.paragraph,
                source_ids=list(sentence.source_ids),
                passages=cited.passages,
                urls=cited.urls,
                titles={n: titles.get(n, "") for n in cited.passages},
                missing_ids=list(cited.missing_ids),
            )
        )
    return specs


def sentence_specs(text: str, results: Sequence[Mapping[str, object]]) -> list[dict[str, JsonValue]]:
    """`split_answer` over search results as stored (JSON), giving the sentences as stored."""
    return [s.dump() for s in split_answer(text, [AgentResult.read(r) for r in results])]


def _agent_facts(answer: AgentAnswer) -> AgentFacts:
    return AgentFacts(
        **call_facts(answer.record),
        text=answer.text,
        model=answer.model,
        input_tokens=answer.input_tokens,
        output_tokens=answer.output_tokens,
        results=agent_results(answer),
    )


def verdict_of(
    spec: SentenceSpec,
    probabilities: Mapping[str, float],
    decision: Decision,
    cutoffs: LabelCutoffs = DEFAULT_CUTOFFS,
    *,
    tokens: tuple[int | None, int | None] | None = None,
) -> SentenceVerdict:
    """One sentence's verdict from its probabilities, named as its unpacked request names them (a packed
    sentence's are renamed so: checks/packing.py:unpacked_answers); `tokens` is its share of a packed
    request's (input, output) tokens. Raises StepError when an answer it needs is missing."""
    passages = dict(spec.passages)
    try:
        result = gate.label_sentence(probabilities, passages.keys(), spec.missing_ids, cutoffs=cutoffs)
    except ValueError as exc:
        raise StepError(
            f"unusable Decisions answer: {exc}",
            retryable=False,
            request_ids=decision.record.request_ids,
        ) from None
    input_tokens, output_tokens = tokens or (decision.input_tokens, decision.output_tokens)
    return SentenceVerdict(
        **call_facts(decision.record),
        label=result.label,
        rule=result.rule,
        checkable=result.checkable,
        supports={n: probabilities[gate.supports_question(n)] for n in passages},
        contradicts={n: probabilities[gate.contradicts_question(n)] for n in passages},
        best_support=result.best_support,
        best_passage=result.best_passage,
        max_contradiction=result.max_contradiction,
        contradicting_passage=result.contradicting_passage,
        answers=dict(probabilities),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        model=decision.model,
    )


def score_sentence(
    calls: Calls, spec: SentenceSpec, model: str, cutoffs: LabelCutoffs = DEFAULT_CUTOFFS
) -> SentenceVerdict:
    """One Decisions request for one sentence; its probabilities, label and rule, with request ids.
    `cutoffs` are the label policy's (the answer kind's fixed ones unless a citations job reviews)."""
    try:
        body = gate.sentence_request(spec.claim, dict(spec.passages), model)
    except ValueError as exc:
        raise StepError(f"cannot score this sentence: {exc}", retryable=False) from None
    decision: Decision = calls.decide(body, model)
    answers = answers_as_dicts(decision)
    probabilities = {name: float(a["noul"]) for name, a in answers.items() if "noul" in a}
    return verdict_of(spec, probabilities, decision, cutoffs)


@dataclass(frozen=True)
class PackScores:
    """What one packed request said of each of its sentences: a verdict, or None for a sentence whose
    answers did not all come back (it is asked again on its own)."""

    decision: Decision
    verdicts: list[SentenceVerdict | StepError | None]


def score_pack(
    calls: Calls, specs: Sequence[SentenceSpec], model: str, cutoffs: LabelCutoffs = DEFAULT_CUTOFFS
) -> PackScores:
    """One Decisions request for several sentences of one answer (docs/spec.md §9.1, the citations kind's
    packed shape); each sentence labelled from its own answers, its tokens a share of the request's.
    Raises StepError when the request itself failed."""
    try:
        packed = pack_sentences([answer_plan(s.number, s.claim, s.passages) for s in specs], model)
    except ValueError as exc:
        raise StepError(f"cannot score these sentences: {exc}", retryable=False) from None
    decision: Decision = calls.decide(packed.body, model, partial=True)
    answers = {name: a.noul for name, a in decision.answers.items() if a.noul is not None}
    tokens_in = split_count(decision.input_tokens, len(specs))
    tokens_out = split_count(decision.output_tokens, len(specs))
    verdicts: list[SentenceVerdict | StepError | None] = []
    for i, (spec, got) in enumerate(zip(specs, packed.answers_of(answers), strict=True)):
        if got is None:
            verdicts.append(None)
            continue
        try:
            verdicts.append(
                verdict_of(
                    spec, unpacked_answers(got), decision, cutoffs, tokens=(tokens_in[i], tokens_out[i])
                )
            )
        except StepError as exc:
            verdicts.append(exc)
    return PackScores(decision, verdicts)


def _unanswered(started_at: str) -> AnswerQuestionOutput:
    """What a question whose call did not answer keeps beside the error."""
    return AnswerQuestionOutput(kind="answer", started_at=started_at)


def handle_answer_question(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Ask the Agent API; store its text, results and the sentences to score (with their passages)."""
    asked = ask_question(item, calls, gate.answer_request, calls.client.agent, _unanswered)
    if not isinstance(asked, Answered):
        return asked
    answer: AgentAnswer = asked.response
    agent = _agent_facts(answer)
    output = AnswerQuestionOutput(
        kind="answer",
        started_at=asked.started_at,
        agent=agent,
        request_id=agent.request_id,
        request_ids=agent.request_ids,
    )
    try:
        specs = split_answer(answer.text, agent.results)
    except gate.SplitError as exc:
        return failed_with(f"the answer could not be split into sentences: {exc}", calls.rows, output)
    return Done(output.model_copy(update={"sentences": specs}).dump(), calls.rows)


def handle_sentence(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Score one sentence of the answer against the passages it cites."""
    try:
        output = score_sentence(calls, SentenceSpec.read(item.input), model_of(item))
    except StepError as exc:
        return calls.failed(exc)
    return Done(output.dump(), calls.rows)


def handle_sentence_pack(ctx: WorkerContext, items: Sequence[ClaimedItem], calls: Calls) -> PackOutcome:
    """Score several sentences of one answer in one request, each stored on its own item as an unpacked
    sentence's verdict; a sentence whose answers are missing is asked again alone."""
    specs = [SentenceSpec.read(i.input) for i in items]
    try:
        scores = score_pack(calls, specs, model_of(items[0]))
    except StepError as exc:
        outcome = calls.failed(exc)
        assert isinstance(outcome, Failed | Transient)
        return outcome
    members: list[Member] = []
    for verdict in scores.verdicts:
        if verdict is None:
            members.append(AskAlone("the packed answer left out some of this sentence's questions"))
        elif isinstance(verdict, StepError):
            output: dict[str, object] = {"error": str(verdict), "request_ids": verdict.request_ids}
            members.append(Failed(str(verdict), [], output))
        else:
            members.append(Done(verdict.dump()))
    return PackAnswered(members, calls.rows)


def _score_rewrite(
    calls: Calls, specs: Sequence[SentenceSpec], model: str, cutoffs: LabelCutoffs, pack_size: int
) -> Iterator[tuple[SentenceSpec, SentenceVerdict | StepError, RewritePack | None]]:
    """Score a rewrite's sentences in order, `pack_size` to a request (grouped as an answer's sentences
    are); a sentence a packed answer left out is asked again alone. The caller stops at the first error."""
    groups = group_sentences([answer_plan(s.number, s.claim, s.passages) for s in specs], pack_size)
    for group in groups:
        members = [specs[i] for i in group]
        if len(members) == 1:
            try:
                yield members[0], score_sentence(calls, members[0], model, cutoffs), None
            except StepError as exc:
                yield members[0], exc, None
            continue
        try:
            scores = score_pack(calls, members, model, cutoffs)
        except StepError as exc:
            yield members[0], exc, None
            continue
        first, size = members[0].number, len(members)
        for position, (spec, verdict) in enumerate(zip(members, scores.verdicts, strict=True)):
            if verdict is not None:
                yield spec, verdict, RewritePack(first=first, size=size, position=position)
                continue
            try:
                yield spec, score_sentence(calls, spec, model, cutoffs), None
            except StepError as exc:
                yield spec, exc, None


def handle_investigation(
    ctx: WorkerContext,
    item: ClaimedItem,
    calls: Calls,
    *,
    cutoffs: LabelCutoffs = DEFAULT_CUTOFFS,
    pack_size: int = 1,
) -> Outcome:
    """Search again for one flagged sentence and score every sentence of the rewrite, `pack_size`
    sentences to a Decisions request.

    Everything done before a failure stays in the failed item's output (the rewrite text, the sentences
    already scored, every request id), so the report can show it.
    """
    model = model_of(item)
    inp = InvestigationInput.read(item.input)
    output = InvestigationOutput(sentence_number=inp.sentence_number, agent=None, sentences=[])
    try:
        body = gate.investigation_request(inp.question, inp.answer_text, inp.claim)
    except ValueError as exc:
        return Failed(str(exc))
    try:
        answer: AgentAnswer = calls.run(lambda: calls.client.agent(body))
    except StepError as exc:
        return calls.failed(exc, output.dump())
    agent = _agent_facts(answer)
    output = output.model_copy(update={"agent": agent})
    try:
        specs = split_answer(answer.text, agent.results)
    except gate.SplitError as exc:
        error = f"the rewrite could not be split into sentences: {exc}"
        failed = output.model_copy(update={"error": error, "request_ids": _all_ids(output)})
        return Failed(error, calls.rows, failed.dump())
    sentences: list[RewriteSentence] = []
    for spec, scored, pack in _score_rewrite(calls, specs, model, cutoffs, pack_size):
        if isinstance(scored, StepError):
            sentences.append(
                RewriteSentence(
                    **spec.dump(), status="failed", error=str(scored), request_ids=scored.request_ids
                )
            )
            output = output.model_copy(update={"sentences": sentences})
            output = output.model_copy(update={"request_ids": _all_ids(output)})
            return calls.failed(scored, output.dump())
        sentence = RewriteSentence(**spec.dump(), **scored.dump(), status="done", error=None)
        sentences.append(sentence.model_copy(update={"pack": pack}) if pack is not None else sentence)
    output = output.model_copy(
        update={
            "sentences": sentences,
            "outcome": gate.review_outcome(s.label for s in sentences if s.label is not None),
            "request_id": agent.request_id,
        }
    )
    output = output.model_copy(update={"request_ids": _all_ids(output)})
    return Done(output.dump(), calls.rows)


def handle_answer_investigation(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """An answer job's investigation: its rewrite's sentences packed as the job packs its sentences."""
    return handle_investigation(ctx, item, calls, pack_size=int(item.options.get("pack_size") or 1))


def _all_ids(output: InvestigationOutput) -> list[str]:
    """Every request id of an investigation: the Agent call's, then each rewrite sentence's."""
    ids: list[str] = list(output.agent.request_ids if output.agent is not None else [])
    for sentence in output.sentences:
        ids += [i for i in sentence.request_ids if i]
    return ids
