"""Agent API and Decisions request bodies for the answer gate, and markers -> cited passages."""

from __future__ import annotations

import json

import pytest

from checks.answers import (
    ANSWER_INSTRUCTIONS,
    CHECKABLE_INSTRUCTIONS,
    MAX_CITED_PASSAGES,
    MAX_QUESTIONS,
    answer_request,
    cite_passages,
    investigation_request,
    sentence_request,
)

MODEL = "pplx-decider-flash-v1.2"


def test_answer_request_asks_with_web_search() -> None:
    body = answer_request("Who won the 2024 Nobel Prize in Physics?")
    assert body == {
        "input": "Who won the 2024 Nobel Prize in Physics?",
        "preset": "fast",
        "instructions": ANSWER_INSTRUCTIONS,
        "tools": [{"type": "web_search"}],
    }


# The texts the recorded outcomes were measured with (docs/spec.md §3.7), pinned word for word: a change
# here changes the probabilities, so it must be a deliberate one.
RECORDED_INSTRUCTIONS = (
    "Answer in plain prose paragraphs with no bullet points, headings, or bold text. Put a citation marker "
    "like [3] at the end of every sentence that states a fact, citing the search result that supports it. "
    "Write every sentence so it makes sense on its own: name the subject instead of starting with it, its, "
    "or they."
)
RECORDED_INVESTIGATION = (
    'Question: "What did Webb find on K2-18b?"\n'
    "\n"
    "Answer:\n"
    "Webb found methane. [1] It may host an ocean. [2]\n"
    "\n"
    "The sources did not clearly support this sentence from the answer:\n"
    "\n"
    '"It may host an ocean."\n'
    "\n"
    "Search for evidence about this sentence. Write the fewest sentences (one to three) that could replace "
    "it, stating only what the sources you find support and correcting anything that is wrong. Do not "
    "repeat facts the rest of the answer already states. Leave out any part you cannot support."
)
RECORDED_QUESTIONS = {
    "checkable": "Is the claim a factual statement that could be verified against a source? Opinions, "
    "transitions, and questions are not checkable.",
    "supports_4": "Does passage 4 state or directly imply the claim? Being about the same topic is not "
    "support; the passage has to back the specific claim.",
    "contradicts_4": "Does passage 4 state something that cannot be true if the claim is true?",
}


def test_request_texts_are_the_recorded_ones() -> None:
    assert ANSWER_INSTRUCTIONS == RECORDED_INSTRUCTIONS
    body = investigation_request(
        "What did Webb find on K2-18b?",
        "Webb found methane. [1] It may host an ocean. [2]",
        "It may host an ocean.",
    )
    assert body["input"] == RECORDED_INVESTIGATION
    assert body["instructions"] == RECORDED_INSTRUCTIONS
    questions = sentence_request("claim", {"4": "p"}, MODEL)["questions"]
    assert {name: q["instructions"] for name, q in questions.items()} == RECORDED_QUESTIONS


def test_answer_request_bodies_do_not_share_mutable_parts() -> None:
    first = answer_request("q")
    first["tools"][0]["type"] = "changed"
    assert answer_request("q")["tools"] == [{"type": "web_search"}]


def test_answer_request_rejects_a_blank_question() -> None:
    with pytest.raises(ValueError, match="empty"):
        answer_request("  \n")


def test_investigation_request_carries_question_answer_and_sentence() -> None:
    answer = "Webb found methane. [1] It may host an ocean. [2]"
    body = investigation_request("What did Webb find on K2-18b?", answer, "It may host an ocean.")
    assert set(body) == {"input", "preset", "instructions", "tools"}
    assert body["tools"] == [{"type": "web_search"}] and body["preset"] == "fast"
    prompt = body["input"]
    assert "What did Webb find on K2-18b?" in prompt
    assert answer in prompt
    assert '"It may host an ocean."' in prompt
    assert "(one to three)" in prompt and "support" in prompt
    # The question comes first, then the answer, then the sentence under review.
    assert prompt.index("K2-18b") < prompt.index(answer) < prompt.rindex('"It may host an ocean."')


def test_investigation_request_rejects_a_blank_sentence() -> None:
    with pytest.raises(ValueError, match="empty"):
        investigation_request("q", "answer", " ")


def test_sentence_request_states_claim_and_numbered_passages() -> None:
    body = sentence_request("Webb found methane.", {"3": "Methane was detected.", "1": "CO2 too."}, MODEL)
    assert body["model"] == MODEL
    assert body["state"] == {
        "claim": "Webb found methane.",
        "passages": {"3": "Methane was detected.", "1": "CO2 too."},
    }
    assert list(body["questions"]) == [
        "checkable",
        "supports_3",
        "contradicts_3",
        "supports_1",
        "contradicts_1",
    ]
    assert body["questions"]["checkable"] == {"type": "noul", "instructions": CHECKABLE_INSTRUCTIONS}
    assert "passage 3" in body["questions"]["supports_3"]["instructions"]
    assert "same topic" in body["questions"]["supports_3"]["instructions"]
    assert "passage 1" in body["questions"]["contradicts_1"]["instructions"]
    assert "cannot be true" in body["questions"]["contradicts_1"]["instructions"]
    assert set(body) == {"model", "state", "questions"}  # no mode: these requests are never grounded
    json.dumps(body)  # the body is plain JSON


def test_uncited_sentence_gets_only_checkable() -> None:
    body = sentence_request("The sky is blue.", {}, MODEL)
    assert list(body["questions"]) == ["checkable"]
    assert body["state"] == {"claim": "The sky is blue.", "passages": {}}


def test_sentence_request_stays_inside_the_question_limit() -> None:
    most = {str(n): "p" for n in range(1, MAX_CITED_PASSAGES + 1)}
    assert len(sentence_request("c", most, MODEL)["questions"]) <= MAX_QUESTIONS
    too_many = {**most, "999": "p"}
    with pytest.raises(ValueError, match="at most 128"):
        sentence_request("c", too_many, MODEL)


@pytest.mark.parametrize("bad", ["", "a", "1 ", "-1", "1.5"])
def test_sentence_request_rejects_non_numeric_passage_ids(bad: str) -> None:
    with pytest.raises(ValueError, match="passage id"):
        sentence_request("c", {bad: "p"}, MODEL)


def test_sentence_request_rejects_an_empty_claim() -> None:
    with pytest.raises(ValueError, match="empty"):
        sentence_request(" ", {"1": "p"}, MODEL)


RESULTS = [
    {
        "id": 1,
        "url": "https://a.example",
        "title": "A",
        "snippet": "Alpha `code` passage.",
        "date": "2026-01-01",
    },
    {"id": 2, "url": "https://b.example", "title": "B", "snippet": "Beta passage."},
    {"id": 2, "url": "https://dup.example", "title": "dup", "snippet": "Later duplicate."},
    {"id": 5, "url": "https://e.example", "title": "E"},
]


def test_cite_passages_maps_markers_to_snippets_in_citation_order() -> None:
    cited = cite_passages((2, 1, 2), RESULTS)
    assert cited.passages == {"2": "Beta passage.", "1": "Alpha `code` passage."}
    assert list(cited.passages) == ["2", "1"]
    assert cited.urls == {"2": "https://b.example", "1": "https://a.example"}
    assert cited.missing_ids == ()


def test_cite_passages_reports_markers_pointing_at_no_result() -> None:
    cited = cite_passages((9, 1, 9, 7), RESULTS)
    assert cited.passages == {"1": "Alpha `code` passage."}
    assert cited.missing_ids == (9, 7)


def test_cite_passages_with_no_markers_is_uncited() -> None:
    cited = cite_passages((), RESULTS)
    assert (cited.passages, cited.urls, cited.missing_ids) == ({}, {}, ())


def test_cite_passages_sends_an_absent_snippet_as_empty_text() -> None:
    assert cite_passages((5,), RESULTS).passages == {"5": ""}
