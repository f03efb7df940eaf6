"""Item handlers of `quote` jobs (docs/spec.md §4): the question (one Search API call), one result (one rank
request over its sentences), the compare request over the candidates.

Each output keeps the raw answers next to what was read from them, so jobs/ can replay the whole run
into a `checks.quotes.QuoteRunRecord` (the run record of docs/spec.md §4) from the database alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from checks import quotes
from clients.results import Decision, SearchResponse
from jobs.records import ClaimedItem
from workers.context import WorkerContext
from workers.outcomes import Done, Failed, Outcome
from workers.steps import Calls, StepError, answers_as_dicts, call_facts, model_of


def handle_quote_question(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Search once; keep every result with its quotable sentences."""
    started = datetime.now(UTC).isoformat()
    try:
        body = quotes.search_request(str(item.input["question"]))
    except ValueError as exc:
        return Failed(str(exc))
    try:
        response: SearchResponse = calls.run(lambda: calls.client.search(body))
    except StepError as exc:
        return calls.failed(exc, {"kind": "quote", "started_at": started})
    raw = [{"title": r.title, "url": r.url, "snippet": r.snippet, "date": r.date} for r in response.results]
    facts = call_facts(response.record)
    output: dict[str, Any] = {
        "kind": "quote",
        "started_at": started,
        "search": {**facts, "id": response.id, "raw_results": raw},
        "request_id": facts["request_id"],
        "request_ids": facts["request_ids"],
    }
    try:
        prepared = quotes.prepare_results(raw)
    except ValueError as exc:
        error = f"unusable search results: {exc}"
        return Failed(error, calls.rows, {**output, "error": error})
    output["search"]["results"] = [r.as_dict() for r in prepared]
    return Done(output, calls.rows)


def _decide(calls: Calls, body: dict[str, Any], model: str) -> tuple[Decision, dict[str, Any]]:
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
    source = quotes.SourceResult.from_dict(item.input["result"])
    question = str(item.input["question"])
    try:
        body = quotes.rank_request(question, source.title, source.url, source.sentences, model)
    except ValueError as exc:
        return Failed(str(exc))
    try:
        decision, facts = _decide(calls, body, model)
    except StepError as exc:
        return calls.failed(exc, {"result_index": source.index})
    try:
        candidate = quotes.parse_rank_answers(source, facts["answers"], request_id=decision.record.request_id)
    except quotes.QuoteAnswerError as exc:
        error = f"unusable rank answer: {exc}"
        return Failed(error, calls.rows, {**facts, "result_index": source.index, "error": error})
    return Done({**facts, "result_index": source.index, "candidate": candidate.as_dict()}, calls.rows)


def handle_compare(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Ask the same yes/no of every candidate in one request, so their probabilities share one scale."""
    model = model_of(item)
    candidates = [quotes.Candidate.from_dict(c) for c in item.input["candidates"]]
    try:
        body = quotes.compare_request(str(item.input["question"]), [c.sentence for c in candidates], model)
    except ValueError as exc:
        return Failed(str(exc))
    try:
        _decision, facts = _decide(calls, body, model)
    except StepError as exc:
        return calls.failed(exc)
    try:
        probabilities = quotes.parse_compare_answers(facts["answers"], len(candidates))
    except quotes.QuoteAnswerError as exc:
        error = f"unusable compare answer: {exc}"
        return Failed(error, calls.rows, {**facts, "error": error})
    return Done({**facts, "probabilities": list(probabilities)}, calls.rows)
