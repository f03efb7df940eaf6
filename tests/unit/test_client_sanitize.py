"""clients.sanitize on its own: what it removes, keeps, replaces and cuts, and the paths it records."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from clients import sanitize
from clients.sanitize import (
    ANSWER_TEXT,
    CONTROLS,
    DATE,
    MODEL,
    REQUEST_ID,
    SNIPPET,
    TITLE,
    URL,
    Sanitizer,
    TextField,
    clean,
    is_storable,
    storable_chars,
)
from models import ApiCall

ALL_FIELDS = [MODEL, REQUEST_ID, sanitize.SEARCH_ID, URL, TITLE, DATE, SNIPPET, ANSWER_TEXT]
ALL_FIELDS += [sanitize.LEGEND, sanitize.ERROR]


def assert_storable(text: str) -> None:
    """What Postgres needs of text and JSONB strings: valid UTF-8 and no NUL."""
    text.encode("utf-8")  # raises on a lone surrogate
    assert "\x00" not in text


def test_controls_are_exactly_unicode_general_category_cc() -> None:
    every_cc = {chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cc"}
    assert set(CONTROLS) == every_cc


def test_the_model_and_request_id_caps_fit_their_columns() -> None:
    columns = ApiCall.__table__.c
    assert MODEL.cap == columns.model.type.length == 64
    assert REQUEST_ID.cap == columns.request_id.type.length == 128


def test_one_line_fields_lose_every_control_and_keep_words_apart() -> None:
    raw = "Breaking\nNews\t–\x00 a\x07b\r\nc\x7fd\x85e\u2028f\x9b"
    assert clean(raw, TITLE) == "Breaking News – ab  cd e f"
    assert not set(clean("".join(CONTROLS), TITLE)) - {" "}


def test_long_text_keeps_newlines_and_tabs_and_unifies_line_breaks() -> None:
    raw = "one\r\ntwo\rthree\x0cfour\n\tfive\x00six\x1b[0m"
    assert clean(raw, SNIPPET) == "one\ntwo\nthree\nfour\n\tfivesix[0m"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a\ud800b", "a\ufffdb"),
        ("\udfff", "\ufffd"),
        ("\ude00\ud83d", "\ufffd\ufffd"),  # a pair in the wrong order is two lone halves
        ("\ud83d\ude00", "\U0001f600"),  # a pair that arrived as two code points is joined
        ("x\udc80y", "x\ufffdy"),  # an invalid UTF-8 byte decoded with surrogateescape
    ],
)
def test_lone_surrogates_become_the_replacement_character(raw: str, expected: str) -> None:
    for field in (TITLE, SNIPPET):
        assert clean(raw, field) == expected
        assert_storable(clean(raw, field))


def test_a_cut_keeps_an_exact_prefix_of_whole_characters() -> None:
    emoji = "\U0001f600" * 100  # 4 UTF-8 bytes each: a byte cut would split one
    cut = clean(emoji, MODEL)
    assert cut == "\U0001f600" * 64 and cut.encode("utf-8").decode("utf-8") == cut
    long_id = "req-" + "0123456789abcdef" * 400
    assert clean(long_id, REQUEST_ID) == long_id[:128]
    assert len(clean("x" * 200_000, ANSWER_TEXT)) == 100_000


@pytest.mark.parametrize("field", ALL_FIELDS)
def test_every_field_cleans_to_a_storable_value_within_its_cap(field: TextField) -> None:
    hostile = ("\x00\ud800 word\n\x1f" * 50_000)[: field.cap * 2 + 7]
    out = clean(hostile, field)
    assert_storable(out)
    assert len(out) <= field.cap
    assert is_storable(out, field)
    assert not is_storable(hostile, field)


def test_clean_text_comes_back_unchanged() -> None:
    text = "Python 3.12 — «released» 2023-10-02\n\tnaïve 東京 \U0001f600"
    assert storable_chars(text, multiline=True) is text
    assert clean(text, SNIPPET) == text
    assert clean("sonar-pro", MODEL) == "sonar-pro"


def test_sanitizer_names_each_changed_field_by_path() -> None:
    s = Sanitizer()
    assert s.text("sonar", MODEL, "model") == "sonar"
    assert s.text("son\x00ar", MODEL, "model") == "sonar"
    assert s.optional(None, DATE, "results[0].date") is None
    assert s.optional("2024\x00", DATE, "results[0].date") == "2024"
    assert s.changed == ["model", "results[0].date"]


def test_sanitizer_cleans_json_values_keys_included() -> None:
    s = Sanitizer()
    legend = {"0": "poor", "1": "fa\x00ir", "2\x00": ["good", "gr\ud800eat"], "3": 7}
    out = s.json(legend, sanitize.LEGEND, "answers.grade.legend")
    assert out == {"0": "poor", "1": "fair", "2": ["good", "gr\ufffdeat"], "3": 7}
    assert s.changed == [
        "answers.grade.legend['1']",
        "answers.grade.legend['2']",
        "answers.grade.legend['2'][1]",
    ]
