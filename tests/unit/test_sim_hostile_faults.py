"""The simulator's hostile fault kinds, on the wire and through the real client.

Each kind is checked twice: with raw httpx (the `X-Sim-Fault` header; what the wire carries), and
with `PerplexityClient` against `SimConfig(fault_rate=1.0, faults=(kind,))` (what the client makes
of it: storable values, and `sanitized` naming every field the fault touched).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from clients import PerplexityClient, UpstreamError
from clients.results import AgentAnswer, Decision, SearchResponse
from clients.sanitize import MODEL, REQUEST_ID
from simulator.app import create_app, simulator_state
from simulator.config import SimConfig
from simulator.fake_engine import FakeEngine
from simulator.faults import HOSTILE_FAULTS, LONG_MODEL_CHARS, LONG_REQUEST_ID_CHARS

AUTH = {"Authorization": "Bearer test-key"}
UNLIMITED = SimConfig(decisions_rps=0, search_rps=0, agent_rps=0)
QUESTION = {"type": "noul", "instructions": "Is the claim true?"}
DECISION = {
    "model": "pplx-decider-v1.2",
    "state": "Water boils at 100 C.",
    "questions": {"is_true": QUESTION},
}
GROUNDED = {**DECISION, "mode": "web_grounding"}
AGENT = {"input": "Why is the sky blue?", "preset": "fast", "tools": [{"type": "web_search"}]}
SEARCH = {"query": "sky colour", "max_results": 3}
ENDPOINTS = [("/v1/decisions", GROUNDED), ("/v1/agent", AGENT), ("/search", SEARCH)]
NUL = "\x00"


def raw_client(config: SimConfig = UNLIMITED) -> httpx.Client:
    app = create_app(config, FakeEngine())
    return httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://simulator", headers=AUTH)


def post(path: str, body: dict[str, Any], kind: str) -> httpx.Response:
    with raw_client() as c:
        return c.post(path, json=body, headers={"X-Sim-Fault": kind})


def results_of(path: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    if path == "/v1/decisions":
        found: list[dict[str, Any]] = payload.get("search_results") or []
        return found
    if path == "/search":
        return list(payload["results"])
    return [r for item in payload["output"] if item["type"] == "search_results" for r in item["results"]]


def model_field(path: str) -> str:
    return "id" if path == "/search" else "model"


def message_text(payload: dict[str, Any]) -> str:
    item = next(i for i in payload["output"] if i["type"] == "message")
    return str(item["content"][0]["text"])


# --- On the wire ------------------------------------------------------------------------------------


def test_hostile_kinds_are_known_but_not_in_the_default_draw() -> None:
    assert set(HOSTILE_FAULTS) == {
        "model_long",
        "model_nul",
        "error_nul",
        "result_nul",
        "request_id_long",
        "surrogate",
    }
    assert not set(HOSTILE_FAULTS) & set(SimConfig().faults)


@pytest.mark.parametrize(("path", "body"), ENDPOINTS)
def test_model_long_sends_a_100000_character_model(path: str, body: dict[str, Any]) -> None:
    response = post(path, body, "model_long")
    assert response.status_code == 200
    value = response.json()[model_field(path)]
    assert len(value) == LONG_MODEL_CHARS
    if path != "/search":
        assert value.startswith(f"{body.get('model') or 'preset/fast'}-simulated")


@pytest.mark.parametrize(("path", "body"), ENDPOINTS)
def test_model_nul_puts_a_nul_inside_the_model(path: str, body: dict[str, Any]) -> None:
    response = post(path, body, "model_nul")
    assert response.status_code == 200
    assert b"\\u0000" in response.content
    value = response.json()[model_field(path)]
    assert NUL in value.strip(NUL)  # inside, not only at an end


@pytest.mark.parametrize(("path", "body"), ENDPOINTS)
def test_error_nul_is_a_400_request_error_whose_message_holds_a_nul(path: str, body: dict[str, Any]) -> None:
    response = post(path, body, "error_nul")
    assert response.status_code == 400
    assert uuid.UUID(response.headers["x-request-id"])
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert NUL in error["message"]


@pytest.mark.parametrize(("path", "body"), ENDPOINTS)
def test_result_nul_puts_nuls_in_every_result_title_and_snippet(path: str, body: dict[str, Any]) -> None:
    results = results_of(path, post(path, body, "result_nul").json())
    assert results
    for result in results:
        assert NUL in result["title"] and NUL in result["snippet"]
        assert NUL not in result["url"]


def test_result_nul_leaves_an_ungrounded_decision_unchanged() -> None:
    with raw_client() as c:
        clean = c.post("/v1/decisions", json=DECISION)
        hostile = c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "result_nul"})
    assert hostile.status_code == 200 and hostile.content == clean.content


@pytest.mark.parametrize(("path", "body"), ENDPOINTS)
def test_request_id_long_is_a_normal_answer_with_a_6000_character_id(path: str, body: dict[str, Any]) -> None:
    with raw_client() as c:
        clean = c.post(path, json=body)
        hostile = c.post(path, json=body, headers={"X-Sim-Fault": "request_id_long"})
    assert hostile.status_code == 200
    assert len(hostile.headers["x-request-id"]) == LONG_REQUEST_ID_CHARS
    assert hostile.json().keys() == clean.json().keys()
    if path == "/v1/decisions":  # deterministic body: exactly the clean answer
        assert hostile.content == clean.content


@pytest.mark.parametrize(("path", "body"), ENDPOINTS)
def test_surrogate_sends_ascii_json_with_lone_surrogate_escapes(path: str, body: dict[str, Any]) -> None:
    response = post(path, body, "surrogate")
    assert response.status_code == 200
    assert response.content.isascii() and b"\\ud800" in response.content
    payload = response.json()
    assert "\ud800" in payload[model_field(path)]
    for result in results_of(path, payload):
        assert "\ud800" in result["title"] and "\ud800" in result["snippet"]
    if path == "/v1/agent":
        assert "\ud800" in message_text(payload)
    with pytest.raises(UnicodeEncodeError):
        json.dumps(payload, ensure_ascii=False).encode("utf-8")  # what Postgres would be handed


@pytest.mark.parametrize("kind", HOSTILE_FAULTS)
def test_each_hostile_kind_fires_from_the_config_and_is_counted(kind: str) -> None:
    app = create_app(
        SimConfig(decisions_rps=0, fault_rate=1.0, faults=(kind,), allow_test_headers=False), FakeEngine()
    )
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://s", headers=AUTH) as c:
        response = c.post("/v1/decisions", json=GROUNDED)
    assert response.status_code == (400 if kind == "error_nul" else 200)
    assert simulator_state(app).stats.snapshot()["faults"] == {kind: 1}


# --- Through the client ------------------------------------------------------------------------------


@pytest.fixture(params=HOSTILE_FAULTS)
def hostile_client(request: pytest.FixtureRequest) -> Iterator[tuple[str, PerplexityClient]]:
    kind: str = request.param
    config = dataclasses.replace(UNLIMITED, fault_rate=1.0, faults=(kind,))
    transport = httpx.WSGITransport(app=create_app(config, FakeEngine()))
    with PerplexityClient(
        "http://simulator", "test-key", transport=transport, sleep=lambda _s: None
    ) as client:
        yield kind, client


def strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        yield from strings(dataclasses.asdict(value))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def assert_storable(value: object) -> None:
    for text in strings(value):
        assert NUL not in text
        text.encode("utf-8")


def expected_paths(kind: str, result: Decision | AgentAnswer | SearchResponse) -> set[str]:
    """The answer fields each hostile kind touches, by their path in the returned object."""
    if isinstance(result, Decision):
        found, prefix, model = result.search_results, "search_results", "model"
    elif isinstance(result, AgentAnswer):
        found, prefix, model = result.results, "results", "model"
    else:
        found, prefix, model = result.results, "results", "id"
    pages = {f"{prefix}[{i}].{name}" for i in range(len(found)) for name in ("title", "snippet")}
    if kind in {"model_long", "model_nul"}:
        return {model}
    if kind == "result_nul":
        return pages
    if kind == "surrogate":
        return {model} | pages | ({"text"} if isinstance(result, AgentAnswer) else set())
    return set()


def test_every_hostile_kind_reaches_the_caller_storable_and_named(
    hostile_client: tuple[str, PerplexityClient],
) -> None:
    kind, client = hostile_client
    calls = [lambda: client.decide(GROUNDED), lambda: client.agent(AGENT), lambda: client.search(SEARCH)]
    for call in calls:
        if kind == "error_nul":
            with pytest.raises(UpstreamError) as info:
                call()
            err = info.value
            assert (err.status, err.retryable, err.record.attempt_count) == (400, False, 1)
            assert err.record.sanitized == ["attempt[1].error"]
            assert_storable([err.message, str(err), err.record])
            continue
        result = call()
        assert_storable(result)
        assert set(result.sanitized) == expected_paths(kind, result)
        record = result.record
        attempt_paths = ["attempt[1].request_id"] if kind == "request_id_long" else []
        assert record.sanitized == [*result.sanitized, *attempt_paths]
        assert record.model is None or len(record.model) <= MODEL.cap
        assert record.request_id is not None and len(record.request_id) <= REQUEST_ID.cap
        if kind in {"result_nul", "surrogate"}:
            assert result.sanitized  # the fault had results to spoil
