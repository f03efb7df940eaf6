"""RAGAS samples and DeepEval test cases as citations rows: detection, field errors in their names, row
ids, unmarked answers checked against every source and kept out of the citation metrics
(checks/citation_formats.py, citation_rows.py, citation_passages.py, citation_verdicts.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.citation_contracts import CitationCutoffs, CitationEntry, CitationSource, SentenceScore
from checks.citation_formats import detect, read_document
from checks.citation_passages import plan_sentences
from checks.citation_rows import CitationsValidationError, parse_citation_lines, validate_citation_rows
from checks.citation_verdicts import add_metrics, judge, metrics_of, relabel
from checks.kinds.citations import parse_options, rows_note
from checks.options import OptionsError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

RAGAS_ROW = {
    "user_input": "When was the Eiffel Tower completed?",
    "response": "The Eiffel Tower was completed in 1889. It is 330 metres tall.",
    "retrieved_contexts": ["The Eiffel Tower was completed in 1889.", "It stands 330 metres tall."],
    "reference": "1889",
}
DEEPEVAL_ROW = {
    "name": "eiffel",
    "input": "When was the Eiffel Tower completed?",
    "actual_output": "The Eiffel Tower was completed in 1889 [1].",
    "retrieval_context": ["The Eiffel Tower was completed in 1889."],
    "expected_output": None,
    "context": None,
}


def _errors(lines: list[object], **kw: str) -> list[str]:
    with pytest.raises(CitationsValidationError) as info:
        parse_citation_lines([json.dumps(x) for x in lines], **kw)
    return [str(e) for e in info.value.errors]


def test_each_format_is_told_by_the_fields_only_it_has() -> None:
    assert detect(RAGAS_ROW) == "ragas"
    assert detect({"question": "q", "answer": "a", "contexts": ["c"], "ground_truth": "g"}) == "ragas"
    assert detect(DEEPEVAL_ROW) == "deepeval"
    assert detect({"id": "x", "question": "q", "answer": "a", "sources": []}) == "factgate"
    assert detect({"id": "x", "answer": "a"}) == "factgate"  # ours, missing a field: refused in our names


def test_ragas_rows_become_answers_with_numbered_sources_and_row_ids() -> None:
    old = {"id": 7, "question": "q?", "answer": "Water boils at 100 C [1].", "contexts": ["Water boils."]}
    rows = parse_citation_lines([json.dumps(RAGAS_ROW), "", json.dumps(old)])
    assert [r.id for r in rows] == ["row-1", "7"]
    assert all(r.input_format == "ragas" for r in rows)
    first = rows[0].entry
    assert first.question == RAGAS_ROW["user_input"] and first.answer == RAGAS_ROW["response"]
    assert [(s.id, s.text) for s in first.sources] == [
        ("1", "The Eiffel Tower was completed in 1889."),
        ("2", "It stands 330 metres tall."),
    ]
    assert first.unmarked is True and rows[1].entry.unmarked is False


def test_deepeval_test_cases_take_their_name_as_id() -> None:
    (row,) = validate_citation_rows([DEEPEVAL_ROW])
    assert row.id == "eiffel" and row.input_format == "deepeval" and not row.entry.unmarked
    unnamed = validate_citation_rows([{**DEEPEVAL_ROW, "name": None}, {**DEEPEVAL_ROW, "name": None}])
    assert [r.id for r in unnamed] == ["row-1", "row-2"]


def test_bad_rows_are_named_by_line_and_their_own_field_names() -> None:
    errors = _errors(
        [
            {**RAGAS_ROW, "retrieved_contexts": ["ok", 3]},
            {"user_input": "q", "retrieved_contexts": []},
            {**RAGAS_ROW, "answer": "both", "faithfulness": 0.9},
        ]
    )
    assert errors[0] == 'line 1: field "retrieved_contexts[1]": must be a string, got 3'
    assert 'line 2: field "response": is required' in errors
    assert any(
        e.startswith('line 2: field "retrieved_contexts": must hold at least one context') for e in errors
    )
    assert any(
        e.startswith('line 3: field "faithfulness": unknown field (allowed: id, user_input') for e in errors
    )
    assert 'line 3: field "answer": give response or answer, not both' in errors
    deepeval = _errors([{**DEEPEVAL_ROW, "retrieval_context": None}, {**DEEPEVAL_ROW, "name": "eiffel"}])
    assert deepeval[0].startswith('line 1: field "retrieval_context": is required')
    assert deepeval[1] == 'line 2: field "name": duplicate id "eiffel" (first on line 1)'


def test_one_format_a_body_and_input_format_names_it() -> None:
    mixed = _errors([RAGAS_ROW, DEEPEVAL_ROW])
    assert mixed == [
        "line 2: is a DeepEval row, but this body's rows are RAGAS (one format a body: its first row decides "
        "it unless the input_format option names it)"
    ]
    named = _errors([RAGAS_ROW], input_format="deepeval")
    assert named == [
        "line 1: is a RAGAS row, but this body's rows are DeepEval (the input_format option says so)"
    ]
    assert 'line 1: field "actual_output": is required' in _errors(
        [{"input": "q", "retrieval_context": ["c"]}], input_format="deepeval"
    )
    assert parse_options({"input_format": "ragas"}).as_dict()["input_format"] == "ragas"
    assert "input_format" not in parse_options({}).as_dict()  # auto: the stored options stay as they were
    with pytest.raises(OptionsError) as info:
        parse_options({"input_format": "csv"})
    assert info.value.field == "input_format"


def test_factgate_rows_keep_their_markers_and_their_uncited_sentences() -> None:
    row = {"id": "a", "answer": "No markers here.", "sources": [{"text": "Something."}]}
    (parsed,) = parse_citation_lines([json.dumps(row)])
    assert parsed.input_format == "factgate" and parsed.entry.unmarked is False


def test_an_unmarked_answer_is_checked_against_every_source_and_left_out_of_citation_metrics() -> None:
    sources = [CitationSource(id="1", text="Alpha holds."), CitationSource(id="2", text="Beta holds.")]
    entry = CitationEntry(answer="Alpha holds. Beta holds.", sources=sources, unmarked=True)
    plans = plan_sentences(entry, misattribution=True)
    assert [p.cited for p in plans] == [["1", "2"], ["1", "2"]]
    assert all(p.unmarked and {x.role for x in p.passages} == {"cited"} for p in plans)
    cut = CitationCutoffs()
    supported = judge(
        plans[0], SentenceScore(checkable=0.9, supports={"1": 0.9, "2": 0.1}, contradicts={}), cut
    )
    unsupported = judge(
        plans[1], SentenceScore(checkable=0.9, supports={"1": 0.1, "2": 0.2}, contradicts={}), cut
    )
    assert supported.label == "supported" and supported.unmarked
    assert unsupported.label == "unsupported"  # not "uncited": it was checked against every source
    assert relabel(unsupported, cut).unmarked
    m = metrics_of([supported, unsupported])
    assert (m.checkable, m.unmarked, m.citations, m.uncited) == (2, 2, 0, 0)
    assert m.supported_share == 0.5
    assert m.citation_recall is None and m.citation_precision is None and m.uncited_rate is None
    marked = entry.model_copy(update={"answer": "Alpha holds [1]. Beta holds.", "unmarked": False})
    own = plan_sentences(marked, misattribution=True)
    assert [p.cited for p in own] == [["1"], []]
    judged = [
        judge(own[0], SentenceScore(checkable=0.9, supports={"1": 0.9, "2": 0.1}, contradicts={}), cut),
        judge(own[1], SentenceScore(checkable=0.9, supports={"1": 0.1, "2": 0.1}, contradicts={}), cut),
    ]
    total = add_metrics([m, metrics_of(judged)])
    assert total.checkable == 4 and total.unmarked == 2
    assert total.citation_recall == 0.5 and total.uncited_rate == 0.5  # over the 2 marked sentences


def test_the_job_note_says_how_the_rows_were_read() -> None:
    rows = parse_citation_lines([json.dumps(RAGAS_ROW)])
    (note,) = rows_note(rows, "auto")
    assert note.startswith("rows read as RAGAS (detected): response is the answer, retrieved_contexts")
    assert "1 of 1 answers have no [n] markers" in note
    assert rows_note(parse_citation_lines([json.dumps(RAGAS_ROW)], input_format="ragas"), "ragas")[
        0
    ].startswith("rows read as RAGAS (input_format)")
    own = {"id": "a", "answer": "A [1].", "sources": [{"text": "A."}]}
    assert rows_note(parse_citation_lines([json.dumps(own)]), "auto") == []


def test_a_document_is_ndjson_an_array_or_an_object_holding_the_cases() -> None:
    assert read_document(b'{"a": 1}\n{"a": 2}\n').shape == "ndjson"
    assert read_document(b'{"id": "x", "items": 3}').shape == "ndjson"  # one row, not a container
    array = read_document(b'\xef\xbb\xbf [{"a": 1}, {"a": 2}]')
    assert array.shape == "json" and array.items == [{"a": 1}, {"a": 2}] and array.container is None
    cases = read_document(json.dumps({"test_cases": [DEEPEVAL_ROW]}).encode())
    assert cases.container == "test_cases" and cases.items == [DEEPEVAL_ROW]
    assert read_document(json.dumps({"goldens": []}).encode()).container == "goldens"


def test_the_example_files_read_as_their_formats() -> None:
    ragas = parse_citation_lines((EXAMPLES / "ragas.jsonl").read_bytes().splitlines())
    assert ragas and {r.input_format for r in ragas} == {"ragas"}
    document = read_document((EXAMPLES / "deepeval.json").read_bytes())
    deepeval = validate_citation_rows(document.items)
    assert deepeval and {r.input_format for r in deepeval} == {"deepeval"}
