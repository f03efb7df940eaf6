"""CSV uploads become the NDJSON rows the kinds' row checkers read, on the lines they came from."""

from __future__ import annotations

import json

import pytest

from checks import claims as claim_rules
from checks import questions as question_rules
from checks.csv_rows import CsvError, csv_ndjson_lines


def rows(lines: list[bytes], kind: str = "claims") -> list[object]:
    """The produced lines, decoded: None for a blank line, else the row object."""
    return [json.loads(line) if line else None for line in csv_ndjson_lines(lines, kind)]


def test_claims_rows_keep_their_line_numbers_and_labels() -> None:
    out = rows([b"\xef\xbb\xbfid,claim,label", b"a,Rust 1.0 came out in 2015.,TRUE", b"b,Git is old,false"])
    assert out == [
        None,
        {"id": "a", "claim": "Rust 1.0 came out in 2015.", "label": True},
        {"id": "b", "claim": "Git is old", "label": False},
    ]


def test_empty_optional_cells_are_left_out_and_columns_may_come_in_any_order() -> None:
    out = rows([b"claim,id,label,source", b"Some claim,c1,,", b"Other,c2,true,https://example.com"])
    assert out[1] == {"claim": "Some claim", "id": "c1"}
    assert out[2] == {"claim": "Other", "id": "c2", "label": True, "source": "https://example.com"}


def test_a_quoted_field_over_two_lines_keeps_the_next_record_on_its_own_line() -> None:
    out = rows([b"id,claim", b'a,"two', b'lines"', b"", b"c,third"])
    assert out == [None, {"id": "a", "claim": "two\nlines"}, None, None, {"id": "c", "claim": "third"}]


def test_question_kinds_read_id_and_question() -> None:
    out = rows([b"id,question", b'q1,"Who won, and why?"'], "quote")
    assert out == [None, {"id": "q1", "question": "Who won, and why?"}]


def test_row_problems_are_named_by_the_checker_on_the_csv_line() -> None:
    lines = [b"id,claim,label", b"a,fine,true", b"b,,maybe"]
    with pytest.raises(claim_rules.ClaimsValidationError) as caught:
        claim_rules.parse_ndjson_lines(csv_ndjson_lines(lines, "claims"), max_rows=10, max_claim_bytes=4096)
    messages = [str(e) for e in caught.value.errors]
    assert 'line 3: field "claim": must not be empty' in messages
    assert any(m.startswith('line 3: field "label": must be true or false') for m in messages)


def test_question_rows_are_checked_on_their_line_too() -> None:
    with pytest.raises(question_rules.QuestionsValidationError) as caught:
        question_rules.parse_question_lines(csv_ndjson_lines([b"id,question", b"q1,"], "answer"), max_rows=5)
    assert str(caught.value.errors[0]).startswith('line 2: field "question"')


@pytest.mark.parametrize(
    ("lines", "kind", "expected"),
    [
        ([b"id,text"], "claims", 'line 1: unknown column "text" (allowed: id, claim, label, kind, source)'),
        ([b"id,label"], "claims", 'line 1: column "claim": is missing from the header'),
        ([b"id,claim,id"], "claims", 'line 1: column "id": appears twice in the header'),
        ([b"id,claim"], "answer", 'line 1: unknown column "claim" (allowed: id, question)'),
        ([b"", b"id,claim"], "claims", "line 1: must be the header (for example id,claim)"),
        ([], "claims", "line 1: the file is empty; line 1 must be the header (id,claim)"),
        ([b"id,claim", b"a,b,c"], "claims", "line 2: has 3 fields; the header has 2"),
        ([b"id,claim", b"a,ok", b"b"], "claims", "line 3: has 1 fields; the header has 2"),
        ([b"id,claim", b"a,\xff"], "claims", "line 2: is not valid UTF-8 (byte 3)"),
        ([b"id,claim", b'a,"open', b'still"x'], "claims", "line 3: is not valid CSV"),
    ],
)
def test_what_only_csv_can_get_wrong_names_its_line(lines: list[bytes], kind: str, expected: str) -> None:
    with pytest.raises(CsvError) as caught:
        list(csv_ndjson_lines(lines, kind))
    assert str(caught.value).startswith(expected), str(caught.value)


def test_lines_are_read_lazily() -> None:
    """An error on line 3 is raised only when line 3 is reached: nothing is read ahead of need."""
    produced = csv_ndjson_lines(iter([b"id,claim", b"a,b", b"a,b,c"]), "claims")
    assert next(produced) == b""
    assert json.loads(next(produced)) == {"id": "a", "claim": "b"}
    with pytest.raises(CsvError):
        next(produced)
