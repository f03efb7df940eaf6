"""PerplexityClient over httpx.MockTransport: retries, errors, records, hooks, and the key.

No network and no sleeping: `sleep` appends to a list, the monotonic clock is fake and only
moves when the fake upstream or the fake sleep moves it.

Ported from the seeds (behaviour, our API):
- seed 003 test_factcheck.py: test_request_body_sends_mode_only_when_grounded,
  test_bad_responses_raise_without_a_retry, test_retry_waits_then_counts_two_attempts_and_searches
  (HTTP dates now honoured, per docs/spec.md §1), test_gives_up_after_retries_on_5xx.
- seed 000 test_answer_gate.py: test_retry_on_429_honors_retry_after (answers without `type`).
- seed 001 test_quote_finder.py: test_search_parses_results.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import logging
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from clients import MissingApiKeyError, PerplexityClient, UpstreamError
from clients.errors import CallInterrupted
from clients.results import SearchResult
from simulator.app import create_app
from simulator.config import SimConfig
from simulator.fake_engine import FakeEngine
from simulator.server import run_in_thread

KEY = "pplx-test-0123456789abcdef0123456789abcdef"
BASE = "https://api.example.test"
NOW = 1_800_000_000.0
MODEL = "pplx-decider-latest"
QUESTION = {"type": "noul", "instructions": "Is the claim true?"}
BAD_MODE_BODY = {
    "error": {
        "code": None,
        "message": 'mode must be "web_grounding" when provided',
        "param": "mode",
        "type": "invalid_request_error",
    }
}


def claim_body(claim: str = "claim", grounded: bool = False, model: str = MODEL) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "state": claim, "questions": {"is_true": QUESTION}}
    if grounded:
        body["mode"] = "web_grounding"
    return body


def ok_decision(p: Any = 0.5, tokens: Any = 100, urls: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "pplx-decider-v1.2",
        "answers": {"is_true": {"type": "noul", "noul": p}},
        "usage": {"input_tokens": tokens, "output_tokens": 1},
    }
    if urls is not None:
        body["search_results"] = [{"url": u, "title": "t"} for u in urls]
    return body


def agent_body(text: str = "Rust 1.0 shipped in 2015 [1].") -> dict[str, Any]:
    return {
        "model": "sonar",
        "output": [
            {
                "type": "search_results",
                "results": [{"id": 1, "url": "https://a.com", "title": "A", "snippet": "s"}],
            },
            {"type": "message", "content": [{"type": "output_text", "text": text}]},
        ],
    }


Reply = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class Harness:
    """A fake upstream (canned replies in order) plus fake time, sleep and hooks."""

    def __init__(self, *replies: Reply, post_latency_s: float = 0.5) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []
        self.events: list[str] = []
        self.waits: list[float] = []
        self.throttled: list[tuple[str, float]] = []
        self.now = 0.0
        self.post_latency_s = post_latency_s

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.events.append("post")
        self.now += self.post_latency_s
        if not self.replies:
            pytest.fail("more POSTs than canned replies")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            return reply(request)
        return reply

    def sleep(self, seconds: float) -> None:
        self.events.append(f"sleep {seconds:g}")
        self.waits.append(seconds)
        self.now += seconds

    def client(self, **kwargs: Any) -> PerplexityClient:
        defaults: dict[str, Any] = {
            "transport": httpx.MockTransport(self.handle),
            "sleep": self.sleep,
            "clock": lambda: self.now,
            "wall_clock": lambda: NOW,
            "random": lambda: 0.5,  # the jitter midpoint: waits are exactly 1, 2, 4
            "before_attempt": lambda endpoint: self.events.append(f"before {endpoint}"),
            "on_throttled": self.on_throttled,
        }
        return PerplexityClient(BASE, KEY, **{**defaults, **kwargs})

    def on_throttled(self, endpoint: str, wait: float) -> None:
        self.events.append(f"throttled {endpoint} {wait:g}")
        self.throttled.append((endpoint, wait))

    def sent_bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests]


def rid(n: int) -> dict[str, str]:
    return {"x-request-id": f"req-{n}"}


# --- Decisions: happy paths ---------------------------------------------------------------------


@pytest.mark.parametrize(("grounded", "model"), [(False, MODEL), (True, "pplx-decider-flash-latest")])
def test_request_body_sends_mode_only_when_grounded(grounded: bool, model: str) -> None:
    urls = ["https://example.com/rust"] if grounded else None
    h = Harness(httpx.Response(200, json=ok_decision(0.19, 108, urls), headers=rid(1)))
    with h.client() as client:
        decision = client.decide(claim_body("Rust 1.0 was released in May 2015.", grounded, model))
    expected = {
        "model": model,
        "state": "Rust 1.0 was released in May 2015.",
        "questions": {"is_true": QUESTION},
    }
    assert h.sent_bodies() == [{**expected, "mode": "web_grounding"} if grounded else expected]
    request = h.requests[0]
    assert (request.method, str(request.url)) == ("POST", f"{BASE}/v1/decisions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert decision.answers["is_true"].noul == 0.19
    assert [r.url for r in decision.search_results] == (urls or [])
    record = decision.record
    assert (record.endpoint, record.model, record.grounded) == ("decisions", "pplx-decider-v1.2", grounded)
    assert (record.input_tokens, record.output_tokens, record.search_results) == (108, 1, len(urls or []))
    assert [(a.status, a.request_id, a.error) for a in record.attempts] == [(200, "req-1", None)]
    assert (record.attempt_count, record.request_id) == (1, "req-1")


def test_grounded_decision_keeps_search_results() -> None:
    results = [
        {
            "title": "Python 3.12",
            "url": "https://docs.python.org/3/whatsnew/3.12.html",
            "snippet": "Oct 2023",
        },
        {
            "title": "Release",
            "url": "https://www.python.org/downloads/release/python-3120/",
            "date": "2023-10-02",
        },
    ]
    h = Harness(httpx.Response(200, json={**ok_decision(0.98, 1800), "search_results": results}))
    with h.client() as client:
        decision = client.decide(claim_body(grounded=True))
    assert decision.search_results == [
        SearchResult(url=results[0]["url"], title="Python 3.12", snippet="Oct 2023"),
        SearchResult(url=results[1]["url"], title="Release", date="2023-10-02"),
    ]
    assert (decision.record.search_results, decision.record.grounded, decision.input_tokens) == (
        2,
        True,
        1800,
    )


def test_grounded_decision_with_no_evidence_has_empty_results() -> None:
    h = Harness(httpx.Response(200, json=ok_decision(0.5, 90, urls=[])))
    with h.client() as client:
        decision = client.decide(claim_body(grounded=True))
    assert decision.search_results == [] and decision.record.search_results == 0 and decision.record.grounded


def test_seed_000_429_without_body_honours_retry_after_and_answers_without_type() -> None:
    ok = {
        "answers": {"checkable": {"noul": 0.9}, "supports_1": {"noul": 0.8}, "contradicts_1": {"noul": 0.1}},
        "usage": {"input_tokens": 50, "output_tokens": 0},
    }
    body = {
        "model": "pplx-decider-v1.1-27b",
        "state": {"claim": "c", "passages": {"1": "p"}},
        "questions": {name: {"type": "noul", "instructions": "?"} for name in ok["answers"]},
    }
    h = Harness(httpx.Response(429, headers={"Retry-After": "2"}), httpx.Response(200, json=ok))
    with h.client() as client:
        decision = client.decide(body)
    assert decision.answers["supports_1"].noul == 0.8 and h.waits == [2.0]
    assert decision.record.model == "pplx-decider-v1.1-27b"  # no model in the response: the one we sent


# --- Errors without retry -----------------------------------------------------------------------


BAD_RESPONSES = [
    (httpx.Response(400, json=BAD_MODE_BODY), 400, 'mode must be "web_grounding" when provided'),
    (httpx.Response(401, text="Unauthorized"), 401, "Unauthorized"),
    (httpx.Response(403, json={"error": {"message": "forbidden"}}), 403, "forbidden"),
    (httpx.Response(404), 404, "Not Found"),  # empty body: the reason phrase
    (httpx.Response(405, text=""), 405, "Method Not Allowed"),
    (httpx.Response(413, json={"error": {"message": "body too large"}}), 413, "body too large"),
    (
        httpx.Response(422, json={"detail": [{"loc": ["body", "max_results"], "msg": "must be <= 20"}]}),
        422,
        "body.max_results: must be <= 20",
    ),
    (
        httpx.Response(200, json={"answers": {}}),
        200,
        "malformed response: answers.is_true is missing (the request asked for it)",
    ),
    (httpx.Response(200, text="<html>"), 200, "malformed response: body is not JSON"),
    *[
        (httpx.Response(200, json=ok_decision(p, tokens)), 200, f"malformed response: {detail}")
        for p, tokens, detail in [
            (True, 100, "answers.is_true.noul is a boolean (True), not a probability"),
            (None, 100, "answers.is_true.noul is null (None), not a probability"),
            ("0.9", 100, "answers.is_true.noul is a string ('0.9'), not a probability"),
            (1.5, 100, "answers.is_true.noul is 1.5, outside [0, 1]"),
            (0.9, -1, "usage.input_tokens is -1, negative"),
        ]
    ],
    (
        httpx.Response(200, json={**ok_decision(0.9, 100), "search_results": [{"title": "no url"}]}),
        200,
        "malformed response: search_results[0] has no url",
    ),
]


@pytest.mark.parametrize(
    ("response", "status", "message"), BAD_RESPONSES, ids=[m for _, _, m in BAD_RESPONSES]
)
def test_bad_responses_raise_without_a_retry(response: httpx.Response, status: int, message: str) -> None:
    response.headers["x-request-id"] = "req-bad"
    response.headers["Retry-After"] = "5"  # ignored: these outcomes never retry
    h = Harness(response)
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.decide(claim_body(grounded=True))
    err = info.value
    assert (err.status, err.message, err.request_id, err.endpoint) == (
        status,
        message,
        "req-bad",
        "decisions",
    )
    assert err.retryable is False
    assert str(err) == f"Decisions API failed: {status} {message} (request id req-bad)"
    assert len(h.requests) == 1 and h.waits == [] and h.throttled == []
    assert [(a.status, a.request_id, a.error, a.retry_after_s) for a in err.record.attempts] == [
        (status, "req-bad", message, None)
    ]
    assert err.record.input_tokens is None and err.record.search_results == 0 and err.record.grounded


# --- Retries --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "wait"),
    [
        ("3", 3.0),
        ("0", 0.0),
        (email.utils.formatdate(NOW + 7, usegmt=True), 7.0),  # HTTP date: 7 s after "now"
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),  # already past
        ("-5", 1.0),  # unusable: exponential backoff
        ("2.5", 1.0),
        ("600", 30.0),  # capped
    ],
)
def test_retry_waits_then_counts_two_attempts(retry_after: str, wait: float) -> None:
    h = Harness(
        httpx.Response(
            429, headers={"Retry-After": retry_after, **rid(1)}, json={"error": {"message": "slow"}}
        ),
        httpx.Response(200, json=ok_decision(0.5, 100), headers=rid(2)),
    )
    with h.client() as client:
        decision = client.decide(claim_body(grounded=True))
    assert decision.answers["is_true"].noul == 0.5 and h.waits == [pytest.approx(wait)]
    assert h.throttled == [("decisions", pytest.approx(wait))]
    record = decision.record
    assert record.attempt_count == 2 and record.grounded  # two POSTs: an upper bound of two billed searches
    assert [(a.status, a.request_id, a.error) for a in record.attempts] == [
        (429, "req-1", "slow"),
        (200, "req-2", None),
    ]
    assert record.attempts[0].retry_after_s == pytest.approx(wait) and record.request_ids == [
        "req-1",
        "req-2",
    ]


def test_429_then_200_pauses_the_limiter_before_sleeping() -> None:
    h = Harness(httpx.Response(429, headers={"Retry-After": "1"}), httpx.Response(200, json=ok_decision()))
    with h.client() as client:
        client.decide(claim_body())
    assert h.events == [
        "before decisions",
        "post",
        "throttled decisions 1",
        "sleep 1",
        "before decisions",
        "post",
    ]


def test_gives_up_after_three_retries_on_5xx_with_every_request_id() -> None:
    h = Harness(*[httpx.Response(503, text="upstream overloaded", headers=rid(n)) for n in range(1, 5)])
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.decide(claim_body())
    err = info.value
    assert len(h.requests) == 4 and h.waits == [1.0, 2.0, 4.0]  # exponential without Retry-After
    assert (err.status, err.message, err.request_id, err.retryable) == (
        503,
        "upstream overloaded",
        "req-4",
        True,
    )
    assert str(err) == "Decisions API failed: 503 upstream overloaded (request id req-4; 4 attempts)"
    assert err.record.request_ids == ["req-1", "req-2", "req-3", "req-4"]
    assert [a.retry_after_s for a in err.record.attempts] == [1.0, 2.0, 4.0, 8.0]  # the last is advisory
    assert h.throttled == []  # 503 is not a 429


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_each_retryable_status_is_retried(status: int) -> None:
    h = Harness(httpx.Response(status, text="busy"), httpx.Response(200, json=ok_decision()))
    with h.client() as client:
        assert client.decide(claim_body()).record.attempt_count == 2
    assert h.waits == [1.0]


@pytest.mark.parametrize(("rand", "waits"), [(0.0, [0.75, 1.5, 3.0]), (0.75, [1.125, 2.25, 4.5])])
def test_backoff_jitter_comes_from_the_injected_random(rand: float, waits: list[float]) -> None:
    h = Harness(*[httpx.Response(500) for _ in range(4)])
    with h.client(random=lambda: rand) as client, pytest.raises(UpstreamError):
        client.search({"query": "q"})
    assert h.waits == waits


def test_the_backoff_base_sets_the_first_wait() -> None:
    h = Harness(*[httpx.Response(500) for _ in range(4)])
    with h.client(retry_base_s=0.1) as client, pytest.raises(UpstreamError):
        client.search({"query": "q"})
    assert h.waits == pytest.approx([0.1, 0.2, 0.4])  # the harness's random is the jitter's midpoint


def test_no_wait_is_longer_than_30_seconds() -> None:
    h = Harness(*[httpx.Response(502) for _ in range(7)])
    with h.client(max_retries=6, random=lambda: 0.99) as client, pytest.raises(UpstreamError):
        client.decide(claim_body())
    assert len(h.requests) == 7 and max(h.waits) == 30.0
    assert h.waits[:5] == pytest.approx([1.245, 2.49, 4.98, 9.96, 19.92])


def test_max_retries_zero_sends_one_post() -> None:
    h = Harness(httpx.Response(503))
    with h.client(max_retries=0) as client, pytest.raises(UpstreamError) as info:
        client.decide(claim_body())
    assert len(h.requests) == 1 and h.waits == [] and info.value.retryable


def test_5xx_then_malformed_200_stops_without_retrying_the_malformed_one() -> None:
    h = Harness(
        httpx.Response(503, headers=rid(1)), httpx.Response(200, json=ok_decision(2.0), headers=rid(2))
    )
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.decide(claim_body())
    err = info.value
    assert (err.status, err.retryable, err.record.request_ids) == (200, False, ["req-1", "req-2"])
    assert len(h.requests) == 2 and h.waits == [1.0]


# --- Transport errors and timeouts ------------------------------------------------------------


def transport_error(
    kind: type[httpx.TransportError], message: str
) -> Callable[[httpx.Request], httpx.Response]:
    def fail(request: httpx.Request) -> httpx.Response:
        raise kind(message, request=request)

    return fail


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (httpx.ConnectError, "connection refused"),
        (httpx.ReadTimeout, "timed out"),
        (httpx.ReadError, "reset"),
    ],
)
def test_transport_errors_are_retried_then_raised_with_no_status(
    kind: type[httpx.TransportError], message: str
) -> None:
    h = Harness(*[transport_error(kind, message) for _ in range(4)])
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.decide(claim_body())
    err = info.value
    assert (err.status, err.request_id, err.retryable) == (None, None, True)
    assert err.message == f"{kind.__name__}: {message}"
    assert str(err) == f"Decisions API failed: no response: {kind.__name__}: {message} (4 attempts)"
    assert len(h.requests) == 4 and h.waits == [1.0, 2.0, 4.0]
    assert [a.status for a in err.record.attempts] == [None] * 4


def test_timeout_then_answer_succeeds() -> None:
    h = Harness(transport_error(httpx.ReadTimeout, "timed out"), httpx.Response(200, json=ok_decision(0.7)))
    with h.client() as client:
        decision = client.decide(claim_body())
    assert decision.answers["is_true"].noul == 0.7
    assert [(a.status, a.error) for a in decision.record.attempts] == [
        (None, "ReadTimeout: timed out"),
        (200, None),
    ]


def test_configuration_transport_errors_are_not_retried() -> None:
    h = Harness(transport_error(httpx.UnsupportedProtocol, "unsupported scheme"))
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.decide(claim_body())
    assert (info.value.status, info.value.retryable, len(h.requests)) == (None, False, 1)


# --- Records, hooks, latency --------------------------------------------------------------------


def test_before_attempt_runs_once_per_post() -> None:
    calls: list[str] = []
    h = Harness(httpx.Response(500), httpx.Response(502), httpx.Response(200, json=ok_decision()))
    with h.client(before_attempt=calls.append) as client:
        decision = client.decide(claim_body())
    assert calls == ["decisions"] * 3 == ["decisions"] * decision.record.attempt_count


def test_latency_per_attempt_and_total_with_waits() -> None:
    h = Harness(httpx.Response(503), httpx.Response(200, json=ok_decision()), post_latency_s=0.5)
    with h.client() as client:
        record = client.decide(claim_body()).record
    assert [a.latency_s for a in record.attempts] == [0.5, 0.5]
    assert record.latency_s == 2.0  # 0.5 + 1 s backoff + 0.5


def test_one_debug_line_per_attempt(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(httpx.Response(503, headers=rid(1)), httpx.Response(200, json=ok_decision(), headers=rid(2)))
    with caplog.at_level(logging.DEBUG, logger="factgate.clients"), h.client() as client:
        client.decide(claim_body())
    lines = [r.getMessage() for r in caplog.records if r.name == "factgate.clients"]
    assert len(lines) == 2
    assert "decisions" in lines[0] and "status=503" in lines[0] and "request_id=req-1" in lines[0]
    assert "status=200" in lines[1] and "request_id=req-2" in lines[1] and "latency=" in lines[1]


def test_body_that_is_not_json_fails_before_any_post() -> None:
    h = Harness()
    with h.client() as client, pytest.raises(ValueError):
        client.decide({"model": MODEL, "state": float("nan"), "questions": {}})
    assert h.events == []


def test_upstream_error_pickles_with_its_record() -> None:
    h = Harness(httpx.Response(400, json={"error": {"message": "bad"}}, headers=rid(1)))
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.decide(claim_body())
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.status, copy.message, copy.request_id, str(copy)) == (400, "bad", "req-1", str(info.value))
    assert copy.record == info.value.record


# --- Error text -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (
            httpx.Response(
                504, text="<!DOCTYPE html><html><head><title>504 Gateway Time-out</title></head></html>"
            ),
            "504 Gateway Time-out",
        ),
        (httpx.Response(500, text="line one\n\n   line two"), "line one line two"),
        (httpx.Response(500, json={"error": "plain string error"}), "plain string error"),
        (
            httpx.Response(500, json={"error": {"message": ""}, "detail": "fallback detail"}),
            "fallback detail",
        ),
    ],
)
def test_error_text_is_one_readable_line(response: httpx.Response, message: str) -> None:
    h = Harness(*[response] * 4)
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.decide(claim_body())
    assert info.value.message == message and "\n" not in str(info.value)


def test_long_raw_text_is_truncated() -> None:
    h = Harness(httpx.Response(400, text="x" * 5000))
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.decide(claim_body())
    assert info.value.message.startswith("xxx") and len(info.value.message) <= 300


# --- The key ----------------------------------------------------------------------------------


def echo_authorization(status: int) -> Callable[[httpx.Request], httpx.Response]:
    def echo(request: httpx.Request) -> httpx.Response:
        auth = request.headers["authorization"]
        return httpx.Response(
            status, json={"error": {"message": f"bad credentials: {auth} (key {auth[7:]})"}}
        )

    return echo


def test_key_never_leaks_into_errors_records_repr_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    def leaky_transport_error(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"proxy refused {request.headers['authorization']}", request=request)

    h = Harness(
        echo_authorization(503), leaky_transport_error, echo_authorization(500), echo_authorization(502)
    )
    with caplog.at_level(logging.DEBUG), h.client() as client, pytest.raises(UpstreamError) as info:
        assert KEY not in repr(client) and KEY not in str(client)
        client.decide(claim_body())
    err = info.value
    assert h.requests[0].headers["authorization"] == f"Bearer {KEY}"  # it was sent, and echoed back
    surfaced = [
        str(err),
        repr(err),
        err.message,
        repr(err.record),
        json.dumps(dataclasses.asdict(err.record)),
    ]
    surfaced += [r.getMessage() for r in caplog.records]
    assert all(KEY not in text for text in surfaced)
    assert err.message == "bad credentials: Bearer [redacted] (key [redacted])"
    assert err.record.attempts[1].error == "ConnectError: proxy refused Bearer [redacted]"


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PERPLEXITY_API_KEY", raising=False)
    with pytest.raises(MissingApiKeyError, match="PERPLEXITY_API_KEY is not set"):
        PerplexityClient.from_env()
    monkeypatch.setenv("PERPLEXITY_API_KEY", "   ")
    with pytest.raises(MissingApiKeyError):
        PerplexityClient.from_env()
    with pytest.raises(MissingApiKeyError):
        PerplexityClient(BASE, "")


def test_malformed_key_is_rejected_without_echoing_it() -> None:
    with pytest.raises(ValueError) as info:
        PerplexityClient(BASE, "pplx-secret-part\nInjected: header")
    assert "PERPLEXITY_API_KEY" in str(info.value) and "secret-part" not in str(info.value)


@pytest.mark.parametrize(
    ("env_base", "url"),
    [
        (None, "https://api.perplexity.ai/v1/decisions"),
        ("", "https://api.perplexity.ai/v1/decisions"),
        ("http://127.0.0.1:5055", "http://127.0.0.1:5055/v1/decisions"),
        ("http://sim.local/prefix/", "http://sim.local/prefix/v1/decisions"),
    ],
)
def test_from_env_reads_key_and_base(monkeypatch: pytest.MonkeyPatch, env_base: str | None, url: str) -> None:
    monkeypatch.setenv("PERPLEXITY_API_KEY", KEY)
    if env_base is None:
        monkeypatch.delenv("PERPLEXITY_API_BASE", raising=False)
    else:
        monkeypatch.setenv("PERPLEXITY_API_BASE", env_base)
    h = Harness(httpx.Response(200, json=ok_decision()))
    with PerplexityClient.from_env(transport=httpx.MockTransport(h.handle), sleep=h.sleep) as client:
        client.decide(claim_body())
    assert str(h.requests[0].url) == url and h.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_base_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="PERPLEXITY_API_BASE"):
        PerplexityClient("api.perplexity.ai", KEY)


def test_close_and_context_manager_release_the_connection_pool() -> None:
    h = Harness()
    client = h.client()
    with client:
        pass
    with pytest.raises(RuntimeError):  # httpx refuses to send on a closed client
        client.decide(claim_body())


# --- Agent ----------------------------------------------------------------------------------------

AGENT_REQUEST = {
    "input": "When was Rust 1.0 released?",
    "preset": "fast",
    "instructions": "Answer in plain prose.",
    "tools": [{"type": "web_search"}],
}


def test_agent_happy_path() -> None:
    body = {**agent_body(), "usage": {"input_tokens": 700, "output_tokens": 40}}
    h = Harness(httpx.Response(200, json=body, headers=rid(7)))
    with h.client() as client:
        answer = client.agent(AGENT_REQUEST)
    assert str(h.requests[0].url) == f"{BASE}/v1/agent" and h.sent_bodies() == [AGENT_REQUEST]
    assert h.requests[0].extensions["timeout"]["read"] == 120.0  # the Agent searches and writes: longer
    assert answer.text == "Rust 1.0 shipped in 2015 [1]."
    assert answer.result(1) == SearchResult(url="https://a.com", title="A", snippet="s", id=1)
    record = answer.record
    assert (record.endpoint, record.model, record.grounded, record.search_results) == (
        "agent",
        "sonar",
        True,
        1,
    )
    assert (record.input_tokens, record.output_tokens, record.request_id) == (700, 40, "req-7")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"output": [{"type": "message", "content": [{"type": "output_text", "text": "From memory."}]}]},
            "malformed response: no search results: the model answered without searching",
        ),
        (
            {"output": [{"type": "search_results", "results": [{"id": 1, "url": "https://a.com"}]}]},
            "malformed response: no message text: output has no message with output_text",
        ),
    ],
)
def test_agent_answer_without_text_or_search_is_an_error(body: dict, message: str) -> None:
    h = Harness(httpx.Response(200, json=body, headers=rid(3)))
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.agent(AGENT_REQUEST)
    assert (info.value.status, info.value.message, info.value.retryable) == (200, message, False)
    assert str(info.value).startswith("Agent API failed: 200 malformed response") and len(h.requests) == 1


def test_agent_retries_then_reports() -> None:
    h = Harness(
        httpx.Response(429, headers={"Retry-After": "4", **rid(1)}),
        httpx.Response(500, json={"error": {"message": "agent crashed"}}, headers=rid(2)),
        httpx.Response(200, json=agent_body()),
    )
    with h.client() as client:
        answer = client.agent(AGENT_REQUEST)
    assert h.waits == [4.0, 2.0] and h.throttled == [("agent", 4.0)]
    assert answer.record.request_ids == ["req-1", "req-2"] and answer.record.attempt_count == 3


def test_agent_timeout_can_be_overridden_per_client_and_call() -> None:
    h = Harness(httpx.Response(200, json=agent_body()), httpx.Response(200, json=agent_body()))
    with h.client(agent_timeout=45.0) as client:
        client.agent(AGENT_REQUEST)
        client.agent(AGENT_REQUEST, timeout=5.0)
    assert [r.extensions["timeout"]["read"] for r in h.requests] == [45.0, 5.0]


# --- Search ---------------------------------------------------------------------------------------


def test_search_parses_results() -> None:
    body = {
        "id": "x",
        "results": [
            {
                "title": "A",
                "url": "https://a.com",
                "snippet": "Text.",
                "date": "2024-02-26",
                "last_updated": "2025-01-01",
            },
            {"title": "B", "url": "https://b.com", "snippet": "More.", "date": None},
        ],
    }
    request = {"query": "q?", "max_results": 5, "max_tokens_per_page": 2048}
    h = Harness(httpx.Response(200, json=body, headers=rid(9)))
    with h.client() as client:
        response = client.search(request)
    assert str(h.requests[0].url) == f"{BASE}/search" and h.sent_bodies() == [request]
    assert h.requests[0].extensions["timeout"]["read"] == 30.0
    assert response.results == [
        SearchResult("https://a.com", "A", "Text.", "2024-02-26", "2025-01-01"),
        SearchResult("https://b.com", "B", "More.", None),
    ]
    record = response.record
    assert (record.endpoint, record.grounded, record.search_results, record.request_id) == (
        "search",
        True,
        2,
        "req-9",
    )
    assert (record.model, record.input_tokens) == (None, None)


def test_search_422_detail_is_surfaced_without_retry() -> None:
    detail = [
        {"loc": ["body", "max_results"], "msg": "Input should be less than or equal to 20", "type": "x"}
    ]
    h = Harness(httpx.Response(422, json={"detail": detail}))
    with h.client() as client, pytest.raises(UpstreamError) as info:
        client.search({"query": "q", "max_results": 50})
    assert (
        str(info.value) == "Search API failed: 422 body.max_results: Input should be less than or equal to 20"
    )
    assert len(h.requests) == 1


def test_search_result_without_url_is_an_error() -> None:
    h = Harness(httpx.Response(200, json={"results": [{"title": "A", "snippet": "x"}]}))
    with h.client() as client, pytest.raises(UpstreamError, match=r"results\[0\] has no url"):
        client.search({"query": "q"})


def test_user_agent_names_the_installed_version() -> None:
    """The version comes from the package metadata, so a release never sends a stale number."""
    from importlib import metadata

    seen: list[str] = []

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["User-Agent"])
        return httpx.Response(200, json=ok_decision())

    with PerplexityClient(BASE, KEY, transport=httpx.MockTransport(reply), max_retries=0) as client:
        client.decide(claim_body())
    assert seen == [f"factgate/{metadata.version('factgate')} (httpx {httpx.__version__})"]


# --- the wire gate hook (`before_send`) ------------------------------------------------------------


def traced(reply: httpx.Response, events: list[str]) -> Callable[[httpx.Request], httpx.Response]:
    """A MockTransport reply that drives httpcore's trace hook the way a real connection does."""

    def handle(request: httpx.Request) -> httpx.Response:
        trace = request.extensions["trace"]
        trace("http11.send_request_headers.started", {})
        events.append("wire")
        trace("http11.send_request_body.complete", {})
        return reply

    return handle


def test_before_send_runs_at_the_wire_on_every_attempt_and_hears_when_it_left() -> None:
    h = Harness()
    h.replies = [
        traced(httpx.Response(503, headers=rid(1)), h.events),
        traced(httpx.Response(200, json=ok_decision(), headers=rid(2)), h.events),
    ]

    def gate(endpoint: str) -> Callable[[], object]:
        h.events.append(f"gate {endpoint}")
        return lambda: h.events.append("left")

    h.client(before_send=gate).decide(claim_body())
    assert h.events == [
        "before decisions", "post", "gate decisions", "wire", "left", "sleep 1",
        "before decisions", "post", "gate decisions", "wire", "left",
    ]  # fmt: skip


def test_an_attempt_that_fails_after_the_gate_still_reports_it_left_once() -> None:
    h = Harness()
    left: list[str] = []

    def broken(request: httpx.Request) -> httpx.Response:
        request.extensions["trace"]("http11.send_request_headers.started", {})
        raise httpx.WriteError("connection reset")  # half-written: it may have reached the upstream

    h.replies = [broken]
    with pytest.raises(UpstreamError):
        h.client(before_send=lambda e: lambda: left.append(e), max_retries=0).decide(claim_body())
    assert left == ["decisions"]


def test_a_gate_that_gives_up_raises_its_own_error_before_any_attempt_and_interrupts_after_one() -> None:
    class GateGaveUpError(Exception):
        pass

    def gate(endpoint: str) -> Callable[[], object]:
        raise GateGaveUpError(endpoint)

    events: list[str] = []
    h = Harness(traced(httpx.Response(200, json=ok_decision()), events))
    with pytest.raises(GateGaveUpError):
        h.client(before_send=gate).decide(claim_body())
    assert events == []  # nothing was written

    calls = []

    def second_fails(endpoint: str) -> Callable[[], object]:
        calls.append(endpoint)
        if len(calls) > 1:
            raise GateGaveUpError(endpoint)
        return lambda: None

    h = Harness(traced(httpx.Response(503), events), traced(httpx.Response(200, json=ok_decision()), events))
    with pytest.raises(CallInterrupted) as caught:
        h.client(before_send=second_fails).decide(claim_body())
    assert isinstance(caught.value.cause, GateGaveUpError)
    assert len(caught.value.record.attempts) == 1


def test_httpx_real_transport_calls_the_gate_before_the_bytes_and_reports_after_them() -> None:
    """Over a real socket (the simulator on loopback): httpcore emits the two events the gate relies on,
    and the simulator counts the request only after the gate let it go."""
    app = create_app(SimConfig(), FakeEngine())
    order: list[str] = []

    def gate(endpoint: str) -> Callable[[], object]:
        order.append(f"gate {endpoint}")
        return lambda: order.append("left")

    with run_in_thread(app=app) as sim:
        client = PerplexityClient(sim.base_url, KEY, before_send=gate, max_retries=0)
        try:
            client.decide(claim_body())
            client.decide(claim_body())  # on the kept-alive connection too
        finally:
            client.close()
    assert order == ["gate decisions", "left", "gate decisions", "left"]


def test_time_held_at_the_gate_is_queue_wait_not_upstream_latency() -> None:
    h = Harness(post_latency_s=0.5)
    h.replies = [traced(httpx.Response(200, json=ok_decision()), h.events)]

    def gate(endpoint: str) -> Callable[[], object]:
        h.now += 0.2  # held 200 ms before the first byte
        return lambda: None

    decision = h.client(before_send=gate).decide(claim_body())
    attempt = decision.record.attempts[0]
    assert attempt.latency_s == pytest.approx(0.5)
    assert attempt.queue_wait_s == pytest.approx(0.2)


def test_the_report_waits_for_the_request_to_arrive() -> None:
    """With an arrival hook (the peer's acknowledgement, clients/wire_ack.py) the gate hears the request
    left only after it arrived, so a request queued behind a slow link is never counted as gone early."""
    h = Harness()
    h.replies = [traced(httpx.Response(200, json=ok_decision()), h.events)]

    def gate(endpoint: str) -> Callable[[], object]:
        h.events.append("gate")
        return lambda: h.events.append("left")

    h.client(before_send=gate, arrival=lambda: h.events.append("acked")).decide(claim_body())
    assert h.events == ["before decisions", "post", "gate", "wire", "acked", "left"]


def test_a_failing_arrival_hook_still_reports_and_never_fails_the_request() -> None:
    h = Harness()
    h.replies = [traced(httpx.Response(200, json=ok_decision()), h.events)]

    def broken() -> None:
        raise OSError("no TCP_INFO")

    h.client(before_send=lambda e: lambda: h.events.append("left"), arrival=broken).decide(claim_body())
    assert h.events[-1] == "left"


def test_the_default_transport_reports_after_arrival() -> None:
    from clients import wire_ack

    client = PerplexityClient(BASE, KEY, before_send=lambda e: None, max_retries=0)
    try:
        assert client._arrival is wire_ack.await_arrival
        assert isinstance(client._http._transport._pool._network_backend, wire_ack.AckingBackend)  # type: ignore[attr-defined]
    finally:
        client.close()


# --- the POST itself (PerplexityClient._post, past httpx.Client's per-request machinery) -----------------


def test_each_post_carries_the_clients_headers_and_no_cookie_it_was_given() -> None:
    # A Set-Cookie from the upstream is not kept: the key authenticates every request, not a session.
    h = Harness(
        httpx.Response(200, json=ok_decision(), headers={**rid(1), "set-cookie": "lb=node-7; Path=/"}),
        httpx.Response(200, json=ok_decision(), headers=rid(2)),
    )
    with h.client() as client:
        client.decide(claim_body())
        client.decide(claim_body(), timeout=7.5)
    first, second = h.requests
    for request in (first, second):
        assert request.method == "POST" and str(request.url) == f"{BASE}/v1/decisions"
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["user-agent"].startswith("factgate/")
        assert "cookie" not in request.headers
    assert first.extensions["timeout"] == httpx.Timeout(30.0).as_dict()
    assert second.extensions["timeout"] == httpx.Timeout(7.5).as_dict()


@contextmanager
def local_upstream(on_post: Callable[[Any], None], *, keep_alive: bool = False) -> Iterator[int]:
    """A real HTTP server on loopback answering every POST with a decision (`on_post` sees each request's
    handler first); yields its port. Keep-alive as the real API when asked (HTTP/1.1)."""
    import http.server
    import threading

    class Upstream(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

        def do_POST(self) -> None:  # the stdlib handler names its methods so
            self.rfile.read(int(self.headers["Content-Length"]))
            on_post(self)
            body = json.dumps(ok_decision(0.9)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def test_a_proxy_the_environment_names_carries_the_posts(monkeypatch: pytest.MonkeyPatch) -> None:
    # What httpx.Client.send would have done per request (its mounts for HTTP_PROXY and the like), the
    # client settles once per endpoint: a deployment behind an egress proxy keeps working.
    seen: list[str] = []  # absolute-form: the proxy is told where the request goes
    with local_upstream(lambda handler: seen.append(handler.path)) as port:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with PerplexityClient("http://api.example.test", KEY, sleep=lambda _s: None) as client:
            decision = client.decide(claim_body())
    assert seen == ["http://api.example.test/v1/decisions"]
    assert decision.answers["is_true"].noul == 0.9


def test_each_thread_keeps_its_own_connection_and_close_ends_them_all() -> None:
    # httpx's own transport is made once per thread (PerplexityClient._transport): a thread's requests reuse
    # its one connection, another thread has its own, a thread that ended gives its pool back, and close()
    # closes every pool.
    import threading

    ports: list[int] = []
    with local_upstream(lambda handler: ports.append(handler.client_address[1]), keep_alive=True) as port:
        client = PerplexityClient(f"http://127.0.0.1:{port}", KEY, max_retries=0)
        client.decide(claim_body())
        client.decide(claim_body())
        other = threading.Thread(target=lambda: (client.decide(claim_body()), client.decide(claim_body())))
        other.start()
        other.join()
        assert ports[0] == ports[1] and ports[2] == ports[3]  # each thread reuses its connection
        assert ports[0] != ports[2]  # ... and the threads do not share one
        assert len(client._per_thread) == 2
        late = threading.Thread(target=lambda: client.decide(claim_body()))
        late.start()
        late.join()
        assert len(client._per_thread) == 2  # the ended thread's pool was closed when this one's was made
        pools = [http for _ref, http in client._per_thread]
        client.close()
        assert all(http.is_closed for http in pools)
        with pytest.raises(RuntimeError, match="closed"):
            client.decide(claim_body())


def test_a_gate_pass_gone_stale_before_the_write_is_replaced_and_nothing_was_sent_on_it() -> None:
    # A stall between the gate and the write (workers/limiter.py:pass_fresh): the client's own transport
    # holds the request until its body is complete, so the gate is asked again before any byte leaves; the
    # stale pass is reported (stricter, never looser) and the request goes once, on the new pass.
    events: list[str] = []
    arrived: list[int] = []

    class Ticket:
        def __init__(self, n: int, fresh: bool) -> None:
            self.n, self._fresh = n, fresh

        def __call__(self) -> None:
            events.append(f"left {self.n}")

        def fresh(self) -> bool:
            events.append(f"fresh? {self.n}")
            return self._fresh

    def gate(endpoint: str) -> Ticket:
        n = sum(e.startswith("gate") for e in events) + 1
        events.append(f"gate {n}")
        return Ticket(n, fresh=n > 1)

    with (
        local_upstream(lambda _handler: arrived.append(len(events)), keep_alive=True) as port,
        PerplexityClient(f"http://127.0.0.1:{port}", KEY, before_send=gate) as client,
    ):
        client.decide(claim_body())
    assert events == ["gate 1", "fresh? 1", "left 1", "gate 2", "left 2"]
    assert len(arrived) == 1 and arrived[0] >= 4  # one request, on the wire only after the second pass


def test_a_given_transport_never_renews_a_pass() -> None:
    # A transport the client did not build may have written the headers already: nothing to take back.
    h = Harness()
    h.replies = [traced(httpx.Response(200, json=ok_decision()), h.events)]

    class Stale:
        def __call__(self) -> None:
            h.events.append("left")

        def fresh(self) -> bool:
            raise AssertionError("asked with a transport that does not hold the request")

    h.client(before_send=lambda e: Stale()).decide(claim_body())
    assert h.events[-1] == "left"
