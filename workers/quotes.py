"""Item handlers of `quote` jobs (docs/spec.md §4): the question (one Search API call), one result (one rank
request over its sentences), the compare request over the candidates.

Each output (checks/quote_contracts.py) keeps the raw answers next to what was read from them, so jobs/
can replay the whole run into a `checks.quotes.QuoteRunRecord` (the run record of docs/spec.md §4) from
the database alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from checks import quotes
from checks.packing import pack_ranks
from checks.quote_contracts import (
    CandidateRecord,
    CompareInput,
    CompareOutput,
    QuoteQuestionOutput,
    RankOutput,
    RawAnswers,
    RawResult,
    ResultInput,
    SearchFacts,
    SourceRecord,
)
from clients.results import Decision, SearchResponse
from jobs.records import ClaimedItem
from workers.context import WorkerContext
from workers.outcomes import Done, Failed, Member, Outcome, PackOutcome, Transient, failed_with
from workers.packed import Share, share_out
from workers.questions import Answered, ask_question
from workers.steps import Calls, StepError, answers_as_dicts, ask_packed, call_facts, model_of


def _unanswered(started_at: str) -> QuoteQuestionOutput:
    """What a question whose call did not answer keeps beside the error."""
    return QuoteQuestionOutput(kind="quote", started_at=started_at)


def handle_quote_question(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Search once; keep every result with its quotable sentences."""
    asked = ask_question(item, calls, quotes.search_request, calls.client.search, _unanswered)
    if not isinstance(asked, Answered):
        return asked
    response: SearchResponse = asked.response
    raw = [RawResult(title=r.title, url=r.url, snippet=r.snippet, date=r.date) for r in response.results]
    search = SearchFacts(**call_facts(response.record), id=response.id, raw_results=raw)
    output = QuoteQuestionOutput(
        kind="quote",
        started_at=asked.started_at,
        search=search,
        request_id=search.request_id,
        request_ids=search.request_ids,
    )
    try:
        prepared = quotes.prepare_results([r.dump() for r in raw])
    except ValueError as exc:
        return failed_with(f"unusable search results: {exc}", calls.rows, output)
    search = search.model_copy(update={"results": [SourceRecord.of(r) for r in prepared]})
    return Done(output.model_copy(update={"search": search}).dump(), calls.rows)


Facts = TypeVar("Facts", RankOutput, CompareOutput)


def _facts(
    record: type[Facts], decision: Decision, answers: RawAnswers, tokens: tuple[int, int] | None = None
) -> Facts:
    """A Decisions request's part of a stage's output: the call's facts, its tokens (a packed result's
    share when `tokens` is given), the model and the raw answers, in their stored order."""
    input_tokens, output_tokens = tokens or (decision.input_tokens, decision.output_tokens)
    return record(
        **call_facts(decision.record),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        model=decision.model,
        answers=answers,
    )


def _decide(calls: Calls, body: Mapping[str, object], model: str) -> tuple[Decision, RawAnswers]:
    decision: Decision = calls.decide(body, model)
    return decision, answers_as_dicts(decision)


def handle_result(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Rank one result's sentences: which answers best, and does any answer at all."""
    model = model_of(item)
    task = ResultInput.read(item.input)
    source = task.result.value()
    try:
        body = quotes.rank_request(task.question, source.title, source.url, source.sentences, model)
    except ValueError as exc:
        return Failed(str(exc))
    try:
        decision, answers = _decide(calls, body, model)
    except StepError as exc:
        return calls.failed(exc, RankOutput(result_index=source.index).dump())
    ranked = _facts(RankOutput, decision, answers).model_copy(update={"result_index": source.index})
    try:
        candidate = quotes.parse_rank_answers(source, answers, request_id=decision.record.request_id)
    except quotes.QuoteAnswerError as exc:
        return failed_with(f"unusable rank answer: {exc}", calls.rows, ranked)
    done = ranked.model_copy(update={"candidate": CandidateRecord.of(candidate)})
    return Done(done.dump(), calls.rows)


def handle_result_pack(ctx: WorkerContext, items: Sequence[ClaimedItem], calls: Calls) -> PackOutcome:
    """Rank several results of one question in one request (docs/spec.md §9): each result keeps its own
    choice and yes/no pair, and its item stores them named as its unpacked rank request names them, with
    its share of the request's tokens; a result whose answers are missing is asked again alone."""
    model = model_of(items[0])
    tasks = [ResultInput.read(i.input) for i in items]
    sources = [t.result.value() for t in tasks]
    try:
        packed = pack_ranks(tasks[0].question, sources, model)
    except ValueError as exc:
        return Failed(str(exc))
    asked = ask_packed(calls, packed.body, model)
    if isinstance(asked, Failed | Transient):
        return asked
    decision = asked[0]

    def member(share: Share[RawAnswers]) -> Member:
        source = sources[share.index]
        tokens = (share.input_tokens, share.output_tokens)
        ranked = _facts(RankOutput, decision, share.answers, tokens).model_copy(
            update={"result_index": source.index}
        )
        try:
            candidate = quotes.parse_rank_answers(
                source, share.answers, request_id=decision.record.request_id
            )
        except quotes.QuoteAnswerError as exc:
            return failed_with(f"unusable rank answer: {exc}", [], ranked)
        return Done(ranked.model_copy(update={"candidate": CandidateRecord.of(candidate)}).dump())

    answers = packed.answers_of(answers_as_dicts(decision))
    return share_out(
        calls, decision, answers, member, left_out="the packed answer left out this result's questions"
    )


def handle_compare(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Ask the same yes/no of every candidate in one request, so their probabilities share one scale."""
    model = model_of(item)
    task = CompareInput.read(item.input)
    candidates = [c.value() for c in task.candidates]
    try:
        body = quotes.compare_request(task.question, [c.sentence for c in candidates], model)
    except ValueError as exc:
        return Failed(str(exc))
    try:
        decision, answers = _decide(calls, body, model)
    except StepError as exc:
        return calls.failed(exc)
    compared = _facts(CompareOutput, decision, answers)
    try:
        probabilities = quotes.parse_compare_answers(answers, len(candidates))
    except quotes.QuoteAnswerError as exc:
        return failed_with(f"unusable compare answer: {exc}", calls.rows, compared)
    return Done(compared.model_copy(update={"probabilities": list(probabilities)}).dump(), calls.rows)
