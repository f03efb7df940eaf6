"""The `quote` job kind's application side (docs/spec.md §4): which items come next for a question, its report
(with the run record), the job summary and the result lines.

The question item holds the search results and their sentences; `result` children rank one result
each; one `compare` child runs when every result is ranked and some candidate has has_answer ≥
COMPARE_MIN. Every step is replayed into a `checks.quotes.QuoteRunRecord`, which applies the cutoffs and
keeps every request id, so the report is rebuilt from the database alone, also after a failed request.

A report never says more than happened: a question with a rank or compare step that did not run to the
end is `incomplete`, names each such step in `incomplete_steps` and quotes nothing; only a question where
every step ran is `quoted` or `no_answer` (docs/spec.md §4.6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from checks import quotes
from checks.options import CUTOFFS_MODEL, cutoffs_model_note
from checks.pricing import DEFAULT_MODEL
from jobs.intake import UnitSpec
from models import Item, Job, utcnow

RESULT = "result"
COMPARE = "compare"


def _results(question: Item) -> list[dict[str, Any]]:
    return list((((question.output or {}).get("search") or {}).get("results")) or [])


def _ranked(children: Iterable[Item]) -> list[Item]:
    return sorted((c for c in children if c.stage == RESULT), key=lambda c: int(c.input["result"]["index"]))


def _compare(children: Iterable[Item]) -> Item | None:
    return next((c for c in children if c.stage == COMPARE), None)


def _record(job: Job, question: Item) -> quotes.QuoteRunRecord:
    record = quotes.QuoteRunRecord(
        str(question.input["question"]), str(job.options.get("model") or DEFAULT_MODEL)
    )
    search = (question.output or {}).get("search") or {}
    raw = [
        {"title": r["title"], "url": r["url"], "snippet": r["snippet"], "date": r.get("date")}
        for r in _results(question)
    ]
    record.record_search(raw, request_id=search.get("request_id"))
    return record


def _replay_ranks(record: quotes.QuoteRunRecord, ranked: Sequence[Item], errors: list[str]) -> dict[int, str]:
    """Record every rank item; returns result index → why it has no candidate, for those without one."""
    failures: dict[int, str] = {}
    for item in ranked:
        o = item.output or {}
        index = int(item.input["result"]["index"])
        tokens = o.get("input_tokens")
        if item.status == "done":
            try:
                record.record_rank(
                    index, o.get("answers") or {}, request_id=o.get("request_id"), input_tokens=tokens
                )
            except quotes.QuoteAnswerError as exc:
                failures[index] = f"unusable rank answer: {exc}"
                errors.append(f"result {index}: {exc}")
            continue
        error = item.error or o.get("error") or item.status
        record.record_rank_failure(index, str(error), request_id=o.get("request_id"), input_tokens=tokens)
        failures[index] = str(error)
        errors.append(f"result {index} {item.status}: {error}")
    return failures


def plan(job: Job, question: Item, children: Sequence[Item]) -> list[UnitSpec]:
    """The items to create next, given every child is settled; empty means: build the report."""
    if question.status != "done":
        return []
    ranked = _ranked(children)
    record = _record(job, question)
    if not ranked:
        return [
            UnitSpec(
                stage=RESULT,
                custom_id=f"{question.custom_id}:r{target.index}",
                mode=RESULT,
                input={"question": question.input["question"], "result": target.as_dict()},
            )
            for target in record.rank_targets
        ]
    if _compare(children) is not None:
        return []
    _replay_ranks(record, ranked, [])
    if not record.ranks_complete:
        # A rank failed (or, only if the data was edited, a result never got its item): the run stops
        # before the compare step, as checks.quotes.QuoteRunRecord requires; the report says incomplete.
        return []
    pool = quotes.compare_pool(record.candidates, compare_min=record.compare_min)
    if not pool:
        return []
    return [
        UnitSpec(
            stage=COMPARE,
            custom_id=f"{question.custom_id}:compare",
            mode=COMPARE,
            input={"question": question.input["question"], "candidates": [c.as_dict() for c in pool]},
        )
    ]


def _seconds(started_at: object, now: datetime) -> float:
    if not isinstance(started_at, str):
        return 0.0
    try:
        return max(0.0, (now - datetime.fromisoformat(started_at)).total_seconds())
    except ValueError:
        return 0.0


def _quote(candidate: quotes.Candidate, compare_request_id: str | None) -> dict[str, Any]:
    return {
        "text": candidate.sentence,
        "title": candidate.title,
        "url": candidate.url,
        "date": candidate.date,
        "result_index": candidate.result_index,
        "p_answers": candidate.answers,
        "has_answer": candidate.has_answer,
        "p_best": candidate.p_best,
        "confidence": candidate.confidence,
        "rank_request_id": candidate.request_id,
        "compare_request_id": compare_request_id if candidate.answers is not None else None,
    }


def empty_summary() -> dict[str, Any]:
    return {
        "decisions_requests": 0,
        "failed_requests": 0,
        "search_requests": 0,
        "input_tokens": 0,
        "seconds": 0.0,
        "incomplete_steps": {},
    }


# --- steps that did not run to the end ------------------------------------------------------------------


def _step(
    step: str,
    status: str,
    message: str,
    *,
    error: str | None = None,
    request_ids: Sequence[str] = (),
    **where: Any,
) -> dict[str, Any]:
    """One entry of `incomplete_steps` (docs/spec.md §6.5), in the answer report's shape."""
    return {
        "step": step,
        **where,
        "status": status,
        "error": error,
        "request_ids": [i for i in request_ids if i],
        "message": message,
    }


def _why(status: str, error: str | None) -> str:
    return f"{status}: {error}" if error else status


def _rank_steps(
    record: quotes.QuoteRunRecord, ranked: Sequence[Item], failures: Mapping[int, str]
) -> list[dict[str, Any]]:
    """A `rank` entry for every result that should have been ranked and was not."""
    items = {int(i.input["result"]["index"]): i for i in ranked}
    steps: list[dict[str, Any]] = []
    for target in record.rank_targets:
        item = items.get(target.index)
        if item is None:
            steps.append(
                _step(
                    "rank",
                    "not_started",
                    f"result {target.index} was never ranked",
                    result=target.index,
                )
            )
        elif target.index in failures:
            status = "failed" if item.status == "done" else item.status
            error = failures[target.index]
            steps.append(
                _step(
                    "rank",
                    status,
                    f"the rank request of result {target.index} did not finish ({_why(status, error)})",
                    error=error,
                    request_ids=(item.output or {}).get("request_ids") or [],
                    result=target.index,
                )
            )
    return steps


def _step_counts(steps: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for step in steps:
        counts[str(step["step"])] = counts.get(str(step["step"]), 0) + 1
    return counts


def build_report(job: Job, question: Item, children: Sequence[Item], *, incomplete: bool) -> dict[str, Any]:
    """The question's report (shape: docs/spec.md §6), from stored items only.

    `incomplete` is what jobs/stages.py passes when the job was cancelled before every planned step of this
    question ran; it adds a `cancelled` entry to `incomplete_steps`. Every other missing step is read from
    the children. With any entry the status is `incomplete` and nothing is quoted or offered as closest:
    the results ranked so far stay in `results`.
    """
    now = utcnow()
    out = question.output or {}
    search = out.get("search") or {}
    model = str(job.options.get("model") or DEFAULT_MODEL)  # as the workers read it (intake stores one)
    base: dict[str, Any] = {
        "kind": "quote",
        "question": question.input.get("question"),
        "built_at": now.isoformat(),
        "model": model,
        "cutoffs_model": CUTOFFS_MODEL,
        "model_note": cutoffs_model_note(model),
        "cutoffs": {"compare_min": quotes.COMPARE_MIN, "quote_min": quotes.QUOTE_MIN},
        "search": {
            "request_id": search.get("request_id") or out.get("request_id"),
            "request_ids": list(search.get("request_ids") or out.get("request_ids") or []),
            "error": None,
        },
        "errors": [],
        "incomplete_steps": [],
        "quote": None,
        "closest": None,
        "closest_by": None,
        "compare": None,
    }
    if question.status != "done":
        failure = str(question.error or out.get("error") or question.status)
        record = quotes.QuoteRunRecord(str(question.input["question"]), model)
        record.record_search_failure(failure, request_id=base["search"]["request_id"])
        summary = empty_summary()
        summary["search_requests"] = 1 if question.status == "failed" else 0
        base["search"]["error"] = failure
        return {
            **base,
            "status": "skipped" if question.status == "skipped" else "failed",
            "error": failure,
            "results": [],
            "run": record.as_dict(),
            "summary": summary,
            "request_ids": list(base["search"]["request_ids"]),
        }

    errors: list[str] = []
    record = _record(job, question)
    ranked = _ranked(children)
    failures = _replay_ranks(record, ranked, errors)
    steps = _rank_steps(record, ranked, failures)
    compare_item = _compare(children)
    compare_ids: list[str] = []
    compare_request_id: str | None = None
    if compare_item is not None:
        o = compare_item.output or {}
        compare_request_id = o.get("request_id")
        compare_ids = list(o.get("request_ids") or [])
        try:
            if compare_item.status == "done":
                record.record_compare(
                    o.get("answers") or {}, request_id=compare_request_id, input_tokens=o.get("input_tokens")
                )
            else:
                failure = str(compare_item.error or o.get("error") or compare_item.status)
                record.record_compare_failure(
                    failure, request_id=compare_request_id, input_tokens=o.get("input_tokens")
                )
                steps.append(
                    _step(
                        "compare",
                        compare_item.status,
                        f"the compare request did not finish ({_why(compare_item.status, failure)})",
                        error=failure,
                        request_ids=compare_ids,
                    )
                )
        except (ValueError, quotes.QuoteAnswerError) as exc:
            error = f"compare answer could not be applied: {exc}"
            record.record_error(error)
            steps.append(_step("compare", "failed", f"the {error}", error=str(exc), request_ids=compare_ids))
    elif not record.ranks_complete:
        message = "no compare request was sent, because not every result was ranked"
        record.record_error(message)
        steps.append(_step("compare", "not_started", message))
    elif quotes.compare_pool(record.candidates, compare_min=record.compare_min):
        message = "the compare request was never sent"
        record.record_error(message)
        steps.append(_step("compare", "not_started", message))
    if incomplete:
        message = "the job was cancelled before every step of this question ran"
        record.record_error(message)
        steps.append(_step("cancelled", "cancelled", message))

    status = "incomplete"
    outcome = None
    if not steps:
        outcome = record.outcome or record.finish()
        status = "quoted" if outcome.quoted else "no_answer"
        if outcome.answer is not None:
            base["quote"] = _quote(outcome.answer, compare_request_id)
        if outcome.closest is not None:
            base["closest"] = _quote(outcome.closest, compare_request_id)
            base["closest_by"] = outcome.closest_by
    run = record.as_dict()
    base["results"] = _result_rows(record, ranked, compare_item, failures)
    base["compare"] = _compare_table(compare_item, outcome)
    totals = run["totals"]
    return {
        **base,
        "status": status,
        "error": None,
        "errors": errors,
        "incomplete_steps": steps,
        "run": run,
        "summary": {
            "decisions_requests": int(totals["decisions_requests"]),
            "failed_requests": int(totals["failed_requests"]),
            "search_requests": 1,
            "input_tokens": int(totals["input_tokens"]),
            "seconds": round(_seconds(out.get("started_at"), now), 1),
            "incomplete_steps": _step_counts(steps),
        },
        "request_ids": _request_ids(base["search"]["request_ids"], ranked, compare_ids),
    }


def _request_ids(search_ids: Sequence[str], ranked: Sequence[Item], compare_ids: Sequence[str]) -> list[str]:
    ids = list(search_ids)
    for item in ranked:
        ids += list((item.output or {}).get("request_ids") or [])
    return [i for i in [*ids, *compare_ids] if i]


def _result_rows(
    record: quotes.QuoteRunRecord,
    ranked: Sequence[Item],
    compare_item: Item | None,
    failures: Mapping[int, str],
) -> list[dict[str, Any]]:
    items = {int(i.input["result"]["index"]): i for i in ranked}
    candidates = {c.result_index: c for c in record.candidates}
    compared: set[int] = set()
    if compare_item is not None:
        compared = {int(c["result_index"]) for c in compare_item.input.get("candidates") or []}
    rows: list[dict[str, Any]] = []
    for result in record.results:
        item = items.get(result.index)
        o = (item.output or {}) if item is not None else {}
        candidate = candidates.get(result.index)
        rows.append(
            {
                "index": result.index,
                "title": result.title,
                "url": result.url,
                "date": result.date,
                "sentence_count": len(result.sentences),
                "sentences": list(result.sentences),
                "status": item.status if item is not None else "not_ranked",
                "best": None
                if candidate is None
                else {"number": candidate.sentence_number, "text": candidate.sentence},
                "has_answer": None if candidate is None else candidate.has_answer,
                "p_best": None if candidate is None else candidate.p_best,
                "confidence": None if candidate is None else candidate.confidence,
                "probabilities": {} if candidate is None else dict(candidate.probabilities),
                "request_id": o.get("request_id"),
                "request_ids": list(o.get("request_ids") or []),
                "input_tokens": o.get("input_tokens"),
                "error": failures.get(result.index),
                "compared": result.index in compared,
            }
        )
    return rows


def _compare_table(compare_item: Item | None, outcome: quotes.QuoteOutcome | None) -> dict[str, Any] | None:
    if compare_item is None:
        return None
    o = compare_item.output or {}
    probabilities = o.get("probabilities") if compare_item.status == "done" else None
    rank: dict[int, int] = {}
    if outcome is not None:
        rank = {c.result_index: n for n, c in enumerate(outcome.ordering, start=1)}
    candidates = []
    for number, c in enumerate(compare_item.input.get("candidates") or [], start=1):
        index = int(c["result_index"])
        candidates.append(
            {
                "number": number,
                "result_index": index,
                "title": c.get("title"),
                "url": c.get("url"),
                "sentence": c.get("sentence"),
                "has_answer": c.get("has_answer"),
                "p_answers": probabilities[number - 1] if probabilities else None,
                "rank": rank.get(index),
            }
        )
    return {
        "status": compare_item.status,
        "request_id": o.get("request_id"),
        "request_ids": list(o.get("request_ids") or []),
        "input_tokens": o.get("input_tokens"),
        "error": None if compare_item.status == "done" else (compare_item.error or o.get("error")),
        "candidates": candidates,
    }
