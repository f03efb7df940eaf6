"""The `quote` job kind's application side (docs/spec.md §4): which items come next for a question, its report
(with the run record), the job summary and the result lines.

The question item holds the search results and their sentences; `result` children rank one result
each; one `compare` child runs when every result is ranked and some candidate has has_answer ≥
COMPARE_MIN. Every step is replayed into a `checks.quotes.QuoteRunRecord`, which applies the cutoffs and
keeps every request id, so the report is rebuilt from the database alone, also after a failed request.
Every stored input and output is read as its record (checks/quote_contracts.py), and the report is a
`QuoteReport`.

A report never says more than happened: a question with a rank or compare step that did not run to the
end is `incomplete`, names each such step in `incomplete_steps` and quotes nothing; only a question where
every step ran is `quoted` or `no_answer` (docs/spec.md §4.6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checks import quotes
from checks.contracts import IncompleteStep, QuestionInput, given_reused_from
from checks.options import CUTOFFS_MODEL, cutoffs_model_note
from checks.packing import PackPlace, tally_requests
from checks.quote_contracts import (
    CandidateRecord,
    CompareInput,
    CompareOutput,
    CompareRow,
    CompareTable,
    QuoteCutoffs,
    QuoteQuestionOutput,
    QuoteReport,
    QuoteReportSummary,
    QuoteRun,
    QuoteStatus,
    QuoteView,
    RankOutput,
    ResultInput,
    ResultRow,
    SearchFacts,
    SearchView,
    SentenceChoice,
    SourceRecord,
)
from checks.stage_steps import incomplete_step, job_model, seconds_since, step_counts, why
from jobs.intake import UnitSpec
from models import Item, Job, utcnow

RESULT = "result"
COMPARE = "compare"


@dataclass(frozen=True)
class _Rank:
    """A `result` child with its records."""

    item: Item
    input: ResultInput
    output: RankOutput

    @property
    def index(self) -> int:
        return self.input.result.index


@dataclass(frozen=True)
class _Compare:
    """The `compare` child with its records."""

    item: Item
    input: CompareInput
    output: CompareOutput


def _question_output(question: Item) -> QuoteQuestionOutput:
    return QuoteQuestionOutput.read(question.output or {})


def _search(out: QuoteQuestionOutput) -> SearchFacts:
    return out.search or SearchFacts()


def _ranked(children: Iterable[Item]) -> list[_Rank]:
    found = [
        _Rank(c, ResultInput.read(c.input), RankOutput.read(c.output or {}))
        for c in children
        if c.stage == RESULT
    ]
    return sorted(found, key=lambda r: r.index)


def _compare(children: Iterable[Item]) -> _Compare | None:
    item = next((c for c in children if c.stage == COMPARE), None)
    if item is None:
        return None
    return _Compare(item, CompareInput.read(item.input), CompareOutput.read(item.output or {}))


def _record(job: Job, question: Item) -> quotes.QuoteRunRecord:
    record = quotes.QuoteRunRecord(QuestionInput.read(question.input).question, job_model(job.options))
    search = _search(_question_output(question))
    raw = [{"title": r.title, "url": r.url, "snippet": r.snippet, "date": r.date} for r in search.results]
    record.record_search(raw, request_id=search.request_id)
    return record


def _answers(output: RankOutput | CompareOutput) -> dict[str, Any]:
    """The raw answers as the run record reads them (the API's JSON)."""
    return dict(output.answers)


def _replay_ranks(
    record: quotes.QuoteRunRecord, ranked: Sequence[_Rank], errors: list[str]
) -> dict[int, str]:
    """Record every rank item; returns result index → why it has no candidate, for those without one."""
    failures: dict[int, str] = {}
    for rank in ranked:
        o = rank.output
        if rank.item.status == "done":
            try:
                record.record_rank(
                    rank.index, _answers(o), request_id=o.request_id, input_tokens=o.input_tokens
                )
            except quotes.QuoteAnswerError as exc:
                failures[rank.index] = f"unusable rank answer: {exc}"
                errors.append(f"result {rank.index}: {exc}")
            continue
        error = rank.item.error or o.error or rank.item.status
        record.record_rank_failure(rank.index, error, request_id=o.request_id, input_tokens=o.input_tokens)
        failures[rank.index] = error
        errors.append(f"result {rank.index} {rank.item.status}: {error}")
    return failures


def plan(job: Job, question: Item, children: Sequence[Item]) -> list[UnitSpec]:
    """The items to create next, given every child is settled; empty means: build the report."""
    if question.status != "done":
        return []
    ranked = _ranked(children)
    record = _record(job, question)
    asked = QuestionInput.read(question.input).question
    if not ranked:
        # With `pack_size` above 1 the question's rank requests go in packs of that many results
        # (docs/spec.md §9); each result is still an item of its own.
        pack_size = int((job.options or {}).get("pack_size") or 1)
        targets = record.rank_targets
        return [
            UnitSpec(
                stage=RESULT,
                custom_id=f"{question.custom_id}:r{target.index}",
                mode=RESULT,
                input=ResultInput(question=asked, result=SourceRecord.of(target)).dump(),
                pack=n // pack_size if pack_size > 1 and len(targets) > 1 else None,
            )
            for n, target in enumerate(targets)
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
            input=CompareInput(question=asked, candidates=[CandidateRecord.of(c) for c in pool]).dump(),
        )
    ]


def _quote(candidate: quotes.Candidate, compare_request_id: str | None) -> QuoteView:
    return QuoteView(
        text=candidate.sentence,
        title=candidate.title,
        url=candidate.url,
        date=candidate.date,
        result_index=candidate.result_index,
        p_answers=candidate.answers,
        has_answer=candidate.has_answer,
        p_best=candidate.p_best,
        confidence=candidate.confidence,
        rank_request_id=candidate.request_id,
        compare_request_id=compare_request_id if candidate.answers is not None else None,
    )


def empty_summary() -> QuoteReportSummary:
    return QuoteReportSummary.empty()


# --- steps that did not run to the end ------------------------------------------------------------------


def _rank_steps(
    record: quotes.QuoteRunRecord, ranked: Sequence[_Rank], failures: Mapping[int, str]
) -> list[IncompleteStep]:
    """A `rank` entry for every result that should have been ranked and was not."""
    ranks = {r.index: r for r in ranked}
    steps: list[IncompleteStep] = []
    for target in record.rank_targets:
        rank = ranks.get(target.index)
        if rank is None:
            steps.append(
                incomplete_step(
                    "rank",
                    "not_started",
                    f"result {target.index} was never ranked",
                    result=target.index,
                )
            )
        elif target.index in failures:
            status = "failed" if rank.item.status == "done" else rank.item.status
            error = failures[target.index]
            steps.append(
                incomplete_step(
                    "rank",
                    status,
                    f"the rank request of result {target.index} did not finish ({why(status, error)})",
                    error=error,
                    request_ids=rank.output.request_ids,
                    result=target.index,
                )
            )
    return steps


def build_report(job: Job, question: Item, children: Sequence[Item], *, incomplete: bool) -> dict[str, Any]:
    """The question's report as stored (shape: docs/spec.md §6; `report` builds it)."""
    return report(job, question, children, incomplete=incomplete).dump()


def report(job: Job, question: Item, children: Sequence[Item], *, incomplete: bool) -> QuoteReport:
    """The question's report (shape: docs/spec.md §6), from stored items only.

    `incomplete` is what jobs/stages.py passes when the job was cancelled before every planned step of this
    question ran; it adds a `cancelled` entry to `incomplete_steps`. Every other missing step is read from
    the children. With any entry the status is `incomplete` and nothing is quoted or offered as closest:
    the results ranked so far stay in `results`.
    """
    now = utcnow()
    out = _question_output(question)
    search = _search(out)
    asked = QuestionInput.read(question.input).question
    model = job_model(job.options)  # as the workers read it (intake stores one)
    cutoffs = QuoteCutoffs(compare_min=quotes.COMPARE_MIN, quote_min=quotes.QUOTE_MIN)
    search_request_id = search.request_id or out.request_id
    search_ids = list(search.request_ids or out.request_ids)
    if question.status != "done":
        failure = str(question.error or out.error or question.status)
        record = quotes.QuoteRunRecord(asked, model)
        record.record_search_failure(failure, request_id=search_request_id)
        summary = empty_summary().model_copy(
            update={"search_requests": 1 if question.status == "failed" else 0}
        )
        return QuoteReport(
            kind="quote",
            question=asked,
            built_at=now.isoformat(),
            model=model,
            cutoffs_model=CUTOFFS_MODEL,
            model_note=cutoffs_model_note(model),
            cutoffs=cutoffs,
            search=SearchView(request_id=search_request_id, request_ids=search_ids, error=failure),
            errors=[],
            incomplete_steps=[],
            quote=None,
            closest=None,
            closest_by=None,
            compare=None,
            status="skipped" if question.status == "skipped" else "failed",
            error=failure,
            results=[],  # after the error here, as this report has always been stored
            run=QuoteRun.model_validate(record.as_dict()),
            summary=summary,
            request_ids=search_ids,
        )

    errors: list[str] = []
    record = _record(job, question)
    ranked = _ranked(children)
    failures = _replay_ranks(record, ranked, errors)
    steps = _rank_steps(record, ranked, failures)
    compare = _compare(children)
    compare_ids: list[str] = []
    compare_request_id: str | None = None
    if compare is not None:
        o = compare.output
        compare_request_id = o.request_id
        compare_ids = list(o.request_ids)
        try:
            if compare.item.status == "done":
                record.record_compare(_answers(o), request_id=compare_request_id, input_tokens=o.input_tokens)
            else:
                failure = str(compare.item.error or o.error or compare.item.status)
                record.record_compare_failure(
                    failure, request_id=compare_request_id, input_tokens=o.input_tokens
                )
                steps.append(
                    incomplete_step(
                        "compare",
                        compare.item.status,
                        f"the compare request did not finish ({why(compare.item.status, failure)})",
                        error=failure,
                        request_ids=compare_ids,
                    )
                )
        except (ValueError, quotes.QuoteAnswerError) as exc:
            error = f"compare answer could not be applied: {exc}"
            record.record_error(error)
            steps.append(
                incomplete_step("compare", "failed", f"the {error}", error=str(exc), request_ids=compare_ids)
            )
    elif not record.ranks_complete:
        message = "no compare request was sent, because not every result was ranked"
        record.record_error(message)
        steps.append(incomplete_step("compare", "not_started", message))
    elif quotes.compare_pool(record.candidates, compare_min=record.compare_min):
        message = "the compare request was never sent"
        record.record_error(message)
        steps.append(incomplete_step("compare", "not_started", message))
    if incomplete:
        message = "the job was cancelled before every step of this question ran"
        record.record_error(message)
        steps.append(incomplete_step("cancelled", "cancelled", message))

    status: QuoteStatus = "incomplete"
    outcome = None
    quote = closest = None
    closest_by = None
    if not steps:
        outcome = record.outcome or record.finish()
        status = "quoted" if outcome.quoted else "no_answer"
        if outcome.answer is not None:
            quote = _quote(outcome.answer, compare_request_id)
        if outcome.closest is not None:
            closest = _quote(outcome.closest, compare_request_id)
            closest_by = outcome.closest_by
    run = QuoteRun.model_validate(record.as_dict())
    reused = _reused(ranked, compare)
    return QuoteReport(
        kind="quote",
        question=asked,
        built_at=now.isoformat(),
        model=model,
        cutoffs_model=CUTOFFS_MODEL,
        model_note=cutoffs_model_note(model),
        cutoffs=cutoffs,
        search=SearchView(request_id=search_request_id, request_ids=search_ids, error=None),
        errors=errors,
        incomplete_steps=steps,
        quote=quote,
        closest=closest,
        closest_by=closest_by,
        compare=_compare_table(compare, outcome),
        results=_result_rows(record, ranked, compare, failures),
        status=status,
        error=None,
        run=run,
        summary=QuoteReportSummary(
            decisions_requests=run.totals.decisions_requests - _packed_away(ranked) - reused,
            reused_requests=reused,
            failed_requests=run.totals.failed_requests,
            search_requests=1,
            input_tokens=run.totals.input_tokens,
            seconds=round(seconds_since(out.started_at, now), 1),
            incomplete_steps=step_counts(steps),
        ),
        request_ids=_request_ids(search_ids, ranked, compare_ids),
    )


def _packed_away(ranked: Sequence[_Rank]) -> int:
    """Rank requests the run record counts that were not sent: a pack of n results is one request, not n
    (docs/spec.md §9.2)."""
    sizes: dict[int, int] = {}
    for rank in ranked:
        place = PackPlace.of(rank.item.output)
        if rank.item.status in ("done", "failed") and place is not None:
            sizes[place.head] = sizes.get(place.head, 0) + 1
    return sum(n - 1 for n in sizes.values())


def _reused(ranked: Sequence[_Rank], compare: _Compare | None) -> int:
    """Decisions requests of the question answered from the verdict store (docs/spec.md §10): a reused
    rank pack once, and the compare request."""
    ranks = tally_requests(
        [(r.item.output, r.output.reused_from is not None) for r in ranked if r.item.status == "done"]
    )
    reused_compare = compare is not None and compare.item.status == "done" and compare.output.reused_from
    return ranks.reused + (1 if reused_compare else 0)


def _request_ids(search_ids: Sequence[str], ranked: Sequence[_Rank], compare_ids: Sequence[str]) -> list[str]:
    ids = list(search_ids)
    for rank in ranked:
        ids += list(rank.output.request_ids)
    # A packed rank request answered several results: its id once.
    return list(dict.fromkeys(i for i in [*ids, *compare_ids] if i))


def _result_rows(
    record: quotes.QuoteRunRecord,
    ranked: Sequence[_Rank],
    compare: _Compare | None,
    failures: Mapping[int, str],
) -> list[ResultRow]:
    ranks = {r.index: r for r in ranked}
    candidates = {c.result_index: c for c in record.candidates}
    compared: set[int] = set()
    if compare is not None:
        compared = {c.result_index for c in compare.input.candidates}
    rows: list[ResultRow] = []
    for result in record.results:
        rank = ranks.get(result.index)
        o = rank.output if rank is not None else RankOutput()
        candidate = candidates.get(result.index)
        rows.append(
            ResultRow(
                index=result.index,
                title=result.title,
                url=result.url,
                date=result.date,
                sentence_count=len(result.sentences),
                sentences=list(result.sentences),
                status=rank.item.status if rank is not None else "not_ranked",
                best=None
                if candidate is None
                else SentenceChoice(number=candidate.sentence_number, text=candidate.sentence),
                has_answer=None if candidate is None else candidate.has_answer,
                p_best=None if candidate is None else candidate.p_best,
                confidence=None if candidate is None else candidate.confidence,
                probabilities={} if candidate is None else dict(candidate.probabilities),
                request_id=o.request_id,
                request_ids=list(o.request_ids),
                input_tokens=o.input_tokens,
                error=failures.get(result.index),
                compared=result.index in compared,
                **given_reused_from(o.reused_from),
            )
        )
    return rows


def _compare_table(compare: _Compare | None, outcome: quotes.QuoteOutcome | None) -> CompareTable | None:
    if compare is None:
        return None
    o = compare.output
    probabilities = o.probabilities if compare.item.status == "done" else None
    rank: dict[int, int] = {}
    if outcome is not None:
        rank = {c.result_index: n for n, c in enumerate(outcome.ordering, start=1)}
    candidates = [
        CompareRow(
            number=number,
            result_index=c.result_index,
            title=c.title,
            url=c.url,
            sentence=c.sentence,
            has_answer=c.has_answer,
            p_answers=probabilities[number - 1] if probabilities else None,
            rank=rank.get(c.result_index),
        )
        for number, c in enumerate(compare.input.candidates, start=1)
    ]
    return CompareTable(
        status=compare.item.status,
        request_id=o.request_id,
        request_ids=list(o.request_ids),
        input_tokens=o.input_tokens,
        error=None if compare.item.status == "done" else (compare.item.error or o.error),
        candidates=candidates,
        **given_reused_from(o.reused_from),
    )
