"""The typed records of the `answer` and `quote` stages and reports (checks/answer_contracts.py,
checks/quote_contracts.py, checks/contracts.py:StageRecord), and the check of a report when it is stored
(jobs/stages.py:stored_report).

tests/data/stage_rows.json holds rows exactly as the code before these records wrote them: the handlers'
inputs and outputs (every outcome: done, a failed call, an unusable answer, a failed split) and the reports
of tests/unit/test_question_reports.py's questions. They must load, and dump back byte for byte (key order
included: JSON kept as text on SQLite shows it).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api
from pydantic import ValidationError

from checks import answer_contracts, quote_contracts
from checks.answer_contracts import AnswerReport, InvestigationInput, SentenceSpec, SentenceVerdict
from checks.contracts import IncompleteStep, QuestionInput, StageRecord
from checks.kinds.answer import result_line, summarize_job
from checks.quote_contracts import QuoteReport, RankOutput
from checks.stage_steps import incomplete_step
from jobs import answers
from jobs.kinds import StageMachine
from jobs.stages import stored_report
from models import Item, Job

ROOT = Path(__file__).resolve().parents[2]
ROWS: list[dict[str, Any]] = json.loads((ROOT / "tests" / "data" / "stage_rows.json").read_text())
RECORDS: dict[str, type[StageRecord]] = {
    name: getattr(module, name)
    for module in (answer_contracts, quote_contracts)
    for name in module.__all__
    if isinstance(getattr(module, name), type)
}
RECORDS["QuestionInput"] = QuestionInput

SPEC = {
    "number": 1,
    "text": "The bridge was built by Ada. [1]",
    "claim": "The bridge was built by Ada.",
    "paragraph": 1,
    "source_ids": [1],
    "passages": {"1": "The bridge was built by Ada."},
    "urls": {"1": "https://a.example/1"},
    "titles": {"1": "A"},
    "missing_ids": [],
}


def _rows(record: str) -> list[dict[str, Any]]:
    return [r["row"] for r in ROWS if r["record"] == record]


@pytest.mark.parametrize("entry", ROWS, ids=[f"{r['record']}-{i}" for i, r in enumerate(ROWS)])
def test_rows_stored_today_load_and_dump_back_unchanged(entry: dict[str, Any]) -> None:
    record = RECORDS[entry["record"]]
    row = entry["row"]
    loaded = record.read(row)
    assert json.dumps(loaded.dump()) == json.dumps(row)  # same keys, same values, same order
    assert json.dumps(record.model_validate(row).dump()) == json.dumps(row)


def test_every_record_and_report_shape_has_stored_rows() -> None:
    wanted = {
        "QuestionInput",
        "AnswerQuestionOutput",
        "SentenceSpec",
        "SentenceVerdict",
        "InvestigationInput",
        "InvestigationOutput",
        "AnswerReport",
        "QuoteQuestionOutput",
        "ResultInput",
        "RankOutput",
        "CompareInput",
        "CompareOutput",
        "QuoteReport",
    }
    assert wanted <= {r["record"] for r in ROWS}
    statuses = {r["row"]["status"] for r in ROWS if r["record"] in ("AnswerReport", "QuoteReport")}
    assert {"done", "incomplete", "failed", "skipped", "quoted", "no_answer"} <= statuses


def test_a_stored_output_with_the_fields_settling_adds_still_loads() -> None:
    """Settling adds `usage` (a duplicate also `duplicate_of_item`) to every output; a reader ignores them."""
    (done, *_failed) = _rows("SentenceVerdict")
    stored = {**done, "usage": {"attempts": 1, "cost_usd": 0.001}, "duplicate_of_item": 7}
    assert SentenceVerdict.read(stored).dump() == done
    with pytest.raises(ValidationError, match="usage"):
        SentenceVerdict.model_validate(stored)  # but a writer may not add a field the record lacks


def test_a_renamed_key_fails_validation_where_it_is_written_and_where_it_is_read() -> None:
    renamed = {("claim_text" if k == "claim" else k): v for k, v in SPEC.items()}
    with pytest.raises(ValidationError, match="claim_text"):
        SentenceSpec.model_validate(renamed)
    with pytest.raises(ValidationError, match="claim"):
        SentenceSpec.read(renamed)  # a reader ignores the unknown key, and then misses the known one
    report = _rows("AnswerReport")[0]
    with pytest.raises(ValidationError, match="incomplete_step"):
        AnswerReport.model_validate(
            {("incomplete_step" if k == "incomplete_steps" else k): v for k, v in report.items()}
        )
    with pytest.raises(ValidationError, match="status"):
        QuoteReport.model_validate({**_rows("QuoteReport")[0], "status": "finished"})


def test_a_renamed_key_fails_mypy(tmp_path: Path) -> None:
    snippet = tmp_path / "renamed.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from checks.answer_contracts import InvestigationInput, SentenceSpec

            def claim(spec: SentenceSpec) -> str:
                return spec.claim_text

            InvestigationInput(question="q", answer_text="a", sentence_number=1, claim_text="c", label=None)
            """
        )
    )
    out, _err, status = mypy_api.run(
        ["--strict", "--no-error-summary", "--cache-dir", str(ROOT / ".mypy_cache"), str(snippet)]
    )
    assert status == 1
    assert '"SentenceSpec" has no attribute "claim_text"' in out
    assert 'Unexpected keyword argument "claim_text" for "InvestigationInput"' in out


def test_a_record_dumps_the_fields_it_was_given_in_their_order() -> None:
    step = IncompleteStep(step="score", sentence=2, status="failed", message="m")
    assert list(step.dump()) == ["step", "sentence", "status", "message"]
    later = step.model_copy(update={"request_ids": ["r-1"], "error": "e"})
    assert list(later.dump()) == ["step", "sentence", "status", "message", "request_ids", "error"]
    failed = RankOutput(result_index=2)
    assert failed.dump() == {"result_index": 2}


def test_one_step_helper_gives_each_kind_its_entries() -> None:
    detailed = incomplete_step(
        "score", "failed", "sentence 1 was not scored", error="e", request_ids=["r", None]
    )
    assert detailed.dump() == {
        "step": "score",
        "status": "failed",
        "error": "e",
        "request_ids": ["r"],
        "message": "sentence 1 was not scored",
    }
    brief = incomplete_step("score", "failed", "sentence 1 was not scored", detail=False, sentence=1)
    assert brief.dump() == {
        "step": "score",
        "sentence": 1,
        "status": "failed",
        "message": "sentence 1 was not scored",
    }


# --- the report is checked when it is stored -----------------------------------------------------------


def _question() -> tuple[Job, Item]:
    job = Job(kind="answer", status="in_progress", options={"model": "pplx-decider-v1.1-27b"})
    question = Item(
        id=1,
        stage="question",
        custom_id="q1",
        mode="",
        position=0,
        input={"kind": "answer", "question": "Who built the bridge?"},
        output={"kind": "answer", "error": "agent down", "usage": {"attempts": 1, "cost_usd": 0.005}},
        status="failed",
        error="agent down",
    )
    return job, question


def _machine(build: Any) -> StageMachine:
    return StageMachine(answers.plan, build, summarize_job, result_line, report=AnswerReport)


def test_a_report_its_contract_accepts_is_stored_as_built_with_its_usage() -> None:
    job, question = _question()
    built = answers.build_report(job, question, [], incomplete=False)
    stored = stored_report(_machine(answers.build_report), job, question, [], incomplete=False)
    assert list(stored) == [*built, "usage"]
    assert {k: v for k, v in stored.items() if k not in ("built_at", "usage")} == {
        k: v for k, v in built.items() if k != "built_at"
    }
    assert stored["usage"]["attempts"] == 1


@pytest.mark.parametrize(
    "change",
    [
        {"bogus": 1},  # a field the contract lacks
        {"summary": {"sentences": "three"}},  # a value of the wrong type
        {"status": "finished"},  # not a status of the kind
    ],
)
def test_a_report_with_a_wrong_field_is_refused_when_stored(change: dict[str, Any]) -> None:
    job, question = _question()

    def wrong(job: Job, question: Item, children: Any, *, incomplete: bool) -> dict[str, Any]:
        return {**answers.build_report(job, question, children, incomplete=incomplete), **change}

    stored = stored_report(_machine(wrong), job, question, [], incomplete=False)
    assert stored["status"] == "failed"
    assert stored["error"].startswith("the report could not be built: ValidationError")
    assert next(iter(change)) in stored["error"]
    assert list(stored) == ["kind", "question", "status", "error", "errors", "built_at", "summary", "usage"]
    assert stored["question"] == "Who built the bridge?" and stored["usage"]["attempts"] == 1


def test_an_investigation_input_is_what_plan_writes() -> None:
    row = _rows("InvestigationInput")[0]
    assert InvestigationInput.read(row).sentence_number == 2
