"""Strict validation of 200 bodies: each malformed shape is rejected with a message naming it."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from clients.results import SearchResult
from clients.validation import MalformedResponseError, validate_agent, validate_decision, validate_search

REQUEST: dict[str, Any] = {
    "model": "pplx-decider-latest",
    "state": "A claim.",
    "questions": {
        "is_true": {"type": "noul", "instructions": "Is the claim true?"},
        "best": {"type": "choice", "criteria": {"1": "first", "2": "second", "3": "third"}},
        "grade": {"type": "score", "criteria": ["poor", "fair", "good"]},
    },
}


def good_decision() -> dict[str, Any]:
    return {
        "model": "pplx-decider-v1.2",
        "answers": {
            "is_true": {"type": "noul", "noul": 0.91},
            "best": {
                "type": "choice",
                "choice": "2",
                "probabilities": {"1": 0.05, "2": 0.9, "3": 0.05},
                "confidence": 0.85,
            },
            "grade": {
                "type": "score",
                "score": 2,
                "legend": {"0": "poor", "1": "fair", "2": "good"},
                "probabilities": {"0": 0.1, "1": 0.2, "2": 0.7},
                "confidence": 0.6,
            },
        },
        "usage": {"input_tokens": 120, "output_tokens": 3},
        "search_results": [
            {
                "title": "T",
                "url": "https://e.com/a",
                "snippet": "S",
                "date": "2024-01-01",
                "last_updated": None,
            }
        ],
    }


def test_good_decision_is_typed() -> None:
    decision = validate_decision(good_decision(), REQUEST)
    assert decision.answers["is_true"].noul == 0.91 and decision.answers["is_true"].type == "noul"
    best = decision.answers["best"]
    assert (best.choice, best.probabilities, best.confidence) == ("2", {"1": 0.05, "2": 0.9, "3": 0.05}, 0.85)
    grade = decision.answers["grade"]
    assert (grade.score, grade.probabilities["2"], grade.legend["2"]) == (2.0, 0.7, "good")
    assert (decision.input_tokens, decision.output_tokens, decision.model) == (120, 3, "pplx-decider-v1.2")
    assert decision.search_results == [
        SearchResult(url="https://e.com/a", title="T", snippet="S", date="2024-01-01", last_updated=None)
    ]


def test_answers_may_omit_type_and_extra_answers_are_ignored() -> None:
    body = good_decision()
    del body["answers"]["is_true"]["type"]
    body["answers"]["unasked"] = {"type": "noul", "noul": 7}
    decision = validate_decision(body, REQUEST)
    assert set(decision.answers) == {"is_true", "best", "grade"} and decision.answers["is_true"].noul == 0.91


def test_missing_search_results_is_empty_and_integers_are_probabilities() -> None:
    body = good_decision()
    del body["search_results"]
    body["answers"]["is_true"]["noul"] = 1  # JSON 1 is a number; only booleans are excluded
    decision = validate_decision(body, REQUEST)
    assert decision.search_results == [] and decision.answers["is_true"].noul == 1.0


def mutate(path: str, value: Any) -> dict[str, Any]:
    """A good body with the value at dotted `path` set (or deleted when value is DELETE)."""
    body = copy.deepcopy(good_decision())
    *parents, last = path.split(".")
    target: Any = body
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value is DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return body


DELETE = object()

MALFORMED_DECISIONS = [
    ("answers", DELETE, "answers is missing"),
    ("answers", [], "answers is a list, not an object"),
    ("answers.is_true", DELETE, "answers.is_true is missing (the request asked for it)"),
    ("answers.is_true", 0.9, "answers.is_true is a number, not an object"),
    ("answers.is_true.type", "choice", "answers.is_true.type is 'choice', but the question asked for 'noul'"),
    ("answers.is_true.noul", DELETE, "answers.is_true.noul is missing"),
    ("answers.is_true.noul", True, "answers.is_true.noul is a boolean (True), not a probability"),
    ("answers.is_true.noul", None, "answers.is_true.noul is null (None), not a probability"),
    ("answers.is_true.noul", "0.9", "answers.is_true.noul is a string ('0.9'), not a probability"),
    ("answers.is_true.noul", 1.5, "answers.is_true.noul is 1.5, outside [0, 1]"),
    ("answers.is_true.noul", -0.01, "answers.is_true.noul is -0.01, outside [0, 1]"),
    ("answers.is_true.noul", math.nan, "answers.is_true.noul is nan, not a finite number"),
    ("answers.best.choice", "4", "answers.best.choice '4' is not among the options sent"),
    ("answers.best.choice", 2, "answers.best.choice is a number, not an option key"),
    ("answers.best.choice", DELETE, "answers.best.choice is missing"),
    ("answers.best.probabilities", DELETE, "answers.best.probabilities is missing"),
    (
        "answers.best.probabilities.9",
        0.1,
        "answers.best.probabilities['9']: '9' is not among the options sent",
    ),
    ("answers.best.probabilities.2", 1.2, "answers.best.probabilities['2'] is 1.2, outside [0, 1]"),
    (
        "answers.best.probabilities.2",
        False,
        "answers.best.probabilities['2'] is a boolean (False), not a probability",
    ),
    ("answers.best.confidence", 2, "answers.best.confidence is 2, outside [0, 1]"),
    ("answers.best.confidence", DELETE, "answers.best.confidence is missing"),
    ("answers.grade.score", 3, "answers.grade.score is 3, outside the levels sent (0 to 2)"),
    ("answers.grade.score", True, "answers.grade.score is a boolean (True), not a number"),
    (
        "answers.grade.probabilities.3",
        0.0,
        "answers.grade.probabilities['3']: '3' is not among the options sent",
    ),
    (
        "answers.grade.probabilities.0",
        "0.1",
        "answers.grade.probabilities['0'] is a string ('0.1'), not a probability",
    ),
    ("answers.grade.legend", ["poor"], "answers.grade.legend is a list, not an object"),
    ("usage", DELETE, "usage is missing"),
    ("usage", 5, "usage is a number, not an object"),
    ("usage.input_tokens", -1, "usage.input_tokens is -1, negative"),
    ("usage.input_tokens", 2**31, "usage.input_tokens is 2147483648, more than any request can use"),
    ("usage.input_tokens", 1.5, "usage.input_tokens is 1.5, not an integer"),
    ("usage.input_tokens", 100.0, "usage.input_tokens is 100.0, not an integer"),
    ("usage.input_tokens", True, "usage.input_tokens is True, not an integer"),
    ("usage.input_tokens", DELETE, "usage.input_tokens is missing"),
    ("usage.output_tokens", "3", "usage.output_tokens is '3', not an integer"),
    ("usage.output_tokens", -2, "usage.output_tokens is -2, negative"),
    ("search_results", {}, "search_results is an object, not a list"),
    ("search_results.0.url", DELETE, "search_results[0] has no url"),
    ("search_results.0.url", "", "search_results[0].url is '', not a non-empty string"),
    ("search_results.0", "https://e.com", "search_results[0] is a string, not an object"),
    ("search_results.0.title", 5, "search_results[0].title is a number, not a string"),
    ("search_results.0.date", 20240101, "search_results[0].date is a number, not a string"),
    ("model", 7, "model is a number, not a string"),
]


@pytest.mark.parametrize(
    ("path", "value", "message"), MALFORMED_DECISIONS, ids=[m[2] for m in MALFORMED_DECISIONS]
)
def test_malformed_decision_is_named(path: str, value: Any, message: str) -> None:
    with pytest.raises(MalformedResponseError) as info:
        validate_decision(mutate(path, value), REQUEST)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("body", "message"), [([], "body is a list, not an object"), ("ok", "body is a string")]
)
def test_decision_body_must_be_an_object(body: Any, message: str) -> None:
    with pytest.raises(MalformedResponseError, match=message):
        validate_decision(body, REQUEST)


def test_question_names_that_are_not_identifiers_are_quoted() -> None:
    request = {"questions": {"supports 1": {"type": "noul"}}}
    with pytest.raises(MalformedResponseError, match=r"answers\['supports 1'\] is missing"):
        validate_decision({"answers": {}, "usage": {"input_tokens": 1, "output_tokens": 0}}, request)


def test_without_questions_in_the_request_answers_are_checked_by_their_own_type() -> None:
    body = {"answers": {"x": {"type": "noul", "noul": 2}}, "usage": {"input_tokens": 1, "output_tokens": 0}}
    with pytest.raises(MalformedResponseError, match=r"answers\.x\.noul is 2, outside \[0, 1\]"):
        validate_decision(body, {})
    body["answers"]["x"] = {"type": "ranking"}
    with pytest.raises(MalformedResponseError, match=r"answers\.x has unknown type 'ranking'"):
        validate_decision(body, {})


# --- Agent -----------------------------------------------------------------------------------

AGENT_REQUEST = {"input": "q?", "preset": "fast", "tools": [{"type": "web_search"}]}


def good_agent() -> dict[str, Any]:
    return {
        "model": "sonar",
        "output": [
            {
                "type": "search_results",
                "results": [{"id": 1, "url": "https://a.com", "title": "A", "snippet": "a"}],
            },
            {"type": "message", "content": [{"type": "output_text", "text": "First draft [1]."}]},
            {"type": "search_results", "results": [{"id": 2, "url": "https://b.com", "date": None}]},
            {
                "type": "message",
                "content": [
                    {"type": "output_text", "text": "Answer one [1]."},
                    {"type": "annotation", "text": 5},  # other part types are not read
                    {"type": "output_text", "text": "Answer two [2]."},
                ],
            },
        ],
        "usage": {"input_tokens": 900, "output_tokens": 80},
    }


def test_good_agent_answer() -> None:
    answer = validate_agent(good_agent(), AGENT_REQUEST)
    assert answer.text == "Answer one [1].\n\nAnswer two [2]."  # the last message is the answer
    assert [(r.id, r.url, r.title) for r in answer.results] == [
        (1, "https://a.com", "A"),
        (2, "https://b.com", ""),
    ]
    assert answer.result(2) == answer.results[1] and answer.result(9) is None
    assert (answer.model, answer.input_tokens, answer.output_tokens) == ("sonar", 900, 80)


def agent_with(output: Any) -> dict[str, Any]:
    return {"output": output}


SOURCES = {"type": "search_results", "results": [{"id": 1, "url": "https://a.com"}]}
TEXT = {"type": "message", "content": [{"type": "output_text", "text": "Hi [1]."}]}

MALFORMED_AGENT = [
    ({}, "output is missing, not a list"),
    (agent_with({}), "output is an object, not a list"),
    (agent_with([SOURCES]), "no message text: output has no message with output_text"),
    (
        agent_with([SOURCES, {"type": "message", "content": [{"type": "output_text", "text": "  "}]}]),
        "no message text",
    ),
    (
        agent_with([SOURCES, {"type": "message", "content": "Hi"}]),
        "output[1].content is a string, not a list",
    ),
    (
        agent_with([SOURCES, {"type": "message", "content": [{"type": "output_text", "text": None}]}]),
        "output[1].content[0].text is null, not a string",
    ),
    (agent_with([TEXT]), "no search results: the model answered without searching"),
    (agent_with([TEXT, {"type": "search_results", "results": []}]), "no search results"),
    (agent_with([TEXT, {"type": "search_results"}]), "output[1].results is null, not a list"),
    (
        agent_with([TEXT, {"type": "search_results", "results": [{"url": "https://a.com"}]}]),
        "output[1].results[0] has no id",
    ),
    (
        agent_with([TEXT, {"type": "search_results", "results": [{"id": "1", "url": "https://a.com"}]}]),
        "output[1].results[0].id is '1', not an integer",
    ),
    (
        agent_with([TEXT, {"type": "search_results", "results": [{"id": True, "url": "https://a.com"}]}]),
        "output[1].results[0].id is True, not an integer",
    ),
    (
        agent_with([TEXT, {"type": "search_results", "results": [{"id": 1}]}]),
        "output[1].results[0] has no url",
    ),
    (agent_with([TEXT, "x"]), "output[1] is a string, not an object"),
    ({**agent_with([TEXT, SOURCES]), "usage": {"input_tokens": -4}}, "usage.input_tokens is -4, negative"),
]


@pytest.mark.parametrize(("body", "message"), MALFORMED_AGENT, ids=[m[1] for m in MALFORMED_AGENT])
def test_malformed_agent_answer_is_named(body: Any, message: str) -> None:
    with pytest.raises(MalformedResponseError) as info:
        validate_agent(body, AGENT_REQUEST)
    assert str(info.value).startswith(message)


# --- Search ----------------------------------------------------------------------------------


def test_good_search_response_and_empty_results() -> None:
    body = {"id": "s-1", "results": [{"title": "A", "url": "https://a.com", "snippet": "x", "date": None}]}
    response = validate_search(body, {"query": "q"})
    assert response.results == [SearchResult(url="https://a.com", title="A", snippet="x")]
    assert response.id == "s-1"
    assert validate_search({"results": []}, {"query": "q"}).results == []


MALFORMED_SEARCH = [
    ({}, "results is missing"),
    ({"results": {}}, "results is an object, not a list"),
    ({"results": [{"title": "A"}]}, "results[0] has no url"),
    ({"results": [{"url": "https://a.com"}, {"url": None}]}, "results[1] has no url"),
    ({"results": ["https://a.com"]}, "results[0] is a string, not an object"),
    ({"results": [{"url": "https://a.com", "snippet": ["x"]}]}, "results[0].snippet is a list, not a string"),
]


@pytest.mark.parametrize(("body", "message"), MALFORMED_SEARCH, ids=[m[1] for m in MALFORMED_SEARCH])
def test_malformed_search_response_is_named(body: Any, message: str) -> None:
    with pytest.raises(MalformedResponseError) as info:
        validate_search(body, {"query": "q"})
    assert str(info.value) == message
