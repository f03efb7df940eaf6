"""The web grounding query rule. The parametrised cases are the gateway's own acceptance cases (docs/spec.md
§1), restated against our port; the properties pin the invariants every query must keep."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks.grounding import (
    GO_TRIM_SPACE,
    MAX_DROPPED_CUT,
    MAX_QUERY_BYTES,
    QueryPart,
    claim_in_query,
    is_data_url,
    is_separator,
    normalize_prefix,
    search_query,
)

IS_TRUE = {"type": "noul", "instructions": "Is the claim true?"}
MANY_WORDS = "word " * 200
WORDY_QUESTION = {"type": "noul", "instructions": MANY_WORDS}
PYTHON_CLAIM = "Python 3.12 was released in October 2023."

# Neutral single-spaced ASCII text with nothing in common with any claim under test.
FILLER = (
    "The reading room closes early on Thursday while the carpets are cleaned. Lockers on the ground "
    "floor move to the east wing, and the printers get new toner before the exam period begins. "
)


def padded(claim: str, before: int, after: int) -> str:
    """The claim on its own line, `before` characters of filler above it and `after` below."""

    def filler(n: int) -> list[str]:
        return [(FILLER * (n // len(FILLER) + 1))[:n]] if n else []

    return "\n".join([*filler(before), claim, *filler(after)])


def nbytes(s: str) -> int:
    return len(s.encode("utf-8"))


@pytest.mark.parametrize(
    ("s", "n", "expected", "truncated"),
    [
        ("  a \t\n b  ", 100, "a b", False),
        ("a  b", 2, "a", True),  # no room for a separator plus a byte: stop
        ("é é", 3, "é", True),  # a code point is never split
        ("   ", 10, "", False),
        ("a" + " " * (1 << 20) + "b", 2, "a", True),
        (" b", 1, "b", False),
        ("a\x00\x1b[0m\x7fb", 100, "a [0m b", False),  # control characters separate words
        ("alpha shipping", 10, "alpha", True),  # a word the limit cuts is dropped
        ("ab cd", 4, "ab", True),  # reaching the limit mid-word drops that word
        ("ab cd e", 5, "ab cd", True),  # a complete last word stays
        ("shipping news", 4, "", True),  # a short fragment goes even when it is the only word
        ("a b", 3, "a b", False),
        ("a " + "x" * 40, MAX_DROPPED_CUT + 2, "a " + "x" * MAX_DROPPED_CUT, True),  # long cut word: prefix
    ],
)
def test_normalize_prefix_gateway_cases(s: str, n: int, expected: str, truncated: bool) -> None:
    assert normalize_prefix(s, n) == (expected, truncated)


@pytest.mark.parametrize(
    ("s", "n", "expected"),
    [
        ("a ", 2, ("a", False)),  # one trailing separator with a byte to spare: nothing was cut
        ("a  ", 2, ("a", True)),  # the gateway's loop stops at the second one and reports a cut
        ("ab ", 2, ("ab", True)),  # a full output meeting a separator stops too
        ("ab", 2, ("ab", False)),
        ("", 0, ("", False)),
        ("a", 0, ("", True)),
        ("x" * 31 + "y", 31, ("", True)),  # 31 bytes of a cut word are not enough
        ("漢" * 11, 32, ("", True)),  # 10 whole code points are 30 bytes: under MAX_DROPPED_CUT
    ],
)
def test_normalize_prefix_edges(s: str, n: int, expected: tuple[str, bool]) -> None:
    assert normalize_prefix(s, n) == expected


def test_unspaced_prefix_kept_once_32_bytes_fit() -> None:
    assert normalize_prefix("漢" * 20, 33) == ("漢" * 11, True)  # 33 bytes of 3-byte code points


def test_query_part_stays_a_prefix_after_a_cut() -> None:
    part = QueryPart(12)
    part.add("Order shipping")
    part.add("late")
    assert part.text == "Order"  # "late" would fit, but must not fill the dropped word's gap


def test_query_is_capped_and_budgets_split() -> None:
    query = search_query(MANY_WORDS, WORDY_QUESTION)
    assert nbytes(query) <= MAX_QUERY_BYTES
    assert query.startswith("word word")
    assert not query.endswith(" ")
    half = MAX_QUERY_BYTES // 2 // len("word ")
    whole = MAX_QUERY_BYTES // len("word ")
    assert search_query("Order", WORDY_QUESTION) == ("word " * half).strip() + " Order"  # question gets half
    assert search_query("", WORDY_QUESTION) == ("word " * whole).strip()  # no state: the whole budget
    microsoft = search_query("Microsoft fiscal 2025", WORDY_QUESTION)
    assert microsoft != search_query("Apple fiscal 2025", WORDY_QUESTION)
    assert microsoft.endswith(" Microsoft fiscal 2025")


def test_query_searches_the_start_of_a_long_state() -> None:
    text = "Did Microsoft's fiscal 2023 revenue exceed $240 billion?"
    trajectory = "step: the agent read a page and wrote notes. " * 50
    query = search_query(trajectory, {"type": "noul", "instructions": text})
    assert query.startswith(text + " step: the agent read a page and wrote notes.")
    assert nbytes(query) <= MAX_QUERY_BYTES
    state_only = search_query(trajectory, {"type": "noul"})  # no question text: all of it is the state
    assert state_only == trajectory.strip()[: len(state_only)]
    assert 200 < nbytes(state_only) <= MAX_QUERY_BYTES


def test_query_keeps_an_unspaced_state_prefix() -> None:
    state = "注文番号12は配送が遅れました" * 20
    query = search_query(state, {"type": "noul", "instructions": "Was the order late?"})
    assert nbytes(query) <= MAX_QUERY_BYTES
    assert query.startswith("Was the order late? " + state[:14])


@pytest.mark.parametrize(
    ("state", "question", "expected"),
    [
        (
            "  Order   #12\nshipped late ",
            {"type": "noul", "instructions": "Was it late?"},
            "Was it late? Order #12 shipped late",
        ),
        ("data:text/plain,claim", IS_TRUE, "Is the claim true?"),  # a data: state is skipped
        ("claim", {"type": "noul", "instructions": " DATA:text/plain,q"}, "claim"),  # so is a data: question
        ("claim", {"type": "noul", "instructions": None}, "claim"),
        # \x1c is not in Go's TrimSpace set, so this state is not a data: URL to the gateway
        ("\x1cdata:text/plain,claim", IS_TRUE, "Is the claim true? data:text/plain,claim"),
        ("\u3000data:text/plain,claim", IS_TRUE, "Is the claim true?"),  # the ideographic space is in it
    ],
)
def test_search_query_normalizes_and_skips_data_urls(
    state: str, question: dict[str, object], expected: str
) -> None:
    assert search_query(state, question) == expected


@pytest.mark.parametrize(
    ("state", "question"),
    [
        ("x", {"type": "noul", "instructions": "Is it true?", "criteria": {"true": "yes", "false": "no"}}),
        ("x", {"type": "noul", "instructions": {"ask": "Is it true?"}}),
        ("x", {"type": "choice", "instructions": "Pick one.", "options": ["a", "b"]}),
        ("x", {"type": "score", "instructions": "Rate it."}),
        ("x", {"instructions": "Is it true?"}),  # no type
        ("x", {"type": "NOUL", "instructions": "Is it true?"}),  # the type must match exactly
        (["x"], IS_TRUE),
        ({"claim": "x"}, IS_TRUE),
    ],
)
def test_search_query_refuses_shapes_it_does_not_port(state: object, question: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        search_query(state, question)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "inside"),
    [
        (PYTHON_CLAIM, True),
        ("Python  3.12 was released\nin October 2023.", True),  # the claim is normalised the same way
        (padded(PYTHON_CLAIM, 0, 600), True),  # claim first: the filler comes after it
        (padded(PYTHON_CLAIM, 150, 0), True),  # 18 + 1 + 150 + 1 + 41 bytes fit
        (padded(PYTHON_CLAIM, 200, 0), False),  # the limit cuts the claim's last word
        (padded(PYTHON_CLAIM, 600, 0), False),  # the claim starts past the limit
    ],
)
def test_claim_in_query_depends_on_where_the_claim_sits(state: str, inside: bool) -> None:
    assert claim_in_query(PYTHON_CLAIM, state, IS_TRUE) is inside


def test_a_cut_claim_keeps_only_its_start() -> None:
    query = search_query(padded(PYTHON_CLAIM, 200, 0), IS_TRUE)
    assert query.endswith(" Python 3.12 was released in October")
    assert nbytes(query) <= MAX_QUERY_BYTES
    assert "Python" not in search_query(padded(PYTHON_CLAIM, 600, 0), IS_TRUE)


def test_is_data_url_uses_go_trim_space() -> None:
    assert is_data_url("\t\u2029 Data:x")
    assert not is_data_url("\x1fdata:x")  # Python's strip() would remove \x1f; Go's TrimSpace does not
    assert "\x1f" not in GO_TRIM_SPACE
    assert not is_data_url("dat a:")


def test_separator_set_is_whitespace_plus_control_characters() -> None:
    """The hand-written separator class must equal isspace() or category Cc over all of Unicode."""
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        expected = char.isspace() or unicodedata.category(char) == "Cc"
        assert is_separator(char) is expected, hex(code)


# --- properties -------------------------------------------------------------------------------------------

# Mix plain words, separators, multi-byte code points and data: prefixes so cuts land everywhere.
PIECES = st.sampled_from(
    ["a", "word", " ", "  ", "\t", "\n", "\x00", "\x1c", "\x85", "\u3000", "é", "漢", "😀", "data:", "x" * 40]
)
TEXTS = st.one_of(st.lists(PIECES, max_size=120).map("".join), st.text(max_size=400))
QUESTIONS = st.one_of(st.none(), TEXTS).map(lambda text: {"type": "noul", "instructions": text})


@settings(max_examples=200)
@given(state=TEXTS, question=QUESTIONS)
def test_query_fits_the_limit_and_is_clean_utf8(state: str, question: dict[str, object]) -> None:
    query = search_query(state, question)
    encoded = query.encode("utf-8")  # raises on a split or lone surrogate
    assert len(encoded) <= MAX_QUERY_BYTES
    assert encoded.decode("utf-8") == query
    assert query == query.strip()
    assert "  " not in query
    assert not any(is_separator(c) and c != " " for c in query)


@settings(max_examples=200)
@given(s=TEXTS, n=st.integers(min_value=0, max_value=300))
def test_normalize_prefix_is_a_bounded_prefix_of_the_full_normalisation(s: str, n: int) -> None:
    full, full_cut = normalize_prefix(s, len(s.encode("utf-8")) + 2)
    part, truncated = normalize_prefix(s, n)
    assert not full_cut
    assert nbytes(part) <= n
    assert full.startswith(part)
    if not truncated:
        assert part == full


@settings(max_examples=200)
@given(claim=TEXTS)
def test_a_short_claim_alone_is_always_in_its_query(claim: str) -> None:
    normalized, _ = normalize_prefix(claim, len(claim.encode("utf-8")))
    if is_data_url(claim) or nbytes(normalized) > MAX_QUERY_BYTES - nbytes("Is the claim true?") - 1:
        return  # data: URLs are never searched; long claims are the other tests' business
    assert claim_in_query(claim, claim, IS_TRUE)
