"""The client against a hostile upstream (httpx.MockTransport): whatever comes back is storable.

For each behaviour that left items `running` forever — a huge or NUL-bearing `model`, NULs in an
error message or in search results, a 6,000-character `x-request-id`, lone surrogates, invalid
UTF-8 — what the client returns or raises holds no NUL and no lone surrogate, fits its cap, and
`sanitized` names the field (in the answer and in its call record).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from clients import PerplexityClient, UpstreamError
from clients.records import CallRecord
from clients.sanitize import DATE, MODEL, REQUEST_ID, SNIPPET, TITLE, URL

KEY = "pplx-test-0123456789abcdef0123456789abcdef"
NUL = "\x00"
QUESTION = {"type": "noul", "instructions": "Is the claim true?"}
DECIDE = {"model": "pplx-decider-latest", "state": "A claim.", "questions": {"is_true": QUESTION}}
GROUNDED = {**DECIDE, "mode": "web_grounding"}
AGENT = {"input": "Why is the sky blue?", "preset": "fast", "tools": [{"type": "web_search"}]}
SEARCH = {"query": "sky", "max_results": 3}

Reply = httpx.Response | Callable[[httpx.Request], httpx.Response]


def page(n: int, **changes: Any) -> dict[str, Any]:
    return {
        "url": f"https://e.com/{n}",
        "title": f"Page {n}",
        "snippet": f"Snippet {n}.",
        "date": "2025-01-02",
        **changes,
    }


def decision(model: str = "pplx-decider-v1.2", results: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "answers": {"is_true": {"type": "noul", "noul": 0.8}},
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    if results is not None:
        body["search_results"] = results
    return body


def agent(text: str = "The sky is blue [1].", results: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "model": "sonar",
        "output": [
            {"type": "search_results", "results": results or [{"id": 1, **page(1)}]},
            {"type": "message", "content": [{"type": "output_text", "text": text}]},
        ],
    }


def raw_json(status: int, text: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """A response whose body is exactly `text`: `json.dumps` output escapes lone surrogates as
    `\\ud800`, which httpx's own `json=` (UTF-8, `ensure_ascii=False`) cannot encode."""
    return httpx.Response(
        status, content=text.encode(), headers={"content-type": "application/json", **(headers or {})}
    )


class Upstream:
    """Canned replies in order; remembers every request."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        return reply(request) if callable(reply) else reply


@pytest.fixture
def connect() -> Iterator[Callable[..., PerplexityClient]]:
    clients: list[PerplexityClient] = []

    def make(*replies: Reply) -> PerplexityClient:
        client = PerplexityClient(
            "https://api.example.test",
            KEY,
            transport=httpx.MockTransport(Upstream(*replies)),
            sleep=lambda _s: None,
            random=lambda: 0.5,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def strings(value: object) -> Iterator[str]:
    """Every string inside a result, an error or a record (dataclasses, dicts, lists)."""
    if isinstance(value, str):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from strings(getattr(value, f.name))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def assert_storable(*values: object) -> None:
    """No NUL anywhere, and everything encodes as UTF-8 (a lone surrogate does not)."""
    for value in values:
        for text in strings(value):
            assert NUL not in text, text[:80]
            text.encode("utf-8")
        json.dumps(strings_of_record(value), ensure_ascii=False).encode("utf-8")


def strings_of_record(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def assert_record_fits(record: CallRecord) -> None:
    assert record.model is None or len(record.model) <= MODEL.cap
    for attempt in record.attempts:
        assert attempt.request_id is None or len(attempt.request_id) <= REQUEST_ID.cap


# --- model ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["m" * 100_000, f"pplx-decider{NUL}-v1.2", "pplx\ud800"])
def test_a_hostile_model_is_cleaned_capped_and_named(
    connect: Callable[..., PerplexityClient], model: str
) -> None:
    answer = connect(raw_json(200, json.dumps(decision(model=model)))).decide(DECIDE)
    assert answer.model is not None and len(answer.model) <= MODEL.cap
    assert answer.record.model == answer.model  # the value stored in api_calls.model
    assert answer.sanitized == ["model"] and answer.record.sanitized == ["model"]
    assert_storable(answer)
    assert_record_fits(answer.record)


def test_the_agent_model_is_cleaned_too(connect: Callable[..., PerplexityClient]) -> None:
    body = {**agent(), "model": "sonar" + NUL * 3 + "x" * 200}
    answer = connect(httpx.Response(200, json=body)).agent(AGENT)
    assert answer.model == "sonar" + "x" * (MODEL.cap - 5)
    assert answer.sanitized == ["model"] and answer.record.model == answer.model


def test_a_clean_answer_reports_nothing_sanitized(connect: Callable[..., PerplexityClient]) -> None:
    body = decision(results=[page(1, snippet="Line one.\n\tLine two.")])
    answer = connect(httpx.Response(200, json=body, headers={"x-request-id": "req-1"})).decide(GROUNDED)
    assert answer.sanitized == [] and answer.record.sanitized == []
    assert answer.search_results[0].snippet == "Line one.\n\tLine two."


# --- error messages --------------------------------------------------------------------------------


def test_a_400_whose_message_holds_a_nul_raises_a_storable_error(
    connect: Callable[..., PerplexityClient],
) -> None:
    error = {"error": {"message": f"state holds {NUL} at byte 3\ud800", "type": "invalid_request_error"}}
    client = connect(raw_json(400, json.dumps(error), {"x-request-id": "req-1"}))
    with pytest.raises(UpstreamError) as info:
        client.decide(DECIDE)
    err = info.value
    assert err.message == "state holds at byte 3\ufffd"
    assert (err.status, err.retryable, err.record.attempt_count) == (400, False, 1)
    assert err.record.attempts[0].error == err.message
    assert err.record.sanitized == ["attempt[1].error"]
    assert_storable(err.message, str(err), err.record)


def test_an_ordinary_multi_line_or_long_error_is_not_reported_as_sanitized(
    connect: Callable[..., PerplexityClient],
) -> None:
    client = connect(httpx.Response(400, text="line one\n\n  line two " + "x" * 5000))
    with pytest.raises(UpstreamError) as info:
        client.decide(DECIDE)
    assert info.value.message.startswith("line one line two xxx")
    assert info.value.record.sanitized == []


def test_a_key_echoed_with_a_nul_inside_is_still_redacted(connect: Callable[..., PerplexityClient]) -> None:
    split_key = KEY[:10] + NUL + KEY[10:]
    client = connect(httpx.Response(401, json={"error": {"message": f"unknown key {split_key}"}}))
    with pytest.raises(UpstreamError) as info:
        client.decide(DECIDE)
    assert info.value.message == "unknown key [redacted]"
    assert KEY not in str(info.value.record)


# --- search results -------------------------------------------------------------------------------


def nul_page(n: int) -> dict[str, Any]:
    return page(n, title=f"Page{NUL}{n}", snippet=f"Scraped{NUL} text\r\nof page {n}.")


def test_grounded_decision_results_with_nuls_are_cleaned_and_named(
    connect: Callable[..., PerplexityClient],
) -> None:
    body = decision(results=[page(0), nul_page(1), page(2, date=f"2025{NUL}-01-01")])
    answer = connect(httpx.Response(200, json=body)).decide(GROUNDED)
    assert [(r.title, r.snippet) for r in answer.search_results[:2]] == [
        ("Page 0", "Snippet 0."),
        ("Page1", "Scraped text\nof page 1."),
    ]
    assert answer.sanitized == [
        "search_results[1].title",
        "search_results[1].snippet",
        "search_results[2].date",
    ]
    assert answer.record.sanitized == answer.sanitized
    assert_storable(answer)


def test_agent_results_are_named_by_their_place_in_the_answer(
    connect: Callable[..., PerplexityClient],
) -> None:
    body = agent(text=f"The sky{NUL} is blue [2].\r\n")
    body["output"].insert(1, {"type": "search_results", "results": [{"id": 2, **nul_page(2)}]})
    answer = connect(httpx.Response(200, json=body)).agent(AGENT)
    assert [r.id for r in answer.results] == [1, 2]
    assert answer.text == "The sky is blue [2].\n"
    assert answer.sanitized == ["results[1].title", "results[1].snippet", "text"]
    assert answer.result(2) is not None and answer.result(2).title == "Page2"  # type: ignore[union-attr]
    assert_storable(answer)


def test_agent_text_that_is_only_control_characters_is_no_text(
    connect: Callable[..., PerplexityClient],
) -> None:
    client = connect(httpx.Response(200, json=agent(text=NUL * 20)))
    with pytest.raises(UpstreamError, match="no message text") as info:
        client.agent(AGENT)
    assert info.value.retryable is False


def test_search_results_and_id_are_cleaned_and_capped(connect: Callable[..., PerplexityClient]) -> None:
    long_url = "https://e.com/" + "a" * 5000
    body = {"id": "s" * 300 + NUL, "results": [nul_page(0), page(1, url=long_url, title="T" * 5000)]}
    answer = connect(httpx.Response(200, json=body)).search(SEARCH)
    assert answer.id == "s" * 128
    first, second = answer.results
    assert (first.title, second.url, len(second.title)) == ("Page0", long_url[: URL.cap], TITLE.cap)
    assert answer.sanitized == [
        "id",
        "results[0].title",
        "results[0].snippet",
        "results[1].url",
        "results[1].title",
    ]
    assert_storable(answer)


def test_a_url_that_is_only_control_characters_is_malformed(connect: Callable[..., PerplexityClient]) -> None:
    client = connect(httpx.Response(200, json={"results": [page(0, url=NUL * 3)]}))
    with pytest.raises(UpstreamError, match=r"results\[0\]\.url is") as info:
        client.search(SEARCH)
    assert_storable(info.value.message, info.value.record)


def test_every_result_field_stays_within_its_cap(connect: Callable[..., PerplexityClient]) -> None:
    huge = page(0, title="t" * 50_000, snippet="s" * 50_000, date="d" * 500, last_updated="u" * 500)
    answer = connect(httpx.Response(200, json=decision(results=[huge]))).decide(GROUNDED)
    result = answer.search_results[0]
    assert (len(result.title), len(result.snippet)) == (TITLE.cap, SNIPPET.cap)
    assert result.date is not None and result.last_updated is not None
    assert (len(result.date), len(result.last_updated)) == (DATE.cap, DATE.cap)


def test_score_legend_strings_are_cleaned(connect: Callable[..., PerplexityClient]) -> None:
    request = {**DECIDE, "questions": {"grade": {"type": "score", "criteria": ["poor", "good"]}}}
    grade = {
        "type": "score",
        "score": 1,
        "legend": {"0": "poor", "1": f"go{NUL}od"},
        "probabilities": {"0": 0.2, "1": 0.8},
        "confidence": 0.8,
    }
    body = {**decision(), "answers": {"grade": grade}}
    answer = connect(httpx.Response(200, json=body)).decide(request)
    assert answer.answers["grade"].legend == {"0": "poor", "1": "good"}
    assert answer.sanitized == ["answers.grade.legend['1']"]


# --- x-request-id ----------------------------------------------------------------------------------


def test_a_6000_character_request_id_is_capped_and_named(connect: Callable[..., PerplexityClient]) -> None:
    long_id = "r" * 6000
    answer = connect(httpx.Response(200, json=decision(), headers={"x-request-id": long_id})).decide(DECIDE)
    assert answer.record.request_id == long_id[: REQUEST_ID.cap]
    assert answer.record.request_ids == [long_id[: REQUEST_ID.cap]]
    assert answer.sanitized == [] and answer.record.sanitized == ["attempt[1].request_id"]
    assert_record_fits(answer.record)


def test_request_ids_of_failed_attempts_are_named_by_attempt_number(
    connect: Callable[..., PerplexityClient],
) -> None:
    fine, bad = {"x-request-id": "req-1"}, {"x-request-id": "x" * 6000}
    error = {"error": {"message": f"overloaded{NUL}"}}
    client = connect(
        httpx.Response(503, json=error, headers=fine),
        httpx.Response(503, json={"error": {"message": "overloaded"}}, headers=bad),
        httpx.Response(503, json=error, headers=bad),
        httpx.Response(503, json=error, headers=fine),
    )
    with pytest.raises(UpstreamError) as info:
        client.decide(DECIDE)
    err = info.value
    assert err.record.sanitized == [
        "attempt[1].error",
        "attempt[2].request_id",
        "attempt[3].request_id",
        "attempt[3].error",
        "attempt[4].error",
    ]
    assert err.request_id == "req-1" and err.retryable
    assert [len(a.request_id or "") for a in err.record.attempts] == [5, 128, 128, 5]
    assert_storable(err.message, str(err), err.record)
    assert_record_fits(err.record)


# --- surrogates and invalid UTF-8 --------------------------------------------------------------------


def test_lone_surrogate_escapes_become_replacement_characters(
    connect: Callable[..., PerplexityClient],
) -> None:
    body = json.dumps(decision(results=[page(0)]))
    body = body.replace("pplx-decider-v1.2", "pplx\\ud800").replace("Snippet 0.", "Snip\\udfffpet")
    answer = connect(raw_json(200, body)).decide(GROUNDED)
    assert answer.model == "pplx\ufffd"
    assert answer.search_results[0].snippet == "Snip\ufffdpet"
    assert answer.sanitized == ["model", "search_results[0].snippet"]
    assert_storable(answer)


def test_invalid_utf8_inside_a_string_becomes_replacement_characters(
    connect: Callable[..., PerplexityClient],
) -> None:
    content = json.dumps(decision(results=[page(0)])).encode().replace(b"Page 0", b"Pa\xffge \xc3")
    response = httpx.Response(200, content=content, headers={"content-type": "application/json"})
    answer = connect(response).decide(GROUNDED)
    assert answer.search_results[0].title == "Pa\ufffdge \ufffd"
    assert answer.sanitized == ["search_results[0].title"]


def test_the_cleaned_passage_is_exactly_what_the_next_request_sends(
    connect: Callable[..., PerplexityClient],
) -> None:
    """A search snippet with a lone surrogate used to make the next request's body un-encodable."""
    upstream = Upstream(
        raw_json(200, json.dumps({"results": [page(0)]}).replace("Snippet 0.", "Snip\\ud800pet\\u0000.")),
        httpx.Response(200, json=decision()),
    )
    client = PerplexityClient("https://api.example.test", KEY, transport=httpx.MockTransport(upstream))
    with client:
        passage = client.search(SEARCH).results[0].snippet
        client.decide({**DECIDE, "state": passage})
    assert passage == "Snip\ufffdpet."
    assert json.loads(upstream.requests[1].content)["state"] == passage
