"""Item handlers of `answer` jobs (docs/spec.md §3): the question (one Agent API call, split and cited), one
sentence (one Decisions request, labelled), one investigation (another Agent call for a flagged sentence,
then one Decisions request per rewrite sentence).

Handlers only call upstream and describe what came back; creating the next stage's items and building
the report happen in jobs/ (`jobs.stages.advance_question`) from the stored outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from checks import answers as gate
from checks.answer_labels import DEFAULT_CUTOFFS, LabelCutoffs
from clients.results import AgentAnswer, Decision, SearchResult
from jobs.records import ClaimedItem
from workers.context import WorkerContext
from workers.outcomes import Done, Failed, Outcome
from workers.steps import Calls, StepError, answers_as_dicts, call_facts, model_of


def agent_results(answer: AgentAnswer) -> list[dict[str, Any]]:
    """The search results a `[n]` marker can point at, as plain dicts, in the order returned."""
    return [_result_dict(r) for r in answer.results if r.id is not None]


def _result_dict(result: SearchResult) -> dict[str, Any]:
    return {
        "id": result.id,
        "url": result.url,
        "title": result.title,
        "snippet": result.snippet,
        "date": result.date,
    }


def sentence_specs(text: str, results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Split an Agent answer and map each sentence's markers to the passages it will be scored against.

    Raises `gate.SplitError` when some text belongs to no sentence (never dropped silently).
    """
    titles = {str(r["id"]): str(r.get("title") or "") for r in results}
    specs: list[dict[str, Any]] = []
    for number, sentence in enumerate(gate.split_sentences(text), start=1):
        cited = gate.cite_passages(sentence.source_ids, results)
        specs.append(
            {
                "number": number,
                "text": sentence.text,
                "claim": sentence.claim,
                "paragraph": sentence.paragraph,
                "source_ids": list(sentence.source_ids),
                "passages": cited.passages,
                "urls": cited.urls,
                "titles": {n: titles.get(n, "") for n in cited.passages},
                "missing_ids": list(cited.missing_ids),
            }
        )
    return specs


def _agent_facts(answer: AgentAnswer) -> dict[str, Any]:
    return {
        **call_facts(answer.record),
        "text": answer.text,
        "model": answer.model,
        "input_tokens": answer.input_tokens,
        "output_tokens": answer.output_tokens,
        "results": agent_results(answer),
    }


def score_sentence(
    calls: Calls, spec: Mapping[str, Any], model: str, cutoffs: LabelCutoffs = DEFAULT_CUTOFFS
) -> dict[str, Any]:
    """One Decisions request for one sentence; its probabilities, label and rule, with request ids.
    `cutoffs` are the label policy's (the answer kind's fixed ones unless a citations job reviews)."""
    passages = {str(k): str(v) for k, v in (spec.get("passages") or {}).items()}
    try:
        body = gate.sentence_request(str(spec["claim"]), passages, model)
    except ValueError as exc:
        raise StepError(f"cannot score this sentence: {exc}", retryable=False) from None
    decision: Decision = calls.decide(body, model)
    answers = answers_as_dicts(decision)
    probabilities = {name: float(a["noul"]) for name, a in answers.items() if "noul" in a}
    try:
        result = gate.label_sentence(
            probabilities, passages.keys(), spec.get("missing_ids") or (), cutoffs=cutoffs
        )
    except ValueError as exc:
        raise StepError(
            f"unusable Decisions answer: {exc}",
            retryable=False,
            request_ids=decision.record.request_ids,
        ) from None
    return {
        **call_facts(decision.record),
        "label": result.label,
        "rule": result.rule,
        "checkable": result.checkable,
        "supports": {n: probabilities[gate.supports_question(n)] for n in passages},
        "contradicts": {n: probabilities[gate.contradicts_question(n)] for n in passages},
        "best_support": result.best_support,
        "best_passage": result.best_passage,
        "max_contradiction": result.max_contradiction,
        "contradicting_passage": result.contradicting_passage,
        "answers": probabilities,
        "input_tokens": decision.input_tokens,
        "output_tokens": decision.output_tokens,
        "model": decision.model,
    }


def handle_answer_question(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Ask the Agent API; store its text, results and the sentences to score (with their passages)."""
    started = datetime.now(UTC).isoformat()
    try:
        body = gate.answer_request(str(item.input["question"]))
    except ValueError as exc:
        return Failed(str(exc))
    try:
        answer: AgentAnswer = calls.run(lambda: calls.client.agent(body))
    except StepError as exc:
        return calls.failed(exc, {"kind": "answer", "started_at": started})
    agent = _agent_facts(answer)
    output: dict[str, Any] = {
        "kind": "answer",
        "started_at": started,
        "agent": agent,
        "request_id": agent["request_id"],
        "request_ids": agent["request_ids"],
    }
    try:
        output["sentences"] = sentence_specs(answer.text, agent["results"])
    except gate.SplitError as exc:
        error = f"the answer could not be split into sentences: {exc}"
        return Failed(error, calls.rows, {**output, "error": error})
    return Done(output, calls.rows)


def handle_sentence(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    """Score one sentence of the answer against the passages it cites."""
    try:
        output = score_sentence(calls, item.input, model_of(item))
    except StepError as exc:
        return calls.failed(exc)
    return Done(output, calls.rows)


def handle_investigation(
    ctx: WorkerContext, item: ClaimedItem, calls: Calls, *, cutoffs: LabelCutoffs = DEFAULT_CUTOFFS
) -> Outcome:
    """Search again for one flagged sentence and score every sentence of the rewrite.

    Everything done before a failure stays in the failed item's output (the rewrite text, the sentences
    already scored, every request id), so the report can show it.
    """
    model = model_of(item)
    inp = item.input
    output: dict[str, Any] = {"sentence_number": inp.get("sentence_number"), "agent": None, "sentences": []}
    try:
        body = gate.investigation_request(str(inp["question"]), str(inp["answer_text"]), str(inp["claim"]))
    except ValueError as exc:
        return Failed(str(exc))
    try:
        answer: AgentAnswer = calls.run(lambda: calls.client.agent(body))
    except StepError as exc:
        return calls.failed(exc, output)
    agent = _agent_facts(answer)
    output["agent"] = agent
    try:
        specs = sentence_specs(answer.text, agent["results"])
    except gate.SplitError as exc:
        error = f"the rewrite could not be split into sentences: {exc}"
        return Failed(error, calls.rows, {**output, "error": error, "request_ids": _all_ids(output)})
    for spec in specs:
        try:
            scored = score_sentence(calls, spec, model, cutoffs)
        except StepError as exc:
            output["sentences"].append(
                {**spec, "status": "failed", "error": str(exc), "request_ids": exc.request_ids}
            )
            output["request_ids"] = _all_ids(output)
            return calls.failed(exc, output)
        output["sentences"].append({**spec, **scored, "status": "done", "error": None})
    output["outcome"] = gate.review_outcome(s["label"] for s in output["sentences"])
    output["request_id"] = agent["request_id"]
    output["request_ids"] = _all_ids(output)
    return Done(output, calls.rows)


def _all_ids(output: Mapping[str, Any]) -> list[str]:
    """Every request id of an investigation: the Agent call's, then each rewrite sentence's."""
    ids: list[str] = list((output.get("agent") or {}).get("request_ids") or [])
    for sentence in output.get("sentences") or []:
        ids += [i for i in sentence.get("request_ids") or [] if i]
    return ids
