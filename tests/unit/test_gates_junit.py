"""The CI gate's names and misses (checks/gates.py) and the JUnit XML of a job's results (cli/junit.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from checks.citation_contracts import CitationReport, CitationSentence, CitationsResult
from checks.gates import figures, misses, parse_gate, valid_names
from checks.kinds.answer import AnswerResult
from checks.kinds.claims import ClaimModeResult, ClaimResult
from cli.junit import cases_of, junit_document


def test_gates_parse_name_equals_number_and_refuse_unknown_names() -> None:
    gate = parse_gate("citation_recall=0.8", "under", "citations")
    assert (gate.name, gate.bound, gate.option) == (
        "citation_recall",
        0.8,
        "--fail-under citation_recall=0.8",
    )
    with pytest.raises(
        ValueError, match=r"unknown metric 'recall' for a citations job \(valid: citation_recall"
    ):
        parse_gate("recall=0.8", "under", "citations")
    for bad in ("citation_recall", "citation_recall=", "citation_recall=high", "citation_recall=nan"):
        with pytest.raises(ValueError):
            parse_gate(bad, "over", "citations")
    assert "grounded.brier" in valid_names("claims") and "supported_share" in valid_names("answer")


def test_misses_name_each_figure_and_a_figure_without_a_value_never_passes() -> None:
    found = figures("citations", {"metrics": {"citation_recall": 0.5, "uncited_rate": 0.1}})
    gates = [
        parse_gate("citation_recall=0.8", "under", "citations"),
        parse_gate("uncited_rate=0.2", "over", "citations"),
        parse_gate("citation_precision=0.1", "under", "citations"),
    ]
    assert misses(gates, found) == [
        "citation_recall 0.5 is under 0.8 (--fail-under citation_recall=0.8)",
        "citation_precision has no value in this job, so it cannot meet --fail-under citation_precision=0.1",
    ]
    assert misses([parse_gate("citation_recall=0.5", "under", "citations")], found) == []


def test_claims_gates_read_every_mode_and_answer_gates_the_labels_after_review() -> None:
    card = {"n": 4, "supported": 3, "contradicted": 1, "review": 0, "errors": 0, "brier": 0.1,
            "missed_failures": 0, "false_contradictions": 1}  # fmt: skip
    found = figures("claims", {"scorecards": {"grounded": card, "ungrounded": {**card, "supported": 1}}})
    gate = parse_gate("supported_rate=0.5", "under", "claims")
    assert misses([gate], found) == [
        "ungrounded.supported_rate 0.25 is under 0.5 (--fail-under supported_rate=0.5)"
    ]
    assert misses([parse_gate("grounded.supported_rate=0.5", "under", "claims")], found) == []
    answer = figures("answer", {"after": {"supported": 3, "weak": 1, "not_checkable": 2}})
    assert answer["supported_share"] == 0.75 and answer["weak_rate"] == 0.25 and answer["uncited_rate"] == 0.0


def _sentence(number: int, label: str, text: str, **kw: object) -> CitationSentence:
    return CitationSentence(
        number=number, text=text, claim=text, paragraph=1, status="done", cited=["1"], missing=[],
        label=label, rule="rule <&>", request_ids=[f"req-{number}"], **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_the_junit_document_is_valid_xml_with_a_case_per_row_and_the_evidence_escaped() -> None:
    flagged = _sentence(2, "contradicted", 'It says "<b>12</b>" & more\x01.')
    report = CitationReport(sentences=[_sentence(1, "supported", "Fine."), flagged])
    lines = [
        CitationsResult(custom_id="a<1>", status="done", outcome="done", report=report),
        CitationsResult(custom_id="b", status="done", outcome="done", report=CitationReport(sentences=[])),
        CitationsResult(
            custom_id="c", status="failed", outcome="failed", report=CitationReport(error="boom")
        ),
        CitationsResult(custom_id="d", status="skipped"),
    ]
    job = {"id": "j1", "kind": "citations", "status": "completed", "warnings": ["rows & <things>"]}
    document = junit_document(
        "citations", job, cases_of("citations", lines), gate_lines=["x 0.1 is under 0.5"]
    )
    text = ET.tostring(document.getroot(), encoding="unicode")
    root = ET.fromstring(text)  # parses: escaped, and the control character dropped
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "5",
        "2",
        "1",
        "1",
    )
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["a<1>", "b", "c", "d", "gate"]
    failure = cases["a<1>"].find("failure")
    assert failure is not None and failure.get("message") == "1 of 2 sentences flagged"
    assert (
        failure.text
        == 'sentence 2 [contradicted] It says "<b>12</b>" & more. — rule <&> (request ids: req-2)'
    )
    error = cases["c"].find("error")
    assert error is not None and error.get("message") == "boom"
    assert cases["d"].find("skipped") is not None
    assert "&lt;things&gt;" in text and "\x01" not in text


def test_claims_and_answers_have_their_cases() -> None:
    claim = ClaimResult(
        custom_id="s1",
        results={"grounded": ClaimModeResult(status="done", p=0.1, verdict="contradicted", request_id="r1")},
    )
    (case,) = cases_of("claims", [claim])
    assert case.outcome == "failure" and case.details == ["grounded: contradicted p=0.100 (request ids: r1)"]
    report = {"status": "done", "final": {"sentences": [{"text": "A.", "label": "weak", "origin": 1}]},
              "evidence": [{"number": 1, "request_id": "r9"}]}  # fmt: skip
    answer = AnswerResult.read({"custom_id": "q1", "status": "done", "report": report})
    (case,) = cases_of("answer", [answer])
    assert case.outcome == "failure" and case.details == ["sentence 1 [weak] A. (request ids: r9)"]
