"""Item handlers of `quote` jobs (docs/spec.md §4): the question (one Search API call), one result (one rank
request over its sentences), the compare request over the candidates.

Each output (checks/quote_contracts.py) keeps the raw answers next to what was read from them, so jobs/
can replay the whole run into a `checks.quotes.QuoteRunRecord` (the run record of docs/spec.md §4) from
the database alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from checks import quotes
from checks.contracts import QuestionInput
from checks.packing import pack_ranks, split_count
from checks.quote_contracts import (
    CandidateRecord,
    CompareInput,
    CompareOutput,
    QuoteQuestionOutput,
    RankOutput,
    RawResult,
    ResultInput,
    SearchFacts,
    SourceRecord,
)
from checks.request_bodies import DecisionsRequest
from clients.results import Decision, SearchResponse
from jobs.records import ClaimedItem
from workers.context import WorkerContext
from workers.outcomes import AskAlone, Done, Failed, Member, Outcome, PackAnswered, PackOutcome, Transient
from workers.steps import Calls, StepError, answers_as_dicts, ask_packed, call_facts, model_of


def handle_quote_question(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Search once; keep every result with its quotable sentences."""
    started = datetime.now(UTC).isoformat()
    try:
        body = quotes.search_request(QuestionInput.read(item.input).question)
    except ValueError as exc:
        return Failed(str(exc))
    try:
        response: SearchResponse = calls.run(lambda: calls.client.search(body))
    except StepError as exc:
        return calls.failed(exc, QuoteQuestionOutput(kind="quote", started_at=started).dump())
    raw = [RawResult(title=r.title, url=r.url, snippet=r.snippet, date=r.date) for r in response.results]
    search = SearchFacts(**call_facts(response.record), id=response.id, raw_results=raw)
    output = QuoteQuestionOutput(
        kind="quote",
        started_at=started,
        search=search,
        request_id=search.request_id,
        request_ids=search.request_ids,
    )
    try:
        prepared = quotes.prepare_results([r.dump() for r in raw])
    except ValueError as exc:
        error = f"unusable search results: {exc}"
        return Failed(error, calls.rows, output.model_copy(update={"error": error}).dump())
    search = search.model_copy(update={"results": [SourceRecord.of(r) for r in prepared]})
    return Done(output.model_copy(update={"search": search}).dump(), calls.rows)


def _decide(calls: Calls, body: DecisionsRequest, model: str) -> tuple[Decision, dict[str, Any]]:
    decision: Decision = calls.decide(body, model)
    facts = {
        **call_facts(decision.record),
        "input_tokens": decision.input_tokens,
        "output_tokens": decision.output_tokens,
        "model": decision.model,
        "answers": answers_as_dicts(decision),
    }
    return decision, facts


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
        decision, facts = _decide(calls, body, model)
    except StepError as exc:
        return calls.failed(exc, RankOutput(result_index=source.index).dump())
    ranked = RankOutput(**facts, result_index=source.index)
    try:
        candidate = quotes.parse_rank_answers(source, facts["answers"], request_id=decision.record.request_id)
    except quotes.QuoteAnswerError as exc:
        error = f"unusable rank answer: {exc}"
        return Failed(error, calls.rows, ranked.model_copy(update={"error": error}).dump())
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
    facts = call_facts(decision.record)
    tokens_in = split_count(decision.input_tokens, len(items))
    tokens_out = split_count(decision.output_tokens, len(items))
    members: list[Member] = []
    for i, (source, answers) in enumerate(
        zip(sources, packed.answers_of(answers_as_dicts(decision)), strict=True)
    ):
        if answers is None:
            members.append(AskAlone("the packed answer left out this result's questions"))
            continue
        ranked = RankOutput(
            **facts,
            input_tokens=tokens_in[i],
            output_tokens=tokens_out[i],
            model=decision.model,
            answers=answers,
            result_index=source.index,
        )
        try:
            candidate = quotes.parse_rank_answers(source, answers, request_id=decision.record.request_id)
        except quotes.QuoteAnswerError as exc:
            error = f"unusable rank answer: {exc}"
            members.append(Failed(error, [], ranked.model_copy(update={"error": error}).dump()))
            continue
        members.append(Done(ranked.model_copy(update={"candidate": CandidateRecord.of(candidate)}).dump()))
    return PackAnswered(members, calls.rows)


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
        _decision, facts = _decide(calls, body, model)
    except StepError as exc:
        return calls.failed(exc)
    compared = CompareOutput(**facts)
    try:
        probabilities = quotes.parse_compare_answers(facts["answers"], len(candidates))
    except quotes.QuoteAnswerError as exc:
        error = f"unusable compare answer: {exc}"
        return Failed(error, calls.rows, compared.model_copy(update={"error": error}).dump())
    return Done(compared.model_copy(update={"probabilities": list(probabilities)}).dump(), calls.rows)
