"""CSV rows into the claims and questions checks: line numbers, header rules, cells to fields."""

from __future__ import annotations

import pytest

from checks import claims as claim_rules
from checks import questions as question_rules


def lines(text: str) -> list[bytes]:
    """The lines web/body.py:iter_body_lines would yield: split at newlines, no empty last line."""
    return text.removesuffix("\n").encode().split(b"\n")


def claims(text: str) -> list[claim_rules.ClaimRow]:
    rows: list[claim_rules.ClaimRow] = []
    claim_rules.stream_rows(lines(text), rows, body_format="csv")
    return rows


def problems(text: str) -> list[str]:
    with pytest.raises(claim_rules.ClaimsValidationError) as info:
        claims(text)
    return [str(e) for e in info.value.errors]


def test_cells_become_the_fields_of_a_row() -> None:
    got = claims('source,label,claim,id,kind\n,TRUE,"A, quoted ""claim""",c1,\nhttps://x.org,,B.,c2,recent\n')
    assert got == [
        claim_rules.ClaimRow("c1", 'A, quoted "claim"', True, None, None),
        claim_rules.ClaimRow("c2", "B.", None, "recent", "https://x.org"),
    ]


def test_a_record_is_named_by_the_line_it_starts_on() -> None:
    text = 'id,claim\nc1,"two\nlines"\n\nc2,\n'
    assert problems(text) == ['line 5: field "claim": must not be empty']


def test_short_records_have_empty_cells_and_long_ones_are_refused() -> None:
    assert problems("id,claim\nc1\nc2,B.,extra\n") == [
        'line 2: field "claim": must not be empty',
        "line 3: has 3 cells, the header names 2 columns",
    ]


def test_row_limit_stops_reading() -> None:
    rows: list[claim_rules.ClaimRow] = []
    with pytest.raises(claim_rules.ClaimsValidationError) as info:
        claim_rules.stream_rows(lines("id,claim\na,A.\nb,B.\nc,C.\n"), rows, body_format="csv", max_rows=2)
    assert [str(e) for e in info.value.errors] == ["line 4: too many claims: the limit is 2 per batch"]


def test_questions_header_must_name_both_columns() -> None:
    with pytest.raises(question_rules.QuestionsValidationError) as info:
        question_rules.stream_question_rows(lines("id\nq1\n"), [], body_format="csv")
    assert "line 1: the header must name the column(s) question" in str(info.value.errors[0])


def test_valid_rows_stop_reaching_the_sink_after_the_first_problem() -> None:
    """A streamed load never copies a row once the batch is lost (it is rolled back anyway)."""
    rows: list[claim_rules.ClaimRow] = []
    with pytest.raises(claim_rules.ClaimsValidationError):
        claim_rules.stream_rows(lines("id,claim\na,A.\nb,\nc,C.\n"), rows, body_format="csv")
    assert [r.id for r in rows] == ["a"]
