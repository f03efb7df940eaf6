"""The quote finder's pure core (checks/quotes.py, docs/spec.md §4): splitter, request bodies, answer parsing,
selection and the run record. No network: answers are hand-made dicts shaped like the Decisions API's."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks import quotes
from checks.quotes import (
    COMPARE_MIN,
    MAX_DECISIONS_REQUESTS,
    MAX_SENTENCES,
    QUOTE_MIN,
    Candidate,
    QuoteAnswerError,
    QuoteRunRecord,
    SourceResult,
    compare_pool,
    compare_request,
    parse_compare_answers,
    parse_rank_answers,
    prepare_results,
    rank_request,
    search_request,
    select_quote,
    split_snippet,
)

MODEL = "pplx-decider-v1.1-27b"
PAGE = (
    "One sentence about the topic here. Another sentence about the topic. A third sentence about the topic."
)
PAGE_SENTENCES = (
    "One sentence about the topic here.",
    "Another sentence about the topic.",
    "A third sentence about the topic.",
)


# ---- helpers ------------------------------------------------------------------------------------------


def rank_answers(choice: str = "2", has_answer: float = 0.9, confidence: float = 0.8) -> dict[str, Any]:
    """A rank answer over PAGE's three sentences, the chosen option carrying 0.85."""
    others = {"1": 0.1, "2": 0.1, "3": 0.05}
    others[choice] = 0.85
    return {
        "best": {"type": "choice", "choice": choice, "probabilities": others, "confidence": confidence},
        "has_answer": {"type": "noul", "noul": has_answer},
    }


def compare_answers(*probabilities: float) -> dict[str, Any]:
    return {f"answers_{n}": {"type": "noul", "noul": p} for n, p in enumerate(probabilities, start=1)}


def source(index: int = 1, sentences: tuple[str, ...] = PAGE_SENTENCES, title: str = "T") -> SourceResult:
    return SourceResult(index, title, f"https://e{index}.com", " ".join(sentences), None, sentences)


def candidate(index: int, has_answer: float, sentence: str | None = None) -> Candidate:
    return Candidate(
        result_index=index,
        title=f"Result {index}",
        url=f"https://r{index}.com",
        date=None,
        sentence_number=1,
        sentence=sentence or f"Candidate sentence from result {index}.",
        p_best=0.9,
        confidence=0.9,
        has_answer=has_answer,
    )


def two_pages() -> list[dict[str, Any]]:
    """The two search results used by the flow tests: same text, a good and a weak page."""
    return [
        {"title": "Good page", "url": "https://a.com", "snippet": PAGE, "date": "2026-01-01"},
        {"title": "Weak page", "url": "https://b.com", "snippet": PAGE, "date": None},
    ]


def run_with_ranks(has_answer: dict[int, float]) -> QuoteRunRecord:
    """A run record with both pages searched and ranked (choice 2 each), has_answer by result index."""
    record = QuoteRunRecord("q?", MODEL)
    record.record_search(two_pages(), request_id="search-id")
    for index, value in has_answer.items():
        record.record_rank(
            index, rank_answers(has_answer=value), request_id=f"rank-{index}", input_tokens=100
        )
    return record


# ---- splitting ----------------------------------------------------------------------------------------


def test_split_handles_markdown_and_section_breaks() -> None:
    snippet = (
        "## History\nThe trench was first sounded in 1875 by HMS Challenger.\n...\n"
        "* **Depth** is about 10,935 metres at the deepest point. It is deeper than Everest is tall."
    )
    assert split_snippet(snippet) == [
        "The trench was first sounded in 1875 by HMS Challenger.",
        "**Depth** is about 10,935 metres at the deepest point.",
        "It is deeper than Everest is tall.",
    ]


def test_split_keeps_footnote_markers_with_their_sentence() -> None:
    snippet = "The deepest point is the Challenger Deep.^[1]^ It is deeper than Everest is tall.^[a]^"
    assert split_snippet(snippet) == [
        "The deepest point is the Challenger Deep.^[1]^",
        "It is deeper than Everest is tall.^[a]^",
    ]


def test_split_keeps_several_footnote_markers_together() -> None:
    snippet = "The trench lies in the western Pacific.^[1]^^[2]^ Its floor is nearly eleven km down."
    assert split_snippet(snippet) == [
        "The trench lies in the western Pacific.^[1]^^[2]^",
        "Its floor is nearly eleven km down.",
    ]


def test_empty_brackets_are_not_a_footnote_marker() -> None:
    snippet = "The trench lies in the western Pacific.^[]^ Its floor is nearly eleven km down."
    assert split_snippet(snippet) == [snippet]


def test_split_caps_at_the_choice_limit_keeping_page_order() -> None:
    snippet = " ".join(f"Sentence number {n} is long enough to keep." for n in range(300))
    sentences = split_snippet(snippet)
    assert len(sentences) == MAX_SENTENCES == 255
    assert sentences[0] == "Sentence number 0 is long enough to keep."
    assert sentences[-1] == "Sentence number 254 is long enough to keep."


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        ("# A heading that is long enough to keep", "A heading that is long enough to keep"),
        ("### Deeper heading that is long enough", "Deeper heading that is long enough"),
        ("- A dash bullet that is long enough to keep", "A dash bullet that is long enough to keep"),
        ("* A star bullet that is long enough to keep", "A star bullet that is long enough to keep"),
        ("> A quoted line that is long enough to keep", "A quoted line that is long enough to keep"),
        ("> * A quoted bullet long enough to keep", "A quoted bullet long enough to keep"),
        ("   - An indented bullet long enough to keep", "An indented bullet long enough to keep"),
        ("**Bold** at the start of the line stays as is", "**Bold** at the start of the line stays as is"),
        ("#hashtag without a space stays in the text", "#hashtag without a space stays in the text"),
        ("-5 degrees is the low recorded at the summit", "-5 degrees is the low recorded at the summit"),
    ],
)
def test_split_strips_line_markers_only_when_a_space_follows(line: str, kept: str) -> None:
    assert split_snippet(line) == [kept]


def test_line_markers_are_only_stripped_at_the_start_of_a_line() -> None:
    snippet = "The score was 3 - 1 at the end of the match. > Not a quote marker here at all."
    assert split_snippet(snippet) == [
        "The score was 3 - 1 at the end of the match. > Not a quote marker here at all."
    ]


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        (
            "The first sentence ends right here. The second one starts with a capital.",
            ["The first sentence ends right here.", "The second one starts with a capital."],
        ),
        (
            "Was it launched in that decade? 1990 is the year of the launch.",
            ["Was it launched in that decade?", "1990 is the year of the launch."],
        ),
        (
            'The crowd cheered at the launch! "Go Hubble," the banner read.',
            ["The crowd cheered at the launch!", '"Go Hubble," the banner read.'],
        ),
        (
            "The mission launched from Florida. “It worked,” said the director.",
            ["The mission launched from Florida.", "“It worked,” said the director."],
        ),
        (
            "The mirror was ground too flat. (This was found after the launch.)",
            ["The mirror was ground too flat.", "(This was found after the launch.)"],
        ),
    ],
)
def test_split_at_end_punctuation_before_capital_digit_quote_or_bracket(
    snippet: str, expected: list[str]
) -> None:
    assert split_snippet(snippet) == expected


def test_no_split_before_lowercase_or_without_whitespace() -> None:
    lowercase = "The value is approx. ten thousand metres deep in total."
    no_space = "The file is named report.Final and it is long enough."
    assert split_snippet(lowercase) == [lowercase]
    assert split_snippet(no_space) == [no_space]


def test_split_after_an_abbreviation_before_a_number_is_a_known_limit() -> None:
    # Recorded in the seed: "Aug." followed by a date ends a sentence.
    snippet = "Voyager 1 entered interstellar space on Aug. 25, 2012, as the data later showed."
    assert split_snippet(snippet) == [
        "Voyager 1 entered interstellar space on Aug.",
        "25, 2012, as the data later showed.",
    ]


def test_section_break_ends_a_sentence_even_mid_line() -> None:
    snippet = "The first part of the page goes here ... the second part comes from elsewhere"
    assert split_snippet(snippet) == [
        "The first part of the page goes here",
        "the second part comes from elsewhere",
    ]


def test_length_bounds_are_inclusive() -> None:
    pieces = {n: "x" * (n - 1) + "." for n in (24, 25, 400, 401)}
    for n, piece in pieces.items():
        assert len(piece) == n
        assert split_snippet(piece) == ([piece] if 25 <= n <= 400 else [])


def test_exact_repeats_are_dropped_near_repeats_kept() -> None:
    snippet = (
        "The tower is 330 metres tall today.\n...\nThe tower is 330 metres tall today. "
        "The tower is 330 metres tall today!"
    )
    assert split_snippet(snippet) == [
        "The tower is 330 metres tall today.",
        "The tower is 330 metres tall today!",
    ]


def test_nothing_inside_a_sentence_is_altered() -> None:
    snippet = "An  adult human body typicaly has 206 bones **in total** , says the text."
    assert split_snippet(snippet) == [snippet]


def test_empty_and_short_snippets_give_no_sentences() -> None:
    assert split_snippet("") == []
    assert split_snippet("...\n...\n# Title\n* Menu") == []


# Free-form pieces: odd characters and punctuation in any order.
_LOOSE_PARTS = st.lists(
    st.sampled_from(
        [".", "!", "?", " ", "\n", "...", "^[1]^", "# ", "* ", "> ", "A", "9", '"', "(", "x" * 30]
    )
    | st.text(max_size=12),
    max_size=60,
).map("".join)
# Sentence-shaped segments, so the boundary and marker rules are exercised on pieces long enough to keep.
_SEGMENT = st.tuples(
    st.sampled_from(["", "", "", "# ", "## ", "* ", "- ", "> ", "> * ", "**", "#", "-", "\t- ", "-- "]),
    st.sampled_from(["A", "a", "9", '"', "“", "(", "'", "É", "^", ""]),
    st.sampled_from(["ll enough words to pass the length filter", "short", "y" * 390, "mid text, here"]),
    st.sampled_from([".", ".", ".", "!", "?", "", ",", "..", "....", ".!"]),
    st.sampled_from(["", "", "", "", "^[1]^", "^[a]^^[2]^", "^[]^", "^[x]", "^[a. B]^", "^[1]^x"]),
    st.sampled_from([" ", " ", " ", "  ", "", "\n", "\t", "\u2028", " ... ", "\n...\n", "\xa0", "\x1c"]),
).map("".join)
SNIPPETS = _LOOSE_PARTS | st.lists(_SEGMENT, max_size=14).map("".join)


@settings(max_examples=200, deadline=None)
@given(SNIPPETS)
def test_property_sentences_are_unaltered_bounded_and_unique(snippet: str) -> None:
    sentences = split_snippet(snippet)
    assert len(sentences) <= MAX_SENTENCES
    assert len(set(sentences)) == len(sentences)
    for sentence in sentences:
        assert sentence in snippet
        assert 25 <= len(sentence) <= 400
        assert sentence == sentence.strip()


def reference_split(snippet: str) -> list[str]:
    """The splitting rule of docs/spec.md §4 step by step: an independent oracle for the regexes."""
    ends_before = set('ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"“(')
    sentences: list[str] = []
    for line in snippet.replace("...", "\n").split("\n"):
        start = 0
        while start < len(line) and line[start].isspace():
            start += 1
        while True:  # marker runs, each followed by whitespace
            end = start
            while end < len(line) and line[end] in "#*>-":
                end += 1
            if end == start or end == len(line) or not line[end].isspace():
                break
            while end < len(line) and line[end].isspace():
                end += 1
            start = end
        body, pieces, cut, i = line[start:], [], 0, 0
        while i < len(body):
            if body[i] not in ".!?":
                i += 1
                continue
            j = i + 1
            while body.startswith("^[", j):  # footnote markers: ^[ at least one non-] char ]^
                close = body.find("]", j + 2)
                if close in (-1, j + 2) or not body.startswith("]^", close):
                    break
                j = close + 2
            k = j
            while k < len(body) and body[k].isspace():
                k += 1
            if k > j and k < len(body) and body[k] in ends_before:
                pieces.append(body[cut:j])
                cut = i = j
            else:
                i += 1
        pieces.append(body[cut:])
        for piece in (p.strip() for p in pieces):
            if 25 <= len(piece) <= 400 and piece not in sentences:
                sentences.append(piece)
    return sentences[:255]


@settings(max_examples=200, deadline=None)
@given(SNIPPETS)
def test_property_split_matches_the_rule_written_out(snippet: str) -> None:
    assert split_snippet(snippet) == reference_split(snippet)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(["A sentence that is long enough to keep.", "b" * 30, ". ", "... "]), max_size=600
    )
)
def test_property_never_more_than_the_choice_limit(parts: list[str]) -> None:
    assert len(split_snippet("".join(parts))) <= MAX_SENTENCES


# ---- search -------------------------------------------------------------------------------------------


def test_search_request_body() -> None:
    assert search_request("q?") == {"query": "q?", "max_results": 5, "max_tokens_per_page": 2048}


def test_search_request_refuses_a_blank_question() -> None:
    with pytest.raises(ValueError, match="empty"):
        search_request("  \n")


def test_prepare_results_keeps_four_fields_and_splits() -> None:
    body_results = [
        {"title": "A", "url": "https://a.com", "snippet": PAGE, "date": "2024-02-26", "last_updated": "2025"},
        {"title": "B", "url": "https://b.com", "snippet": "Short.", "date": None},
        {"title": "C", "url": "https://c.com", "snippet": PAGE},
    ]
    results = prepare_results(body_results)
    assert [(r.index, r.title, r.url, r.date) for r in results] == [
        (1, "A", "https://a.com", "2024-02-26"),
        (2, "B", "https://b.com", None),
        (3, "C", "https://c.com", None),
    ]
    assert results[0].sentences == PAGE_SENTENCES and results[0].snippet == PAGE
    assert results[1].sentences == () and not results[1].rankable
    assert results[2].rankable


@pytest.mark.parametrize(
    "bad",
    [
        {"title": "A", "snippet": PAGE},
        {"title": "A", "url": None, "snippet": PAGE},
        {"title": "A", "url": "https://a.com"},
        {"title": "A", "url": "https://a.com", "snippet": PAGE, "date": 20240226},
    ],
)
def test_prepare_results_refuses_malformed_results(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="search result 1"):
        prepare_results([bad])


def test_source_result_round_trips_through_a_dict() -> None:
    result = prepare_results(two_pages())[0]
    stored = json.loads(json.dumps(result.as_dict()))
    assert SourceResult.from_dict(stored) == result
    assert stored["sentence_count"] == 3


# ---- requests -----------------------------------------------------------------------------------------


def test_rank_request_shape() -> None:
    sents = ["First sentence of the page.", "Second sentence of the page."]
    body = rank_request("q?", "T", "https://e.com", sents, MODEL)
    assert set(body) == {"model", "state", "questions"} and body["model"] == MODEL
    state, questions = body["state"], body["questions"]
    assert state == {
        "question": "q?",
        "source": {"title": "T", "url": "https://e.com"},
        "sentences": {"1": sents[0], "2": sents[1]},
    }
    assert set(questions) == {"best", "has_answer"}
    assert questions["best"]["type"] == "choice" and questions["best"]["criteria"] == state["sentences"]
    assert questions["best"]["instructions"]
    has_answer = questions["has_answer"]
    assert has_answer["type"] == "noul" and set(has_answer["criteria"]) == {"true", "false"}
    assert has_answer["instructions"]


def test_has_answer_criteria_are_the_spec_texts() -> None:
    spec = {
        "true": "at least one sentence states the answer or directly implies it, so a reader could quote "
        "that sentence as the answer",
        "false": "the sentences discuss the topic but none states the answer, or answering would need "
        "outside knowledge",
    }
    criteria = rank_request("q?", "T", "u", ["A sentence long enough here."], MODEL)["questions"][
        "has_answer"
    ]["criteria"]
    # The request text is the wording of docs/spec.md §4 written as a sentence: capital first letter,
    # final full stop.
    assert {key: text[0].lower() + text[1:].removesuffix(".") for key, text in criteria.items()} == spec


def test_rank_request_option_limits() -> None:
    sentence = "A sentence that is long enough to send."
    assert len(rank_request("q?", "T", "u", [sentence] * 255, MODEL)["questions"]["best"]["criteria"]) == 255
    for count in (0, 256):
        with pytest.raises(ValueError, match="1-255 sentences"):
            rank_request("q?", "T", "u", [sentence] * count, MODEL)


def test_request_bodies_do_not_share_mutable_parts() -> None:
    first = rank_request("q?", "T", "u", ["A sentence long enough here."], MODEL)
    first["questions"]["has_answer"]["criteria"]["true"] = "changed"
    first["questions"]["best"]["criteria"]["1"] = "changed"
    second = rank_request("q?", "T", "u", ["A sentence long enough here."], MODEL)
    assert second["questions"]["has_answer"]["criteria"]["true"] != "changed"
    assert second["state"]["sentences"]["1"] == "A sentence long enough here."


def test_compare_request_shape() -> None:
    body = compare_request("q?", [f"Sentence {n}." for n in range(3)], MODEL)
    assert body["model"] == MODEL
    assert body["state"] == {
        "question": "q?",
        "candidates": {"1": "Sentence 0.", "2": "Sentence 1.", "3": "Sentence 2."},
    }
    questions = body["questions"]
    assert list(questions) == ["answers_1", "answers_2", "answers_3"]
    assert all(q["type"] == "noul" and set(q["criteria"]) == {"true", "false"} for q in questions.values())
    assert "candidate 2" in questions["answers_2"]["instructions"]


def test_compare_request_takes_one_to_five_candidates() -> None:
    assert len(compare_request("q?", ["s"] * 5, MODEL)["questions"]) == 5
    for count in (0, 6):
        with pytest.raises(ValueError, match="1-5 candidates"):
            compare_request("q?", ["s"] * count, MODEL)


def test_request_budget_constants() -> None:
    assert quotes.MAX_RANK_REQUESTS == 5 and quotes.MAX_COMPARE_REQUESTS == 1
    assert MAX_DECISIONS_REQUESTS == 6
    assert (COMPARE_MIN, QUOTE_MIN) == (0.3, 0.6)


# ---- reading answers ----------------------------------------------------------------------------------


def test_parse_rank_answers_reads_the_chosen_sentence() -> None:
    got = parse_rank_answers(source(2, title="Good page"), rank_answers("3", 0.95, 0.7), request_id="rid")
    assert got.result_index == 2 and got.title == "Good page" and got.url == "https://e2.com"
    assert got.sentence_number == 3 and got.sentence == PAGE_SENTENCES[2]
    assert got.p_best == 0.85 and got.confidence == 0.7 and got.has_answer == 0.95
    assert got.probabilities == {"1": 0.1, "2": 0.1, "3": 0.85}
    assert got.request_id == "rid" and got.answers is None


def test_parse_rank_answers_accepts_answers_without_type() -> None:
    answers = rank_answers("1")
    for answer in answers.values():
        del answer["type"]
    assert parse_rank_answers(source(), answers).sentence == PAGE_SENTENCES[0]


def _mutated(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    answers = rank_answers("2")
    target: Any = answers
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return answers


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("best", "choice"), "0"),
        (("best", "choice"), "4"),
        (("best", "choice"), 2),
        (("best", "choice"), "02"),
        (("best", "type"), "noul"),
        (("best", "probabilities"), {"1": 0.1}),
        (("best", "probabilities"), {"2": 0.9, "7": 0.1}),
        (("best", "probabilities"), {"2": True}),
        (("best", "probabilities"), None),
        (("best", "confidence"), 1.5),
        (("best", "confidence"), "0.9"),
        (("has_answer", "noul"), True),
        (("has_answer", "noul"), math.nan),
        (("has_answer", "noul"), -0.1),
        (("has_answer",), KeyError),
        (("best",), KeyError),
    ],
)
def test_parse_rank_answers_refuses_answers_that_do_not_fit(path: tuple[str, ...], value: Any) -> None:
    with pytest.raises(QuoteAnswerError):
        parse_rank_answers(source(), _mutated(path, value))


def test_parse_compare_answers_in_candidate_order() -> None:
    assert parse_compare_answers(compare_answers(0.2, 0.9, 1), 3) == (0.2, 0.9, 1.0)


@pytest.mark.parametrize(
    ("answers", "count"),
    [
        (compare_answers(0.2), 2),
        (compare_answers(0.2, 0.3), 1),
        (compare_answers(0.2, True), 2),
        ({"answers_1": {"type": "choice", "noul": 0.5}}, 1),
        ({"answers_1": 0.5}, 1),
    ],
)
def test_parse_compare_answers_refuses_mismatches(answers: dict[str, Any], count: int) -> None:
    with pytest.raises(QuoteAnswerError):
        parse_compare_answers(answers, count)


def test_candidate_round_trips_through_a_dict() -> None:
    got = parse_rank_answers(source(), rank_answers(), request_id="rid")
    stored = json.loads(json.dumps(got.as_dict()))
    assert Candidate.from_dict(stored) == got


# ---- choosing the quote -------------------------------------------------------------------------------


def test_low_has_answer_excludes_candidate() -> None:
    record = run_with_ranks({1: 0.9, 2: 0.1})
    body = record.compare_request()
    assert body is not None and body["state"]["candidates"] == {"1": "Another sentence about the topic."}
    outcome = record.record_compare(compare_answers(0.9), request_id="compare-id")
    assert outcome.answer is not None and outcome.answer.title == "Good page"
    assert outcome.answer.answers == 0.9 and outcome.closest is None


def test_answer_below_cutoff_gives_no_answer_and_the_closest() -> None:
    record = run_with_ranks({1: 0.9, 2: 0.8})
    outcome = record.record_compare(compare_answers(0.5, 0.5))
    assert outcome.answer is None and not outcome.quoted
    assert outcome.closest is not None and outcome.closest.result_index == 1
    assert outcome.closest.answers == 0.5 and outcome.closest_by == "answers"
    assert record.as_dict()["outcome"]["answer"] is None


def test_no_candidate_skips_compare() -> None:
    record = run_with_ranks({1: 0.1, 2: 0.2})
    assert record.compare_request() is None
    outcome = record.finish()
    assert outcome.answer is None and not outcome.compared and outcome.ordering == ()
    assert outcome.closest is not None and outcome.closest.result_index == 2
    assert outcome.closest_by == "has_answer"
    data = record.as_dict()
    assert data["compare"] == [] and data["totals"]["decisions_requests"] == 2


@pytest.mark.parametrize(("has_answer", "pooled"), [(0.3, True), (0.2999, False), (1.0, True), (0.0, False)])
def test_compare_min_is_inclusive(has_answer: float, pooled: bool) -> None:
    assert bool(compare_pool([candidate(1, has_answer)])) is pooled


@pytest.mark.parametrize(("p", "quoted"), [(0.6, True), (0.5999, False), (1.0, True)])
def test_quote_min_is_inclusive(p: float, quoted: bool) -> None:
    assert select_quote([candidate(1, 0.9)], [p]).quoted is quoted


def test_ordering_ties_go_to_higher_has_answer_then_earlier_result() -> None:
    cands = [candidate(1, 0.5), candidate(2, 0.9), candidate(3, 0.9), candidate(4, 0.95)]
    outcome = select_quote(cands, [0.8, 0.8, 0.8, 0.7])
    assert [c.result_index for c in outcome.ordering] == [2, 3, 1, 4]
    assert outcome.answer is not None and outcome.answer.result_index == 2


def test_ordering_compares_unrounded_values() -> None:
    # Recorded (Hubble): 0.99716 and 0.99742 print alike at three decimals; the higher one is quoted.
    outcome = select_quote([candidate(1, 0.999), candidate(2, 0.999)], [0.99716, 0.99742])
    assert outcome.answer is not None and outcome.answer.result_index == 2


def test_only_the_compare_probability_decides_not_p_best() -> None:
    strong_choice = Candidate(1, "A", "https://a", None, 1, "Sentence A is here.", 0.999, 0.999, 0.99)
    weak_choice = Candidate(2, "B", "https://b", None, 1, "Sentence B is here.", 0.4, 0.2, 0.5)
    outcome = select_quote([strong_choice, weak_choice], [0.7, 0.9])
    assert outcome.answer is not None and outcome.answer.result_index == 2


def test_rivets_shape_one_candidate_below_the_quote_cutoff() -> None:
    # Recorded: has_answer 0.320, 0.043, 0.259, 0.164, 0.172; one candidate compared at 0.536.
    cands = [candidate(i, h) for i, h in enumerate([0.320, 0.043, 0.259, 0.164, 0.172], start=1)]
    assert [c.result_index for c in compare_pool(cands)] == [1]
    outcome = select_quote(cands, [0.536])
    assert outcome.answer is None and outcome.closest is not None
    assert (outcome.closest.result_index, outcome.closest.answers, outcome.closest_by) == (
        1,
        0.536,
        "answers",
    )


def test_without_compare_closest_ties_go_to_the_earlier_result() -> None:
    outcome = select_quote([candidate(3, 0.2), candidate(2, 0.2), candidate(1, 0.1)])
    assert outcome.closest is not None and outcome.closest.result_index == 2


def test_no_candidates_at_all() -> None:
    outcome = select_quote([])
    assert outcome.answer is None and outcome.closest is None and outcome.closest_by is None
    assert outcome.as_dict()["status"] == "no_answer"


def test_compare_pool_is_in_result_order() -> None:
    pool = compare_pool([candidate(4, 0.9), candidate(1, 0.5), candidate(2, 0.1)])
    assert [c.result_index for c in pool] == [1, 4]


def test_custom_cutoffs_are_applied_and_recorded() -> None:
    outcome = select_quote(
        [candidate(1, 0.5), candidate(2, 0.2)], [0.9, 0.8], compare_min=0.1, quote_min=0.95
    )
    assert outcome.answer is None and len(outcome.ordering) == 2
    assert outcome.as_dict()["cutoffs"] == {"compare_min": 0.1, "quote_min": 0.95}


@pytest.mark.parametrize(
    ("cands", "probabilities", "message"),
    [
        ([candidate(1, 0.1)], [0.9], "no compare answer"),
        ([candidate(1, 0.9)], None, "need 1 compare"),
        ([candidate(1, 0.9), candidate(2, 0.9)], [0.9], "need 2 compare"),
        ([candidate(1, 0.9), candidate(1, 0.8)], [0.9, 0.9], "one candidate per result"),
    ],
)
def test_select_quote_refuses_probabilities_that_do_not_match_the_pool(
    cands: list[Candidate], probabilities: list[float] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        select_quote(cands, probabilities)


def test_select_quote_refuses_bad_numbers() -> None:
    with pytest.raises(QuoteAnswerError):
        select_quote([candidate(1, 0.9)], [1.2])
    with pytest.raises(ValueError, match="quote_min"):
        select_quote([candidate(1, 0.9)], [0.9], quote_min=1.5)
    with pytest.raises(ValueError, match="compare_min"):
        compare_pool([candidate(1, 0.9)], compare_min=-0.1)


def test_outcome_as_dict_is_json_ready() -> None:
    outcome = select_quote([candidate(1, 0.9), candidate(2, 0.8)], [0.7, 0.95])
    data = json.loads(json.dumps(outcome.as_dict()))
    assert data["status"] == "quoted" and data["compared"] is True
    assert data["answer"]["result_index"] == 2 and data["answer"]["answers"] == 0.95
    assert [c["result_index"] for c in data["ordering"]] == [2, 1]


# ---- run record ---------------------------------------------------------------------------------------


def test_run_record_holds_everything_for_a_quoted_run() -> None:
    record = run_with_ranks({1: 0.9, 2: 0.8})
    outcome = record.record_compare(compare_answers(0.7, 0.95), request_id="compare-id", input_tokens=50)
    assert record.finish() is outcome
    data = json.loads(json.dumps(record.as_dict()))
    assert data["question"] == "q?" and data["model"] == MODEL
    assert [r["sentences"] for r in data["search"]["results"]] == [list(PAGE_SENTENCES)] * 2
    assert [r["snippet"] for r in data["search"]["results"]] == [PAGE, PAGE]
    assert [(r["result_index"], r["status"], r["has_answer"]) for r in data["rank"]] == [
        (1, "done", 0.9),
        (2, "done", 0.8),
    ]
    assert data["rank"][0]["probabilities"] == {"1": 0.1, "2": 0.85, "3": 0.05}
    assert data["rank"][0]["choice"] == "2" and data["rank"][0]["p_best"] == 0.85
    assert data["compare"][0]["candidates"] == {"1": 1, "2": 2}
    assert data["compare"][0]["answers"] == {"answers_1": 0.7, "answers_2": 0.95}
    assert data["outcome"]["answer"]["title"] == "Weak page" and data["outcome"]["answer"]["date"] is None
    assert data["totals"] == {
        "decisions_requests": 3,
        "failed_requests": 0,
        "input_tokens": 250,
        "request_ids": ["search-id", "rank-1", "rank-2", "compare-id"],
    }


def test_run_record_after_a_failing_request() -> None:
    record = QuoteRunRecord("q?", MODEL)
    record.record_search(two_pages(), request_id="search-id")
    record.record_rank(1, rank_answers(has_answer=0.9), request_id="rank-1")
    record.record_rank_failure(2, "DecisionsError: 500 upstream", request_id="rank-2")
    record.record_error("run stopped after a failed rank request")
    data = json.loads(json.dumps(record.as_dict()))
    assert len(data["search"]["results"]) == 2
    assert [r["status"] for r in data["rank"]] == ["done", "failed"]
    assert data["rank"][1]["error"].startswith("DecisionsError")
    assert data["errors"] == ["run stopped after a failed rank request"]
    assert data["outcome"] is None
    assert data["totals"]["request_ids"] == ["search-id", "rank-1", "rank-2"]
    assert data["totals"]["failed_requests"] == 1


def test_an_unreadable_answer_is_kept_raw_before_raising() -> None:
    record = QuoteRunRecord("q?", MODEL)
    record.record_search(two_pages())
    bad = rank_answers("9")
    with pytest.raises(QuoteAnswerError, match="choice"):
        record.record_rank(1, bad, request_id="rank-1", input_tokens=120)
    bad["best"]["choice"] = "mutated later"
    attempt = record.as_dict()["rank"][0]
    assert attempt["status"] == "failed" and attempt["request_id"] == "rank-1"
    assert attempt["answers"]["best"]["choice"] == "9"
    assert attempt["answers"]["has_answer"]["noul"] == 0.9
    assert record.as_dict()["totals"]["input_tokens"] == 120


def test_a_failed_rank_can_be_retried_and_both_ids_are_kept() -> None:
    record = QuoteRunRecord("q?", MODEL)
    record.record_search(two_pages()[:1])
    record.record_rank_failure(1, "timeout", request_id="first")
    record.record_rank(1, rank_answers(), request_id="second")
    assert [c.request_id for c in record.candidates] == ["second"]
    assert record.as_dict()["totals"]["request_ids"] == ["first", "second"]


def test_a_failed_compare_can_be_retried_once_answered_it_is_closed() -> None:
    record = run_with_ranks({1: 0.9, 2: 0.9})
    record.record_compare_failure("429 after retries", request_id="c1")
    record.record_compare(compare_answers(0.9, 0.8), request_id="c2")
    with pytest.raises(ValueError, match="already recorded"):
        record.record_compare(compare_answers(0.9, 0.8))
    assert [c["status"] for c in record.as_dict()["compare"]] == ["failed", "done"]


def test_run_record_keeps_to_the_request_budget() -> None:
    many = [{"title": f"R{n}", "url": f"https://r{n}.com", "snippet": PAGE} for n in range(1, 8)]
    many.insert(1, {"title": "Empty", "url": "https://empty.com", "snippet": "Too short."})
    record = QuoteRunRecord("q?", MODEL)
    record.record_search(many)
    targets = [r.index for r in record.rank_targets]
    assert targets == [1, 3, 4, 5, 6] and len(record.results) == 8
    for index in (2, 7):
        with pytest.raises(ValueError, match="no rank request"):
            record.rank_request(index)
    for index in targets:
        record.record_rank(index, rank_answers(has_answer=0.9))
    with pytest.raises(ValueError, match="already ranked"):
        record.record_rank(1, rank_answers())
    record.record_compare(compare_answers(*[0.9] * 5))
    with pytest.raises(ValueError, match="compare step has started"):
        record.record_rank_failure(3, "late")
    assert record.as_dict()["totals"]["decisions_requests"] == MAX_DECISIONS_REQUESTS


def test_run_record_rank_request_body_uses_the_prepared_sentences() -> None:
    record = QuoteRunRecord("q?", MODEL)
    record.record_search(two_pages())
    body = record.rank_request(2)
    assert body == rank_request("q?", "Weak page", "https://b.com", PAGE_SENTENCES, MODEL)


def test_compare_waits_for_every_rank_attempt() -> None:
    record = QuoteRunRecord("q?", MODEL)
    record.record_search(two_pages())
    record.record_rank(1, rank_answers(has_answer=0.9))
    assert record.unranked == (2,) and not record.ranks_complete
    with pytest.raises(ValueError, match=re.escape("results [2] have no rank attempt")):
        record.compare_request()
    with pytest.raises(ValueError, match="no rank attempt"):
        record.finish()
    record.record_rank(2, rank_answers(has_answer=0.1))
    assert record.ranks_complete
    body = record.compare_request()
    assert body is not None and list(body["questions"]) == ["answers_1"]


def test_a_failed_rank_stops_the_run_before_the_compare_step() -> None:
    record = QuoteRunRecord("q?", MODEL)
    record.record_search(two_pages())
    record.record_rank(1, rank_answers(has_answer=0.9), request_id="rank-1")
    record.record_rank_failure(2, "503 upstream busy", request_id="rank-2")
    assert record.unranked == () and record.failed_ranks == (2,) and not record.ranks_complete
    # Result 1 alone would be quoted; with result 2 unranked no compare is sent and nothing is quoted.
    for step in (record.compare_request, record.finish):
        with pytest.raises(ValueError, match=re.escape("results [2] could not be ranked")):
            step()
    with pytest.raises(ValueError, match="could not be ranked"):
        record.record_compare(compare_answers(0.99))
    assert record.outcome is None and record.as_dict()["outcome"] is None
    # An unreadable answer counts as a failed rank too.
    unreadable = QuoteRunRecord("q?", MODEL)
    unreadable.record_search(two_pages())
    unreadable.record_rank(1, rank_answers())
    with pytest.raises(QuoteAnswerError):
        unreadable.record_rank(2, rank_answers("9"))
    assert unreadable.failed_ranks == (2,)


def test_a_retried_rank_lets_the_run_go_on() -> None:
    record = QuoteRunRecord("q?", MODEL)
    record.record_search(two_pages())
    record.record_rank(1, rank_answers(has_answer=0.9))
    record.record_rank_failure(2, "timeout")
    record.record_rank(2, rank_answers(has_answer=0.1), request_id="again")
    assert record.failed_ranks == () and record.ranks_complete
    outcome = record.record_compare(compare_answers(0.95))
    assert outcome.quoted and record.finish() is outcome


def test_finish_needs_the_compare_answer_when_there_is_a_pool() -> None:
    record = run_with_ranks({1: 0.9, 2: 0.1})
    with pytest.raises(ValueError, match="compare request has not been answered"):
        record.finish()


def test_run_with_no_results_or_a_failed_search() -> None:
    empty = QuoteRunRecord("q?", MODEL)
    empty.record_search([], request_id="s")
    assert empty.compare_request() is None
    assert empty.finish().closest is None
    assert empty.as_dict()["totals"]["decisions_requests"] == 0

    failed = QuoteRunRecord("q?", MODEL)
    failed.record_search_failure("SearchError: 422", request_id="s-1")
    data = failed.as_dict()
    assert data["search"] == {"request_id": "s-1", "error": "SearchError: 422", "results": None}
    assert data["totals"]["request_ids"] == ["s-1"]
    with pytest.raises(ValueError, match="no search results"):
        failed.finish()
    failed.record_search(two_pages(), request_id="s-2")
    with pytest.raises(ValueError, match="already recorded"):
        failed.record_search(two_pages())


def test_run_record_applies_its_own_cutoffs() -> None:
    record = QuoteRunRecord("q?", MODEL, compare_min=0.05, quote_min=0.95)
    record.record_search(two_pages())
    record.record_rank(1, rank_answers(has_answer=0.1))
    record.record_rank(2, rank_answers(has_answer=0.2))
    body = record.compare_request()
    assert body is not None and len(body["questions"]) == 2
    outcome = record.record_compare(compare_answers(0.9, 0.8))
    assert outcome.answer is None and outcome.closest is not None and outcome.closest.result_index == 1
    assert record.as_dict()["outcome"]["cutoffs"] == {"compare_min": 0.05, "quote_min": 0.95}
    with pytest.raises(ValueError, match="quote_min"):
        QuoteRunRecord("q?", MODEL, quote_min=2)
