"""Question rows of `answer`/`quote` jobs (checks/questions.py) and their options (checks/options.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.options import (
    CUTOFFS_MODEL,
    OptionsError,
    QuestionsOptions,
    cutoffs_model_note,
    parse_claims_options,
    parse_questions_options,
)
from checks.pricing import DEFAULT_MODEL
from checks.questions import (
    MAX_QUESTION_BYTES,
    MAX_QUESTION_ID_CHARS,
    QuestionRow,
    QuestionsValidationError,
    parse_question_lines,
    validate_question_rows,
)
from jobs.stages import question_units


def errors_of(objs: list[object], **kwargs: int) -> list[tuple[int | None, str | None, str]]:
    with pytest.raises(QuestionsValidationError) as info:
        validate_question_rows(objs, **kwargs)
    return [(e.line, e.field, e.message) for e in info.value.errors]


def test_valid_rows_keep_their_order_and_text() -> None:
    rows = validate_question_rows([{"id": "b", "question": " Why? "}, {"id": "a", "question": "How?"}])
    assert rows == [QuestionRow("b", " Why? "), QuestionRow("a", "How?")]


def test_every_bad_row_is_named_and_nothing_is_returned() -> None:
    errors = errors_of(
        [
            {"id": "a", "question": "ok"},
            {"id": "a", "question": "dup"},
            {"question": "no id"},
            {"id": "c", "question": ""},
            "not an object",
            {"id": "d", "question": "x", "label": True},
        ]
    )
    assert [(line, field) for line, field, _ in errors] == [
        (2, "id"),
        (3, "id"),
        (4, "question"),
        (5, None),
        (6, "label"),
    ]
    assert "first on item 1" in errors[0][2]


def test_limits_on_size_and_id() -> None:
    assert validate_question_rows([{"id": "a", "question": "x" * MAX_QUESTION_BYTES}])
    (error,) = errors_of([{"id": "a", "question": "€" * (MAX_QUESTION_BYTES // 3 + 1)}])
    assert error[1] == "question" and "bytes" in error[2]
    assert validate_question_rows([{"id": "i" * MAX_QUESTION_ID_CHARS, "question": "q"}])
    (error,) = errors_of([{"id": "i" * (MAX_QUESTION_ID_CHARS + 1), "question": "q"}])
    assert error[1] == "id"
    (error,) = errors_of([{"id": "a\nb", "question": "q"}])
    assert "control" in error[2]
    (error,) = errors_of([{"id": "a", "question": "nul\x00"}])
    assert "NUL" in error[2]


def test_too_many_and_none() -> None:
    (error,) = errors_of([{"id": str(i), "question": "q"} for i in range(3)], max_rows=2)
    assert error[0] is None and "too many questions" in error[2]
    (error,) = errors_of([])
    assert error[2] == "no questions"


def test_ndjson_lines_are_numbered_with_blank_lines_counted() -> None:
    lines = [b'\xef\xbb\xbf{"id": "a", "question": "q"}', b"", b"{oops", b'{"id": "b"}', b"\xff"]
    with pytest.raises(QuestionsValidationError) as info:
        parse_question_lines(lines)
    assert [(e.line, e.unit) for e in info.value.errors] == [(3, "line"), (4, "line"), (5, "line")]
    assert parse_question_lines([b'{"id": "a", "question": "q"}', b"  "]) == [QuestionRow("a", "q")]


def test_ndjson_stops_reading_past_the_limit() -> None:
    def lines() -> object:
        n = 0
        while True:  # an endless upload: reading must stop at the first row past the limit
            n += 1
            yield json.dumps({"id": str(n), "question": "q"}).encode()

    with pytest.raises(QuestionsValidationError) as info:
        parse_question_lines(lines(), max_rows=5)  # type: ignore[arg-type]
    assert [e.line for e in info.value.errors] == [6]


# The filtered text strategy is slow to draw on a loaded 2-core host (Hypothesis's too_slow health check
# failed it twice there, never the property itself): the check says nothing about the code under test.
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.text(st.characters(categories=("L", "N", "P")), min_size=1, max_size=20),
            st.text(min_size=1, max_size=50).filter(lambda s: s.strip() and "\x00" not in s),
        ),
        min_size=1,
        max_size=10,
        unique_by=lambda t: t[0],
    )
)
def test_valid_batches_round_trip_through_ndjson(pairs: list[tuple[str, str]]) -> None:
    objs = [{"id": i, "question": q} for i, q in pairs]
    lines = [json.dumps(o).encode() for o in objs]
    assert (
        parse_question_lines(lines) == validate_question_rows(objs) == [QuestionRow(i, q) for i, q in pairs]
    )


def test_units_are_one_question_item_per_row_with_the_kind() -> None:
    units = question_units([QuestionRow("a", "Why?")], "quote")
    assert [(u.stage, u.custom_id, u.mode, u.input) for u in units] == [
        ("question", "a", "", {"kind": "quote", "question": "Why?"})
    ]
    with pytest.raises(ValueError, match="not a question kind"):
        question_units([], "claims")


def test_answer_and_quote_default_to_the_model_their_cutoffs_were_measured_on() -> None:
    # docs/spec.md §7.2-§7.3: the cutoffs and recorded outcomes are from pplx-decider-v1.1-27b.
    assert CUTOFFS_MODEL == "pplx-decider-v1.1-27b" != DEFAULT_MODEL
    assert parse_questions_options(None).as_dict() == {
        "model": CUTOFFS_MODEL,
        "budget_usd": None,
        "priority": "batch",
        "pack_size": 1,
    }
    assert parse_questions_options({"model": ""}).model == CUTOFFS_MODEL
    assert QuestionsOptions().model == CUTOFFS_MODEL
    assert cutoffs_model_note(CUTOFFS_MODEL) is None
    # Claims keep their own default: their cutoffs were recorded on it (docs/spec.md §7.1).
    assert parse_claims_options(None).model == DEFAULT_MODEL


def test_another_model_is_used_and_every_report_gets_to_say_so() -> None:
    assert parse_questions_options({"model": "pplx-decider-latest"}).model == "pplx-decider-latest"
    note = cutoffs_model_note("pplx-decider-latest")
    assert note is not None
    assert "measured on pplx-decider-v1.1-27b" in note and "this job used pplx-decider-latest" in note


def test_options_model_and_budget() -> None:
    opts = parse_questions_options({"model": "pplx-decider-flash-v1.2", "budget_usd": "0.25"})
    assert (opts.model, opts.budget_usd) == ("pplx-decider-flash-v1.2", 0.25)
    for raw, field in (
        ({"model": "gpt-4"}, "model"),
        ({"budget_usd": 0}, "budget_usd"),
        ({"budget_usd": "lots"}, "budget_usd"),
        ({"compare_min": 0.5}, "compare_min"),
        ({"mode": "grounded"}, "mode"),
    ):
        with pytest.raises(OptionsError) as info:
            parse_questions_options(raw)
        assert info.value.field == field


@pytest.mark.parametrize("parse", [parse_questions_options, parse_claims_options])
def test_priority_is_interactive_or_batch_and_defaults_to_batch(parse: Any) -> None:
    assert parse({}).priority == "batch"
    assert parse({"priority": "interactive"}).priority == "interactive"
    with pytest.raises(OptionsError) as info:
        parse({"priority": "urgent"})
    assert info.value.field == "priority" and "interactive, batch" in info.value.message


def test_question_ids_with_a_bidi_override_are_refused() -> None:
    with pytest.raises(QuestionsValidationError) as info:
        validate_question_rows([{"id": "q\u202e1", "question": "How deep is the Mariana Trench?"}])
    assert info.value.errors[0].field == "id" and "bidi" in info.value.errors[0].message
