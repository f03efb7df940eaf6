"""The simulator's wire rules (docs/spec.md §1): validation, status codes, headers and error bodies.

Driven in-process through `httpx.WSGITransport`, the way the embedded demo mounts the simulator.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.app import create_app, simulator_state
from simulator.config import SimConfig
from simulator.fake_engine import FakeEngine
from simulator.wire import MAX_BODY_BYTES, MAX_INPUT_TOKENS, MODELS

AUTH = {"Authorization": "Bearer test-key"}
UNLIMITED = SimConfig(decisions_rps=0, search_rps=0, agent_rps=0)
MODEL = "pplx-decider-v1.1-27b"
NOUL = {"type": "noul", "instructions": "Is the claim true?"}
EXACT_MODE_ERROR = (
    b'{"error":{"code":null,"message":"mode must be \\"web_grounding\\" when provided",'
    b'"param":"mode","type":"invalid_request_error"}}'
)


def decision_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "state": "Water boils at 100 C at sea level.",
        "questions": {"q": NOUL},
    }
    body.update(overrides)
    return body


def make_client(config: SimConfig = UNLIMITED, engine: Any = None) -> httpx.Client:
    app = create_app(config, engine or FakeEngine())
    return httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://simulator", headers=AUTH)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with make_client() as c:
        yield c


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert uuid.UUID(response.headers["x-request-id"])
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param
    return error


# ------------------------------------------------------------------------------------------ Decisions OK


def test_decisions_answers_each_question_type_with_usage_from_the_engine(client: httpx.Client) -> None:
    questions = {
        "yes": NOUL,
        "pick": {"type": "choice", "criteria": {"a": "first", "b": "second", "c": "third"}},
        "rate": {"type": "score", "criteria": ["low", "mid", "high"]},
    }
    body = decision_body(questions=questions)
    response = client.post("/v1/decisions", json=body)
    assert response.status_code == 200
    assert uuid.UUID(response.headers["x-request-id"])
    data = response.json()
    expected = FakeEngine().decide(body)
    assert data["model"] == f"{MODEL}-simulated"
    assert data["answers"] == expected.answers
    assert data["usage"] == {"input_tokens": expected.input_tokens, "output_tokens": expected.output_tokens}
    assert "search_results" not in data


@dataclass(frozen=True)
class FixedDecision:
    answers: dict[str, dict[str, Any]]
    input_tokens: int
    output_tokens: int
    search_results: list[dict[str, Any]] | None


class FixedEngine(FakeEngine):
    """Returns token counts no wire code could invent, to prove usage is the engine's."""

    def decide(self, body: dict[str, Any]) -> FixedDecision:
        return FixedDecision({"q": {"type": "noul", "noul": 0.25}}, 4321, 7, [])


def test_usage_and_empty_search_results_pass_through_unchanged() -> None:
    with make_client(engine=FixedEngine()) as c:
        data = c.post("/v1/decisions", json=decision_body(mode="web_grounding")).json()
    assert data["usage"] == {"input_tokens": 4321, "output_tokens": 7}
    assert data["search_results"] == []
    assert data["answers"] == {"q": {"type": "noul", "noul": 0.25}}


def test_grounded_request_carries_search_results(client: httpx.Client) -> None:
    data = client.post("/v1/decisions", json=decision_body(mode="web_grounding")).json()
    assert [r["url"] for r in data["search_results"]] == [
        "https://simulator.invalid/page/1",
        "https://simulator.invalid/page/2",
    ]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_listed_model_is_accepted(client: httpx.Client, model: str) -> None:
    response = client.post("/v1/decisions", json=decision_body(model=model))
    assert response.status_code == 200
    assert response.json()["model"] == f"{model}-simulated"


@pytest.mark.parametrize("state", ["plain text", {"claim": "x", "passages": {"1": "y"}}, ["a", 1, None], ""])
def test_state_may_be_string_object_or_array(client: httpx.Client, state: object) -> None:
    assert client.post("/v1/decisions", json=decision_body(state=state)).status_code == 200


def test_mode_null_counts_as_not_provided(client: httpx.Client) -> None:
    response = client.post("/v1/decisions", json=decision_body(mode=None))
    assert response.status_code == 200
    assert "search_results" not in response.json()


# --------------------------------------------------------------------------------------- Decisions 400s


def test_bad_mode_gets_the_exact_upstream_error_body(client: httpx.Client) -> None:
    response = client.post("/v1/decisions", json=decision_body(mode="web"))
    assert response.status_code == 400
    assert response.content == EXACT_MODE_ERROR
    assert uuid.UUID(response.headers["x-request-id"])


@pytest.mark.parametrize("mode", ["", "WEB_GROUNDING", 1, True, ["web_grounding"]])
def test_any_other_mode_value_is_the_same_error(client: httpx.Client, mode: object) -> None:
    assert client.post("/v1/decisions", json=decision_body(mode=mode)).content == EXACT_MODE_ERROR


def test_unknown_top_level_field_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/decisions", json=decision_body(temperature=0))
    error = assert_error(response, 400, "temperature")
    assert error["type"] == "invalid_request_error"
    assert error["code"] is None


@pytest.mark.parametrize("model", ["gpt-4o", "pplx-decider-v9", "", None, 3])
def test_unknown_or_missing_model_is_400(client: httpx.Client, model: object) -> None:
    assert_error(client.post("/v1/decisions", json=decision_body(model=model)), 400, "model")


def test_missing_model_field_is_400(client: httpx.Client) -> None:
    body = decision_body()
    del body["model"]
    assert_error(client.post("/v1/decisions", json=body), 400, "model")


@pytest.mark.parametrize("state", [1, 2.5, True, None])
def test_state_of_another_type_is_400(client: httpx.Client, state: object) -> None:
    assert_error(client.post("/v1/decisions", json=decision_body(state=state)), 400, "state")


def test_missing_state_is_400(client: httpx.Client) -> None:
    body = decision_body()
    del body["state"]
    assert_error(client.post("/v1/decisions", json=body), 400, "state")


@pytest.mark.parametrize("questions", [{}, None, [], "q", {f"q{i}": NOUL for i in range(129)}])
def test_questions_missing_empty_or_over_128_is_400(client: httpx.Client, questions: object) -> None:
    assert_error(client.post("/v1/decisions", json=decision_body(questions=questions)), 400, "questions")


def test_questions_field_absent_is_400(client: httpx.Client) -> None:
    body = decision_body()
    del body["questions"]
    assert_error(client.post("/v1/decisions", json=body), 400, "questions")


def test_exactly_128_questions_pass(client: httpx.Client) -> None:
    questions = {f"q{i}": NOUL for i in range(128)}
    response = client.post("/v1/decisions", json=decision_body(questions=questions))
    assert response.status_code == 200
    assert len(response.json()["answers"]) == 128


def choice(n: int) -> dict[str, Any]:
    return {"type": "choice", "criteria": {str(i): f"option {i}" for i in range(1, n + 1)}}


def score(n: int) -> dict[str, Any]:
    return {"type": "score", "criteria": [f"level {i}" for i in range(n)]}


@pytest.mark.parametrize(
    ("question", "ok"),
    [
        (choice(1), True),
        (choice(255), True),
        (choice(0), False),
        (choice(256), False),
        ({"type": "choice", "criteria": ["a", "b"]}, False),
        ({"type": "choice"}, False),
        (score(2), True),
        (score(10), True),
        (score(11), False),
        (score(0), False),
        ({"type": "score", "criteria": {"0": "low"}}, False),
        ({"type": "noul", "criteria": {"true": "yes", "false": "no"}}, True),
        ({"type": "noul", "instructions": {"ask": "structured"}}, True),
        ({"type": "noul"}, False),
        ({"type": "noul", "criteria": {"maybe": "x"}}, False),
        ({"type": "noul", "instructions": 5}, False),
        ({"type": "yesno", "instructions": "x"}, False),
        ({"instructions": "no type"}, False),
        ({"type": "noul", "instructions": "x", "weight": 2}, False),
        ("not an object", False),
    ],
)
def test_question_types_are_validated(client: httpx.Client, question: object, ok: bool) -> None:
    response = client.post("/v1/decisions", json=decision_body(questions={"q": question}))
    if ok:
        assert response.status_code == 200, response.text
        assert response.json()["answers"]["q"]["type"] == question["type"]  # type: ignore[index]
    else:
        error = assert_error(response, 400)
        assert error["param"].startswith("questions.q")


def test_input_over_the_token_limit_is_400(client: httpx.Client) -> None:
    state = "x" * (MAX_INPUT_TOKENS * 4 + 16)
    assert_error(client.post("/v1/decisions", json=decision_body(state=state)), 400, "state")


@pytest.mark.parametrize("raw", [b"{not json", b"", b'{"model": NaN}', b"\xff\xfe\x00", b"[" * 100_000])
def test_invalid_json_is_400_with_request_id(client: httpx.Client, raw: bytes) -> None:
    response = client.post("/v1/decisions", content=raw, headers={"Content-Type": "application/json"})
    assert_error(response, 400)


@pytest.mark.parametrize("body", [[], "text", 3, None])
def test_body_that_is_not_an_object_is_400(client: httpx.Client, body: object) -> None:
    assert_error(client.post("/v1/decisions", json=body), 400)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            "model": st.sampled_from([MODEL, "nope"]) | json_values,
            "state": json_values,
            "questions": st.dictionaries(st.text(max_size=4), json_values, max_size=3) | json_values,
            "mode": st.just("web_grounding") | json_values,
        },
    )
)
def test_any_json_object_gets_an_answer_or_a_well_formed_400(
    client: httpx.Client, body: dict[str, Any]
) -> None:
    response = client.post("/v1/decisions", json=body)
    assert response.status_code in (200, 400)
    if response.status_code == 400:
        assert_error(response, 400)
    else:
        assert set(response.json()["answers"]) == set(body["questions"])


# --------------------------------------------------------------------------------------------- Body size


def test_content_length_over_32_mib_is_413_before_reading() -> None:
    app = create_app(UNLIMITED, FakeEngine())
    environ = {"CONTENT_LENGTH": str(MAX_BODY_BYTES + 1)}

    class Unreadable(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            raise AssertionError("the body must not be read")

        def readinto(self, buffer: Any) -> int:
            raise AssertionError("the body must not be read")

    response = app.test_client().post(
        "/v1/decisions", headers=AUTH, input_stream=Unreadable(), environ_overrides=environ
    )
    assert response.status_code == 413
    error = response.get_json()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert uuid.UUID(response.headers["x-request-id"])


def test_actual_size_over_32_mib_without_content_length_is_413() -> None:
    """A chunked body (no Content-Length) is measured while reading."""
    app = create_app(UNLIMITED, FakeEngine())
    big = io.BytesIO(b" " * (MAX_BODY_BYTES + 10))
    response = app.test_client().post(
        "/v1/decisions",
        headers=AUTH,
        input_stream=big,
        environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": ""},
    )
    assert response.status_code == 413
    assert uuid.UUID(response.headers["x-request-id"])


def test_body_of_exactly_32_mib_is_read_and_validated(client: httpx.Client) -> None:
    padded = json.dumps(decision_body()).encode().ljust(MAX_BODY_BYTES, b" ")
    response = client.post("/v1/decisions", content=padded)
    assert response.status_code == 200


def test_body_one_byte_over_is_413(client: httpx.Client) -> None:
    padded = json.dumps(decision_body()).encode().ljust(MAX_BODY_BYTES + 1, b" ")
    assert_error(client.post("/v1/decisions", content=padded), 413)


# ---------------------------------------------------------------------------------------- Auth & routing


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": ""}, {"Authorization": "Bearer "}, {"Authorization": "Basic dXNlcjpwdw=="}],
)
def test_missing_or_malformed_bearer_is_401_without_request_id(headers: dict[str, str]) -> None:
    app = create_app(UNLIMITED, FakeEngine())
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://simulator") as c:
        for path in ("/v1/decisions", "/v1/agent", "/v1/responses", "/search"):
            response = c.post(path, json=decision_body(), headers=headers)
            assert response.status_code == 401
            assert "x-request-id" not in response.headers
            assert set(response.json()["error"]) == {"message", "type", "code", "param"}


def test_configured_keys_reject_other_keys() -> None:
    config = SimConfig(api_keys=frozenset({"good"}), decisions_rps=0)
    with make_client(config) as c:
        bad = c.post("/v1/decisions", json=decision_body(), headers={"Authorization": "Bearer bad"})
        good = c.post("/v1/decisions", json=decision_body(), headers={"Authorization": "Bearer good"})
    assert bad.status_code == 401
    assert "x-request-id" not in bad.headers
    assert good.status_code == 200


@pytest.mark.parametrize("path", ["/", "/v1/decision", "/v1/decisions/", "/v2/decisions", "/search/x"])
def test_unknown_path_is_404_with_empty_body_and_no_request_id(client: httpx.Client, path: str) -> None:
    for method in ("GET", "POST"):
        response = client.request(method, path, json=decision_body())
        assert response.status_code == 404
        assert response.content == b""
        assert "x-request-id" not in response.headers


def test_unknown_path_is_404_even_without_a_key() -> None:
    app = create_app(UNLIMITED, FakeEngine())
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://simulator") as c:
        assert c.post("/v1/nothing").status_code == 404


@pytest.mark.parametrize("path", ["/v1/decisions", "/v1/agent", "/v1/responses", "/search"])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_wrong_method_is_405_with_empty_body_and_request_id(
    client: httpx.Client, path: str, method: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == 405
    assert response.content == b""
    assert uuid.UUID(response.headers["x-request-id"])
    assert response.headers["Allow"] == "POST"


def test_request_ids_are_unique_per_response(client: httpx.Client) -> None:
    ids = {client.post("/v1/decisions", json=decision_body()).headers["x-request-id"] for _ in range(20)}
    assert len(ids) == 20


# -------------------------------------------------------------------------------------------------- Agent


AGENT_BODY = {
    "input": "What is the boiling point of water?",
    "preset": "fast",
    "instructions": "Answer in plain prose with [n] markers.",
    "tools": [{"type": "web_search"}],
}


@pytest.mark.parametrize("path", ["/v1/agent", "/v1/responses"])
def test_agent_answer_is_a_responses_object(client: httpx.Client, path: str) -> None:
    response = client.post(path, json=AGENT_BODY)
    assert response.status_code == 200
    assert uuid.UUID(response.headers["x-request-id"])
    data = response.json()
    expected = FakeEngine().agent(AGENT_BODY)
    assert data["object"] == "response"
    assert data["status"] == "completed"
    assert data["model"] == "preset/fast-simulated"
    by_type = {item["type"]: item for item in data["output"]}
    assert by_type["message"]["content"] == [
        {"type": "output_text", "text": expected.text, "annotations": []}
    ]
    assert by_type["search_results"]["results"] == expected.results
    assert data["usage"] == {
        "input_tokens": expected.input_tokens,
        "output_tokens": expected.output_tokens,
        "total_tokens": expected.input_tokens + expected.output_tokens,
    }


def test_agent_model_label_uses_the_requested_model(client: httpx.Client) -> None:
    data = client.post("/v1/responses", json={"input": "hi", "model": "openai/gpt-5-mini"}).json()
    assert data["model"] == "openai/gpt-5-mini-simulated"


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"input": None}, "input"),
        ({"input": ""}, "input"),
        ({"input": "   "}, "input"),
        ({"input": []}, "input"),
        ({"input": [1, 2]}, "input"),
        ({"input": 7}, "input"),
        ({"tools": "web_search"}, "tools"),
        ({"tools": [{"name": "no type"}]}, "tools"),
        ({"instructions": ["x"]}, "instructions"),
        ({"preset": 3}, "preset"),
        ({"stream": True}, "stream"),
        ({"unknown_option": 1}, "unknown_option"),
    ],
)
def test_agent_validation_is_400(client: httpx.Client, change: dict[str, Any], param: str) -> None:
    body = {**AGENT_BODY, **change}
    if body.get("input") is None:
        body.pop("input")
    assert_error(client.post("/v1/agent", json=body), 400, param)


def test_agent_accepts_a_list_of_input_items(client: httpx.Client) -> None:
    body = {**AGENT_BODY, "input": [{"type": "message", "role": "user", "content": "hi"}]}
    response = client.post("/v1/agent", json=body)
    assert response.status_code == 200
    search = next(item for item in response.json()["output"] if item["type"] == "search_results")
    assert "queries" not in search


def test_agent_invalid_json_is_400(client: httpx.Client) -> None:
    assert_error(client.post("/v1/responses", content=b"{"), 400)


# ------------------------------------------------------------------------------------------------- Search


def test_search_answers_id_and_results_capped_by_max_results(client: httpx.Client) -> None:
    response = client.post("/search", json={"query": "boiling point", "max_results": 3})
    assert response.status_code == 200
    assert uuid.UUID(response.headers["x-request-id"])
    data = response.json()
    assert set(data) == {"id", "results"}
    assert len(data["results"]) == 3
    assert all({"title", "url", "snippet"} <= set(r) for r in data["results"])


def test_search_accepts_a_list_of_queries_and_filters(client: httpx.Client) -> None:
    body = {
        "query": ["a", "b"],
        "max_results": 20,
        "max_tokens_per_page": 2048,
        "search_domain_filter": ["example.com"],
        "search_recency_filter": "month",
    }
    assert client.post("/search", json=body).status_code == 200


@pytest.mark.parametrize(
    ("body", "field", "kind"),
    [
        ({}, "query", "missing"),
        ({"query": ""}, "query", "string_too_short"),
        ({"query": 5}, "query", "string_type"),
        ({"query": "q", "max_results": 0}, "max_results", "greater_than_equal"),
        ({"query": "q", "max_results": 21}, "max_results", "less_than_equal"),
        ({"query": "q", "max_results": "5"}, "max_results", "int_type"),
        ({"query": "q", "max_results": True}, "max_results", "int_type"),
        ({"query": "q", "max_tokens_per_page": -1}, "max_tokens_per_page", "greater_than_equal"),
        ({"query": "q", "search_recency_filter": "decade"}, "search_recency_filter", "literal_error"),
        ({"query": "q", "search_domain_filter": "example.com"}, "search_domain_filter", "list_type"),
    ],
)
def test_search_validation_is_422_detail(
    client: httpx.Client, body: dict[str, Any], field: str, kind: str
) -> None:
    response = client.post("/search", json=body)
    assert response.status_code == 422
    assert uuid.UUID(response.headers["x-request-id"])
    detail = response.json()["detail"]
    assert [(d["loc"], d["type"]) for d in detail] == [(["body", field], kind)]
    assert all(isinstance(d["msg"], str) for d in detail)


def test_search_lists_every_problem_at_once(client: httpx.Client) -> None:
    detail = client.post("/search", json={"max_results": 50}).json()["detail"]
    assert {tuple(d["loc"]) for d in detail} == {("body", "query"), ("body", "max_results")}


@pytest.mark.parametrize("raw", [b"{bad", b"[1, 2]"])
def test_search_unparseable_or_non_object_body_is_422(client: httpx.Client, raw: bytes) -> None:
    response = client.post("/search", content=raw)
    assert response.status_code == 422
    assert response.json()["detail"]


# ------------------------------------------------------------------------------------------ Engine & stats


class BrokenEngine(FakeEngine):
    def decide(self, body: dict[str, Any]) -> Any:
        raise RuntimeError("engine bug")


def test_engine_failure_is_a_500_json_error_with_request_id(caplog: pytest.LogCaptureFixture) -> None:
    with make_client(engine=BrokenEngine()) as c:
        response = c.post("/v1/decisions", json=decision_body())
    assert_error(response, 500)
    assert "engine failed" in caplog.text


def test_stats_count_by_endpoint_and_status() -> None:
    app = create_app(UNLIMITED, FakeEngine())
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://simulator", headers=AUTH) as c:
        c.post("/v1/decisions", json=decision_body())
        c.post("/v1/decisions", json=decision_body())
        c.post("/v1/decisions", json=decision_body(mode="x"))
        c.post("/search", json={})
        c.post("/v1/responses", json=AGENT_BODY)
        c.post("/v1/agent", json=AGENT_BODY, headers={"Authorization": "Bearer "})
        c.get("/v1/decisions")
        c.get("/nowhere")
        stats = c.get("/stats")
    assert stats.status_code == 200
    data = stats.json()
    assert data["endpoints"] == {
        "decisions": {"200": 2, "400": 1, "405": 1},
        "search": {"422": 1},
        "responses": {"200": 1},
        "agent": {"401": 1},
        "unknown": {"404": 1},
    }
    assert data["total"] == 8
    assert data == simulator_state(app).stats.snapshot()


def test_default_app_serves_the_bundled_corpus_engine() -> None:
    app = create_app(UNLIMITED)
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://simulator", headers=AUTH) as c:
        body = decision_body(state="The Linux kernel was first released in 1991.", mode="web_grounding")
        decision = c.post("/v1/decisions", json=body)
        search = c.post("/search", json={"query": "Linux kernel", "max_results": 2})
    assert decision.status_code == 200
    assert 0 <= decision.json()["answers"]["q"]["noul"] <= 1
    assert decision.json()["usage"]["input_tokens"] > 0
    assert all(r["url"].startswith("https://") for r in decision.json()["search_results"])
    assert 1 <= len(search.json()["results"]) <= 2


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/v1/decisions", decision_body(), AUTH),
        ("/v1/decisions", decision_body(mode="web_grounding"), AUTH),
        ("/v1/decisions", decision_body(mode="offline"), AUTH),
        ("/v1/decisions", {"model": MODEL}, AUTH),
        ("/v1/decisions", decision_body(), {"Authorization": "Basic x"}),
        ("/search", {"query": "boiling point"}, AUTH),
        ("/search", {"query": ""}, AUTH),
    ],
)
def test_the_instant_path_answers_as_the_app_does(
    path: str, body: dict[str, Any], headers: dict[str, str]
) -> None:
    """Unlimited, faultless and instant, a request without test headers skips Flask (`_InstantPath`); one
    with `X-Sim-Fault: none` goes through the app. Both give the same status, body and headers."""
    with make_client() as c:
        fast = c.post(path, json=body, headers=headers)
        slow = c.post(path, json=body, headers={**headers, "X-Sim-Fault": "none"})
    assert fast.status_code == slow.status_code
    fast_body, slow_body = fast.json(), slow.json()
    fast_body.pop("id", None), slow_body.pop("id", None)  # a Search answer's id is random
    assert fast_body == slow_body
    assert fast.headers["content-type"] == slow.headers["content-type"]
    assert ("x-request-id" in fast.headers) == ("x-request-id" in slow.headers)


def test_the_instant_path_counts_its_answers() -> None:
    with make_client() as c:
        c.post("/v1/decisions", json=decision_body())
        c.post("/v1/decisions", json=decision_body(), headers={"Authorization": "Bearer "})
        assert c.get("/stats").json()["endpoints"]["decisions"] == {"200": 1, "401": 1}
