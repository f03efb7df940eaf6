"""The answer splitter: the docs/spec.md §3 rules one by one, then the never-drop-text property.

The property's invariant, for any input that splits:
- the concatenation of every sentence's text, with `[n]` markers then whitespace removed, equals the input
  with `**` removed, then markers removed, then whitespace removed (no text dropped, invented or
  reordered; moving markers after the final punctuation and dropping whitespace between sentences are
  the only normalisations);
- the concatenation of every sentence's `source_ids` equals the ids of the input's markers in order;
- each claim is its text without markers (modulo whitespace), and never empty;
- paragraph numbers start at 1 and rise by at most 1.
It raises `SplitError` exactly when the first paragraph holding anything is only markers.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from checks.answers import Sentence, SplitError, plain_claim, split_sentences

MARKER = re.compile(r"\[([0-9]+)\]")
WHITESPACE = re.compile(r"\s+")


def claims(text: str) -> list[str]:
    return [s.claim for s in split_sentences(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        ("Dr. Who", ["Dr.", "Who"]),  # the documented limit
        ("John J. Hopfield won.", ["John J. Hopfield won."]),
        ("J. Smith won. Next.", ["J. Smith won.", "Next."]),  # an initial at the paragraph start
        ("Plan B? Yes.", ["Plan B?", "Yes."]),  # only a "." can belong to an initial
        ("Made in the USA. Next.", ["Made in the USA.", "Next."]),  # a capital ending a word is no initial
        ("Fruit, e.g. apples. Colour, i.e. red. E.g. this. I.e. that.", None),
        ("Pi is 3.14 today. Next.", ["Pi is 3.14 today.", "Next."]),
        ("It said “done.” Next.", ["It said “done.”", "Next."]),
        ("It said 'done.' Next (really.) Last.", ["It said 'done.'", "Next (really.)", "Last."]),
        ("Wait... what?! Fine.", ["Wait...", "what?!", "Fine."]),
        ("No punctuation at all", ["No punctuation at all"]),
        ("**Bold** claim. Plain.", ["Bold claim.", "Plain."]),
        ("  \n\n  ", []),
        ("", []),
    ],
)
def test_sentence_ends(text: str, expected: list[str] | None) -> None:
    if expected is None:
        expected = ["Fruit, e.g. apples.", "Colour, i.e. red.", "E.g. this.", "I.e. that."]
    assert claims(text) == expected


def test_paragraphs_break_at_blank_lines_only() -> None:
    text = "First line\ncontinues. Second.\n\nNew paragraph.\n \t\nThird.\r\n\r\nFourth.\n\n\n\nFifth."
    sentences = split_sentences(text)
    assert [(s.claim, s.paragraph) for s in sentences] == [
        ("First line\ncontinues.", 1),
        ("Second.", 1),
        ("New paragraph.", 2),
        ("Third.", 3),
        ("Fourth.", 4),
        ("Fifth.", 5),
    ]


def test_markers_before_the_final_punctuation_move_after_it() -> None:
    sentences = split_sentences("Known fact [4]. Two cites [1][2]! Quoted “yes [3].” Spaced [5] . End")
    assert [s.text for s in sentences] == [
        "Known fact. [4]",
        "Two cites! [1][2]",
        "Quoted “yes.” [3]",
        "Spaced. [5]",
        "End",
    ]
    assert [s.source_ids for s in sentences] == [(4,), (1, 2), (3,), (5,), ()]


def test_markers_move_when_another_marker_follows_the_punctuation() -> None:
    sentences = split_sentences("Fact [1].[2] Next.")
    assert [(s.text, s.source_ids) for s in sentences] == [("Fact. [1][2]", (1, 2)), ("Next.", ())]


def test_a_marker_inside_a_number_is_not_moved() -> None:
    (sentence,) = split_sentences("Version [1].5 shipped")
    assert sentence.text == "Version [1].5 shipped"
    assert sentence.source_ids == (1,)


def test_trailing_and_inner_markers_belong_to_the_sentence() -> None:
    sentences = split_sentences("Alpha [1] and beta. [2] [3]\nGamma.[4]Delta. Epsilon. [5]")
    assert [(s.claim, s.source_ids) for s in sentences] == [
        ("Alpha and beta.", (1, 2, 3)),
        ("Gamma. Delta.", (4,)),  # a marker glued to the next word keeps them in one sentence
        ("Epsilon.", (5,)),
    ]


def test_repeated_markers_are_kept_in_order() -> None:
    (sentence,) = split_sentences("Same source twice. [2][2][1]")
    assert sentence.source_ids == (2, 2, 1)


def test_plain_claim_keeps_words_apart() -> None:
    assert plain_claim("a[1]b") == "a b"
    assert plain_claim("a [1][2] b") == "a b"
    assert plain_claim("[3] Fact. [1]") == "Fact."
    assert plain_claim("x [1].") == "x."
    assert plain_claim("one.[1]Two") == "one. Two"
    assert plain_claim("(see[1])") == "(see)"


def test_a_markers_only_paragraph_joins_the_sentence_before() -> None:
    sentences = split_sentences("Claim one. [1]\n\n[2] [3]\n\nClaim two.")
    assert sentences == [
        Sentence("Claim one. [1] [2] [3]", "Claim one.", (1, 2, 3), 1),
        Sentence("Claim two.", "Claim two.", (), 2),
    ]


def test_markers_with_no_sentence_before_them_fail_loudly() -> None:
    with pytest.raises(SplitError, match=r"\[1\]"):
        split_sentences("**[1]**\n\nClaim.")


# ---- Property: never drop or invent text -------------------------------------------------------------

TOKENS = [
    "Fact",
    "word",
    "J",
    "e.g",
    "i.e",
    "Dr",
    "3",
    "14",
    ".",
    ".",
    "!",
    "?",
    "”",
    "’",
    '"',
    "'",
    ")",
    "(",
    "[1]",
    "[23]",
    "[",
    "]",
    " ",
    " ",
    " ",
    "\n",
    "\n\n",
    "\n \n",
    "\t",
    "\u00a0",
    "**",
    "*",
]
answer_like = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)


def squash(text: str) -> str:
    return WHITESPACE.sub("", text)


def first_paragraph_is_only_markers(text: str) -> bool:
    for paragraph in re.split(r"\n[^\S\n]*\n", text.replace("**", "")):
        if paragraph.strip():
            return not squash(MARKER.sub("", paragraph))
    return False


def check_invariant(text: str) -> None:
    try:
        sentences = split_sentences(text)
    except SplitError:
        assert first_paragraph_is_only_markers(text)
        return
    assert not first_paragraph_is_only_markers(text)
    source = text.replace("**", "")
    assert squash(MARKER.sub("", " ".join(s.text for s in sentences))) == squash(MARKER.sub("", source))
    assert [n for s in sentences for n in s.source_ids] == [int(n) for n in MARKER.findall(source)]
    for s in sentences:
        assert s.claim and s.claim == s.claim.strip()
        assert s.text == s.text.strip()
        assert squash(s.claim) == squash(MARKER.sub("", s.text))
    paragraphs = [s.paragraph for s in sentences]
    assert all(b - a in (0, 1) for a, b in zip([1, *paragraphs], paragraphs, strict=False))
    if sentences:
        assert paragraphs[0] == 1


@settings(max_examples=120, deadline=None)
@given(answer_like)
@example("Fact [1]. [2]\n\n[3]")
@example("[1]\n\nFact.")
@example("e.g [1]. x")
def test_splitter_never_drops_or_invents_text(text: str) -> None:
    check_invariant(text)


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=60))
def test_splitter_never_drops_or_invents_arbitrary_text(text: str) -> None:
    check_invariant(text)
