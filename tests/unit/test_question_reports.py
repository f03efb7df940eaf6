"""What comes next and what the report says, for answer and quote questions (jobs/answers.py, jobs/quotes.py).

Items are built in memory in the shape the handlers store (no database: `plan`, `build_report`,
`summarize_job` and `result_line` read attributes only), so every stage can be made to fail on purpose.
The rule under test: a question with any step that did not run to the end is `incomplete`, names the
step, and claims no quote or checked answer (docs/spec.md §3.6, §4.6).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from checks import answers as gate
from checks import quotes
from checks.kinds import answer as answer_kind
from checks.kinds import quote as quote_kind
from checks.options import CUTOFFS_MODEL
from jobs import answers
from jobs import quotes as quote_jobs
from models import Item, Job

_ids = itertools.count(1)


def job(kind: str, model: str = CUTOFFS_MODEL) -> Job:
    return Job(kind=kind, status="in_progress", options={"model": model, "budget_usd": None})


def item(
    stage: str, custom_id: str, status: str, input_: dict[str, Any], output: Any = None, error=None
) -> Item:
    return Item(
        id=next(_ids),
        stage=stage,
        custom_id=custom_id,
        mode=stage,
        position=0,
        input=input_,
        output=output,
        status=status,
        error=error,
    )


# --- answer --------------------------------------------------------------------------------------------

RESULTS = [
    {"id": 1, "url": "https://a.example/1", "title": "A", "snippet": "The bridge was built by Ada."},
    {"id": 2, "url": "https://b.example/2", "title": "B", "snippet": "It opened in 1890."},
    {"id": 3, "url": "https://c.example/3", "title": "C", "snippet": "It is made of iron."},
]
ANSWER = "The bridge was built by Ada [1]. The bridge opened in 1890 [2]. The bridge is made of iron [3]."


def specs(text: str) -> list[dict[str, Any]]:
    out = []
    for number, sentence in enumerate(gate.split_sentences(text), start=1):
        cited = gate.cite_passages(sentence.source_ids, RESULTS)
        out.append(
            {
                "number": number,
                "text": sentence.text,
                "claim": sentence.claim,
                "paragraph": sentence.paragraph,
                "source_ids": list(sentence.source_ids),
                "passages": cited.passages,
                "urls": cited.urls,
                "titles": {},
                "missing_ids": list(cited.missing_ids),
            }
        )
    return out


def answer_question() -> Item:
    return item(
        "question",
        "q1",
        "done",
        {"kind": "answer", "question": "Who built the bridge?"},
        {
            "kind": "answer",
            "started_at": "2026-01-01T00:00:00+00:00",
            "agent": {"text": ANSWER, "results": RESULTS, "request_id": "ag-1", "request_ids": ["ag-1"]},
            "sentences": specs(ANSWER),
            "request_ids": ["ag-1"],
        },
    )


def scored_output(spec: Mapping[str, Any], support: float, request_id: str) -> dict[str, Any]:
    probabilities = {gate.CHECKABLE_QUESTION: 0.95}
    for n in spec["passages"]:
        probabilities[gate.supports_question(n)] = support
        probabilities[gate.contradicts_question(n)] = 0.01
    result = gate.label_sentence(probabilities, spec["passages"].keys(), spec["missing_ids"])
    return {
        "label": result.label,
        "rule": result.rule,
        "checkable": result.checkable,
        "supports": {n: support for n in spec["passages"]},
        "contradicts": {n: 0.01 for n in spec["passages"]},
        "request_id": request_id,
        "request_ids": [request_id],
        "input_tokens": 100,
    }


def sentences(question: Item, supports: Sequence[float | str]) -> list[Item]:
    """One sentence child per spec: a float is its support probability, a string makes it fail so."""
    units = answers.sentence_units(question)
    out = []
    for unit, support in zip(units, supports, strict=True):
        if isinstance(support, str):
            output = {"request_id": "d-bad", "request_ids": ["d-bad"], "error": support}
            out.append(item(unit.stage, unit.custom_id, "failed", unit.input, output, error=support))
        else:
            number = unit.input["number"]
            out.append(
                item(
                    unit.stage,
                    unit.custom_id,
                    "done",
                    unit.input,
                    scored_output(unit.input, support, f"d-{number}"),
                )
            )
    return out


def investigation(unit_input: dict[str, Any], custom_id: str, *, fail: str | None = None) -> Item:
    if fail is not None:
        output = {"agent": None, "sentences": [], "request_ids": ["ag-bad"], "error": fail}
        return item("investigation", custom_id, "failed", unit_input, output, error=fail)
    rewrite = specs("The bridge opened to traffic in 1890 [2].")
    done = [{**s, **scored_output(s, 0.95, "d-rw"), "status": "done", "error": None} for s in rewrite]
    text = "The bridge opened to traffic in 1890 [2]."
    agent = {"text": text, "results": RESULTS, "request_id": "ag-2", "request_ids": ["ag-2"]}
    output = {"agent": agent, "sentences": done, "request_ids": ["ag-2", "d-rw"]}
    return item("investigation", custom_id, "done", unit_input, output)


def test_answer_where_every_step_ran_is_done() -> None:
    j, q = job("answer"), answer_question()
    kids = sentences(q, [0.9, 0.5, 0.9])  # sentence 2 is weak
    (unit,) = answers.plan(j, q, kids)
    assert unit.stage == "investigation" and unit.input["sentence_number"] == 2
    kids.append(investigation(unit.input, unit.custom_id))
    assert answers.plan(j, q, kids) == []
    report = answers.build_report(j, q, kids, incomplete=False)
    assert report["status"] == "done" and report["incomplete_steps"] == [] and report["errors"] == []
    assert [s["outcome"] for s in report["final"]["sentences"]] == [None, "replaced", None]
    line = answer_kind.result_line("q1", "Who built the bridge?", "done", report)
    assert line.outcome == "done" and line.partial_answer is None
    assert line.final_answer.startswith("The bridge was built by Ada. [1] The bridge opened to traffic")
    assert line.incomplete_steps == [] and line.model_note is None
    assert report["cutoffs_model"] == CUTOFFS_MODEL and report["model"] == CUTOFFS_MODEL


def test_a_failed_sentence_score_makes_the_answer_incomplete_and_starts_no_investigation() -> None:
    j, q = job("answer"), answer_question()
    kids = sentences(q, [0.5, "Decisions API failed: 503", 0.1])  # 1 weak, 2 failed, 3 unsupported
    assert answers.plan(j, q, kids) == []  # the run stops: no Agent call for the flagged sentences
    report = answers.build_report(j, q, kids, incomplete=False)
    assert report["status"] == "incomplete" and report["error"] is None
    score, review = report["incomplete_steps"]
    assert score == {
        "step": "score",
        "sentence": 2,
        "status": "failed",
        "error": "Decisions API failed: 503",
        "request_ids": ["d-bad"],
        "message": "sentence 2 was not scored (failed: Decisions API failed: 503)",
    }
    assert review["step"] == "review" and review["status"] == "not_started" and review["sentences"] == [1, 3]
    # Every sentence that was scored is still shown, with its label; none was reviewed.
    final = report["final"]["sentences"]
    assert [(s["label"], s["outcome"]) for s in final] == [
        ("weak", None),
        (None, None),
        ("unsupported", None),
    ]
    assert report["summary"]["investigated"] == report["summary"]["not_reviewed"] == 0
    assert report["summary"]["incomplete_steps"] == {"score": 1, "review": 1}
    line = answer_kind.result_line("q1", "Who built the bridge?", "done", report)
    assert line.outcome == "incomplete" and line.final_answer is None
    assert line.partial_answer == (
        "The bridge was built by Ada. [1] The bridge opened in 1890. [2] The bridge is made of iron. [3]"
    )
    assert [s["step"] for s in line.incomplete_steps] == ["score", "review"]


def test_a_retried_sentence_lets_the_review_start() -> None:
    j, q = job("answer"), answer_question()
    kids = sentences(q, [0.5, "timeout", 0.9])
    assert answers.plan(j, q, kids) == []
    kids[1] = sentences(q, [0.5, 0.9, 0.9])[1]
    assert [u.input["sentence_number"] for u in answers.plan(j, q, kids)] == [1]


def test_a_failed_investigation_makes_the_answer_incomplete() -> None:
    j, q = job("answer"), answer_question()
    kids = sentences(q, [0.9, 0.5, 0.1])
    units = answers.plan(j, q, kids)
    assert [u.input["sentence_number"] for u in units] == [2, 3]
    kids.append(investigation(units[0].input, units[0].custom_id))
    kids.append(investigation(units[1].input, units[1].custom_id, fail="Agent API failed: 503"))
    report = answers.build_report(j, q, kids, incomplete=False)
    assert report["status"] == "incomplete"
    (step,) = report["incomplete_steps"]
    assert (step["step"], step["sentence"], step["status"]) == ("investigate", 3, "failed")
    assert step["error"] == "Agent API failed: 503" and step["request_ids"] == ["ag-bad"]
    assert report["summary"]["replaced"] == 1 and report["summary"]["failed_investigations"] == 1
    final = report["final"]["sentences"]
    assert [(s["label"], s["outcome"], s["investigation_error"]) for s in final] == [
        ("supported", None, None),
        ("supported", "replaced", None),
        ("unsupported", None, "Agent API failed: 503"),
    ]


def test_a_cancelled_answer_names_the_cancel_and_the_investigations_never_started() -> None:
    j, q = job("answer"), answer_question()
    kids = sentences(q, [0.9, 0.5, 0.9])
    report = answers.build_report(j, q, kids, incomplete=True)  # as flows passes it for a cancelling job
    assert report["status"] == "incomplete"
    assert [(s["step"], s["status"], s.get("sentence")) for s in report["incomplete_steps"]] == [
        ("investigate", "not_started", 2),
        ("cancelled", "cancelled", None),
    ]


def test_a_failed_agent_call_still_fails_the_question() -> None:
    q = item(
        "question", "q1", "failed", {"kind": "answer", "question": "Q?"}, {"request_ids": ["ag-x"]}, "500"
    )
    report = answers.build_report(job("answer"), q, [], incomplete=False)
    assert report["status"] == "failed" and report["incomplete_steps"] == [] and report["final"] is None


def test_answer_job_summary_counts_incomplete_questions_and_their_steps() -> None:
    j, q = job("answer"), answer_question()
    fine = sentences(q, [0.9, 0.9, 0.9])
    broken = sentences(q, [0.9, "timeout", 0.9])
    reports = [answers.build_report(j, q, kids, incomplete=False) for kids in (fine, broken)]
    summary = answer_kind.summarize_job((r["status"], r["summary"]) for r in reports)
    assert summary.outcomes == {"done": 1, "failed": 0, "skipped": 0, "incomplete": 1}
    assert summary.incomplete_steps == {"score": 1, "review": 1}


def test_an_answer_on_another_model_says_where_the_cutoffs_come_from() -> None:
    j, q = job("answer", model="pplx-decider-latest"), answer_question()
    report = answers.build_report(j, q, sentences(q, [0.9, 0.9, 0.9]), incomplete=False)
    assert report["model"] == "pplx-decider-latest" and report["cutoffs_model"] == CUTOFFS_MODEL
    assert "measured on pplx-decider-v1.1-27b" in report["model_note"]
    assert answer_kind.result_line("q1", "Q", "done", report).model_note == report["model_note"]


# --- quote ---------------------------------------------------------------------------------------------

SEARCH = [
    {"title": "Bones", "url": "https://x.example/bones", "date": "2024-05-01",
     "snippet": "An adult human body typically has 206 bones. Babies have more."},
    {"title": "Skeleton", "url": "https://x.example/skeleton", "date": None,
     "snippet": "The skeleton supports the body and protects organs."},
]  # fmt: skip


def quote_question() -> Item:
    prepared = quotes.prepare_results(SEARCH)
    output = {
        "kind": "quote",
        "started_at": "2026-01-01T00:00:00+00:00",
        "search": {"request_id": "s-1", "request_ids": ["s-1"], "results": [r.as_dict() for r in prepared]},
        "request_ids": ["s-1"],
    }
    return item("question", "q1", "done", {"kind": "quote", "question": "How many bones?"}, output)


def rank_answers(source: quotes.SourceResult, has_answer: float, choice: str = "1") -> dict[str, Any]:
    n = len(source.sentences)
    probabilities = {str(k): (0.9 if str(k) == choice else 0.1 / max(1, n - 1)) for k in range(1, n + 1)}
    best = {"type": "choice", "choice": choice, "probabilities": probabilities, "confidence": 0.8}
    return {quotes.BEST_QUESTION: best, quotes.HAS_ANSWER_QUESTION: {"type": "noul", "noul": has_answer}}


def ranks(j: Job, q: Item, outcomes: Sequence[float | str]) -> list[Item]:
    """One result child per rank target: a float is its has_answer, a string makes it fail so."""
    out = []
    for unit, outcome in zip(quote_jobs.plan(j, q, []), outcomes, strict=True):
        source = quotes.SourceResult.from_dict(unit.input["result"])
        rid = f"r-{source.index}"
        if isinstance(outcome, str):
            output = {"request_id": rid, "request_ids": [rid], "error": outcome}
            out.append(item(unit.stage, unit.custom_id, "failed", unit.input, output, error=outcome))
        else:
            answers_ = rank_answers(source, outcome)
            output = {"answers": answers_, "request_id": rid, "request_ids": [rid], "input_tokens": 50}
            out.append(item(unit.stage, unit.custom_id, "done", unit.input, output))
    return out


def compare_item(unit_input: dict[str, Any], p: float | None, *, fail: str | None = None) -> Item:
    if fail is not None:
        output = {"request_id": "c-1", "request_ids": ["c-1"], "error": fail}
        return item("compare", "q1:compare", "failed", unit_input, output, error=fail)
    output = {
        "answers": {"answers_1": {"type": "noul", "noul": p}},
        "probabilities": [p],
        "request_id": "c-1",
        "request_ids": ["c-1"],
        "input_tokens": 30,
    }
    return item("compare", "q1:compare", "done", unit_input, output)


def test_quote_where_every_step_ran_is_quoted() -> None:
    j, q = job("quote"), quote_question()
    kids = ranks(j, q, [0.95, 0.1])
    (unit,) = quote_jobs.plan(j, q, kids)
    kids.append(compare_item(unit.input, 0.97))
    report = quote_jobs.build_report(j, q, kids, incomplete=False)
    assert report["status"] == "quoted" and report["incomplete_steps"] == []
    assert report["quote"]["text"] == "An adult human body typically has 206 bones."
    line = quote_kind.result_line("q1", "How many bones?", "done", report)
    assert line.quote == report["quote"] and line.incomplete_steps == []


def test_quote_with_no_candidate_is_still_no_answer() -> None:
    j, q = job("quote"), quote_question()
    kids = ranks(j, q, [0.1, 0.05])
    assert quote_jobs.plan(j, q, kids) == []
    report = quote_jobs.build_report(j, q, kids, incomplete=False)
    assert report["status"] == "no_answer" and report["closest"]["result_index"] == 1
    assert report["incomplete_steps"] == []


def test_a_failed_rank_makes_the_quote_incomplete_and_sends_no_compare() -> None:
    j, q = job("quote"), quote_question()
    kids = ranks(j, q, [0.95, "Decisions API failed: 503 upstream busy"])
    # Result 1 alone would be quoted at 0.95; with result 2 unranked the compare is never sent.
    assert quote_jobs.plan(j, q, kids) == []
    report = quote_jobs.build_report(j, q, kids, incomplete=False)
    assert report["status"] == "incomplete" and report["error"] is None
    assert report["quote"] is None and report["closest"] is None and report["compare"] is None
    rank, compare = report["incomplete_steps"]
    assert rank == {
        "step": "rank",
        "result": 2,
        "status": "failed",
        "error": "Decisions API failed: 503 upstream busy",
        "request_ids": ["r-2"],
        "message": "the rank request of result 2 did not finish "
        "(failed: Decisions API failed: 503 upstream busy)",
    }
    assert (compare["step"], compare["status"]) == ("compare", "not_started")
    # The candidates ranked so far are still shown, and the run record says why it stopped.
    assert report["results"][0]["best"]["text"] == "An adult human body typically has 206 bones."
    assert report["results"][1]["status"] == "failed" and report["results"][1]["error"]
    assert report["run"]["outcome"] is None and report["run"]["errors"] == [compare["message"]]
    assert report["summary"]["incomplete_steps"] == {"rank": 1, "compare": 1}
    line = quote_kind.result_line("q1", "How many bones?", "done", report)
    assert line.outcome == "incomplete" and line.quote is None and line.closest is None
    assert [s["step"] for s in line.incomplete_steps] == ["rank", "compare"]


def test_an_unreadable_rank_answer_is_a_failed_rank() -> None:
    j, q = job("quote"), quote_question()
    kids = ranks(j, q, [0.95, 0.9])
    kids[1].output = {
        **kids[1].output,
        "answers": rank_answers(quotes.SourceResult.from_dict(kids[1].input["result"]), 0.9, "7"),
    }
    assert quote_jobs.plan(j, q, kids) == []
    report = quote_jobs.build_report(j, q, kids, incomplete=False)
    assert report["status"] == "incomplete"
    assert report["incomplete_steps"][0]["result"] == 2 and "choice" in report["incomplete_steps"][0]["error"]


def test_a_failed_compare_makes_the_quote_incomplete_not_failed() -> None:
    j, q = job("quote"), quote_question()
    kids = ranks(j, q, [0.95, 0.1])
    (unit,) = quote_jobs.plan(j, q, kids)
    kids.append(compare_item(unit.input, None, fail="Decisions API failed: 429"))
    report = quote_jobs.build_report(j, q, kids, incomplete=False)
    assert report["status"] == "incomplete" and report["error"] is None and report["quote"] is None
    (step,) = report["incomplete_steps"]
    assert (step["step"], step["status"], step["request_ids"]) == ("compare", "failed", ["c-1"])
    assert report["compare"]["status"] == "failed"


@pytest.mark.parametrize("model", [CUTOFFS_MODEL, "pplx-decider-flash-latest"])
def test_a_quote_report_says_which_model_the_cutoffs_were_measured_on(model: str) -> None:
    j, q = job("quote", model), quote_question()
    kids = ranks(j, q, [0.1, 0.05])
    report = quote_jobs.build_report(j, q, kids, incomplete=False)
    assert report["cutoffs_model"] == CUTOFFS_MODEL
    assert (report["model_note"] is None) == (model == CUTOFFS_MODEL)


def test_quote_job_summary_counts_incomplete_questions_and_their_steps() -> None:
    j, q = job("quote"), quote_question()
    reports = [
        quote_jobs.build_report(j, q, ranks(j, q, outcomes), incomplete=False)
        for outcomes in ([0.1, 0.05], [0.95, "timeout"], ["timeout", "timeout"])
    ]
    summary = quote_kind.summarize_job((r["status"], r["summary"]) for r in reports)
    assert summary.outcomes == {"quoted": 0, "no_answer": 1, "failed": 0, "skipped": 0, "incomplete": 2}
    assert summary.incomplete_steps == {"rank": 3, "compare": 2}


# --- answers taken from the verdict store (docs/spec.md §10) -------------------------------------------


def _origin(request_id: str) -> dict[str, str]:
    return {"request_id": request_id, "answered_at": "2026-01-01T00:00:00+00:00"}


def _reused(child: Item, request_id: str) -> Item:
    child.output = {**(child.output or {}), "reused_from": _origin(request_id)}
    return child


def test_an_answer_report_says_which_rows_were_answered_from_the_store() -> None:
    """Each evidence row whose request was reused says so, a rewrite sentence by its own request id among
    its investigation's; rows of requests sent are stored as before, and the result line lists each
    original request once."""
    j, q = job("answer"), answer_question()
    kids = sentences(q, [0.9, 0.5, 0.9])
    _reused(kids[0], "d-1")
    (unit,) = answers.plan(j, q, kids)
    inv = investigation(unit.input, unit.custom_id)
    inv.output = {**(inv.output or {}), "reused_from": [_origin("d-rw"), _origin("d-other")]}
    report = answers.build_report(j, q, [*kids, inv], incomplete=False)
    rows = {(r["number"], r["rewrite_number"]): r for r in report["evidence"]}
    assert rows[(1, None)]["reused_from"] == _origin("d-1")
    assert rows[(2, 1)]["reused_from"] == _origin("d-rw")
    assert "reused_from" not in rows[(2, None)] and "reused_from" not in rows[(3, None)]
    line = answer_kind.result_line("q1", "Who built the bridge?", "done", report).dump()
    assert line["reused_from"] == [_origin("d-1"), _origin("d-rw")]
    plain = answers.build_report(j, q, [*sentences(q, [0.9, 0.5, 0.9]), investigation(unit.input, "x")],
                                 incomplete=False)  # fmt: skip
    assert "reused_from" not in answer_kind.result_line("q1", "Q", "done", plain).dump()


def test_a_quote_report_says_which_rows_were_answered_from_the_store() -> None:
    j, q = job("quote"), quote_question()
    kids = ranks(j, q, [0.95, 0.1])
    _reused(kids[1], "r-2")
    (unit,) = quote_jobs.plan(j, q, kids)
    kids.append(_reused(compare_item(unit.input, 0.97), "c-1"))
    report = quote_jobs.build_report(j, q, kids, incomplete=False)
    assert "reused_from" not in report["results"][0]
    assert report["results"][1]["reused_from"] == _origin("r-2")
    assert report["compare"]["reused_from"] == _origin("c-1")
    line = quote_kind.result_line("q1", "How many bones?", "done", report).dump()
    assert line["reused_from"] == [_origin("r-2"), _origin("c-1")]
