"""The official `perplexityai` SDK (0.46: decisions, search, responses) parses every simulator answer.

The SDK runs with `_strict_response_validation=True`, so a field of the wrong type or a missing required
field raises `APIResponseValidationError` instead of being constructed loosely.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import perplexity
import pytest
from perplexity import Perplexity
from perplexity.generated.api import (
    ApiSearchResponseOutput,
    DecisionChoiceAnswerOutput,
    DecisionNoulAnswerOutput,
    DecisionScoreAnswerOutput,
    DecisionsResponseOutput,
    MessageOutputItemOutput,
    ResponsesResponseOutput,
    SearchResultsOutputItemOutput,
)
from perplexity.types.shared.api_public_search_result import APIPublicSearchResult

from simulator.app import create_app
from simulator.config import SimConfig
from simulator.engine import Engine
from simulator.fake_engine import FakeEngine
from simulator.server import run_in_thread

MODEL = "pplx-decider-v1.2"
UNLIMITED = SimConfig(decisions_rps=0, search_rps=0, agent_rps=0)
QUESTIONS: dict[str, Any] = {
    "is_true": {"type": "noul", "instructions": "Is the claim true?"},
    "best": {"type": "choice", "criteria": {"1": "first sentence", "2": "second sentence"}},
    "quality": {
        "type": "score",
        "criteria": ["poor", "fair", "good"],
        "instructions": "How well sourced is it?",
    },
}


def sdk(app: Any = None, base_url: str = "http://simulator", api_key: str = "test-key") -> Perplexity:
    http_client = httpx.Client(transport=httpx.WSGITransport(app=app)) if app is not None else httpx.Client()
    return Perplexity(
        api_key=api_key,
        base_url=base_url,
        http_client=http_client,
        max_retries=0,
        _strict_response_validation=True,
    )


@pytest.fixture(params=["fake", "real"])
def client(request: pytest.FixtureRequest) -> Iterator[Perplexity]:
    """Both the corpus-free fake and the real corpus engine must produce SDK-valid answers."""
    engine = FakeEngine() if request.param == "fake" else Engine(UNLIMITED)
    c = sdk(create_app(UNLIMITED, engine))
    yield c
    c.close()


def test_sdk_has_the_decisions_resource() -> None:
    assert perplexity.__version__ >= "0.46"
    assert hasattr(Perplexity, "decisions")


def test_decisions_create_parses_noul_choice_and_score(client: Perplexity) -> None:
    result = client.decisions.create(model=MODEL, state="Water boils at 100 C.", questions=QUESTIONS)
    assert isinstance(result, DecisionsResponseOutput)
    assert result.model == f"{MODEL}-simulated"
    assert isinstance(result.answers["is_true"], DecisionNoulAnswerOutput)
    assert 0 <= result.answers["is_true"].noul <= 1
    best = result.answers["best"]
    assert isinstance(best, DecisionChoiceAnswerOutput)
    assert best.choice in {"1", "2"}
    assert sum(best.probabilities.values()) == pytest.approx(1.0)
    quality = result.answers["quality"]
    assert isinstance(quality, DecisionScoreAnswerOutput)
    assert set(quality.legend) == {"0", "1", "2"}
    assert sum(quality.probabilities.values()) == pytest.approx(1.0)
    assert result.usage.input_tokens > 0
    # The same body validates strictly outside the client too.
    DecisionsResponseOutput.model_validate(result.to_dict())


def test_decisions_grounded_through_extra_body(client: Perplexity) -> None:
    result = client.decisions.create(
        model=MODEL,
        state={"claim": "The Linux kernel was first released in 1991."},
        questions={"is_true": QUESTIONS["is_true"]},
        extra_body={"mode": "web_grounding"},
    )
    search_results = result.to_dict()["search_results"]
    assert isinstance(search_results, list)
    assert search_results, "the corpus has a page on the Linux kernel"
    for page in search_results:
        APIPublicSearchResult.model_validate(page)
        assert page["url"].startswith("https://")


def test_decisions_errors_map_to_sdk_exceptions(client: Perplexity) -> None:
    with pytest.raises(perplexity.BadRequestError) as bad_mode:
        client.decisions.create(
            model=MODEL, state="x", questions={"q": QUESTIONS["is_true"]}, extra_body={"mode": "web"}
        )
    assert bad_mode.value.status_code == 400
    assert bad_mode.value.body == {
        "error": {
            "code": None,
            "message": 'mode must be "web_grounding" when provided',
            "param": "mode",
            "type": "invalid_request_error",
        }
    }
    assert bad_mode.value.response.headers["x-request-id"]
    with pytest.raises(perplexity.BadRequestError):
        client.decisions.create(model="gpt-4o", state="x", questions={"q": QUESTIONS["is_true"]})


def test_rate_limit_and_auth_errors_map_to_sdk_exceptions() -> None:
    app = create_app(SimConfig(api_keys=frozenset({"good"}), decisions_rps=1), FakeEngine())
    with sdk(app, api_key="good") as good, sdk(app, api_key="bad") as bad:
        good.decisions.create(model=MODEL, state="x", questions={"q": QUESTIONS["is_true"]})
        with pytest.raises(perplexity.RateLimitError) as limited:
            good.decisions.create(model=MODEL, state="x", questions={"q": QUESTIONS["is_true"]})
        assert limited.value.response.headers["Retry-After"] == "1"
        with pytest.raises(perplexity.AuthenticationError):
            bad.decisions.create(model=MODEL, state="x", questions={"q": QUESTIONS["is_true"]})


def test_bad_probability_fault_still_parses_but_is_out_of_range(client: Perplexity) -> None:
    """The SDK does not range-check probabilities; the product's client must (docs/spec.md §1)."""
    result = client.decisions.create(
        model=MODEL,
        state="x",
        questions={"q": QUESTIONS["is_true"]},
        extra_headers={"X-Sim-Fault": "bad_probability"},
    )
    assert result.answers["q"].noul > 1  # type: ignore[union-attr]


def test_search_create_parses(client: Perplexity) -> None:
    result = client.search.create(query="Linux kernel first release", max_results=3, max_tokens_per_page=2048)
    assert isinstance(result, ApiSearchResponseOutput)
    assert result.id
    assert 1 <= len(result.results) <= 3
    assert all(r.url.startswith("https://") and r.title and r.snippet for r in result.results)


def test_search_validation_error_is_unprocessable(client: Perplexity) -> None:
    with pytest.raises(perplexity.UnprocessableEntityError) as error:
        client.search.create(query="q", max_results=21)
    assert error.value.status_code == 422


def test_responses_create_parses_message_and_search_results(client: Perplexity) -> None:
    result = client.responses.create(
        input="When was the Linux kernel first released?",
        preset="fast",
        instructions="Answer in plain prose with [n] markers.",
        tools=[{"type": "web_search"}],
    )
    assert isinstance(result, ResponsesResponseOutput)
    assert result.status == "completed"
    assert result.model == "preset/fast-simulated"
    assert "[1]" in result.output_text
    messages = [item for item in result.output if isinstance(item, MessageOutputItemOutput)]
    searches = [item for item in result.output if isinstance(item, SearchResultsOutputItemOutput)]
    assert len(messages) == 1 and len(searches) == 1
    ids = [r.id for r in searches[0].results]
    assert ids == list(range(1, len(ids) + 1)) and ids
    assert result.usage is not None
    assert result.usage.total_tokens == result.usage.input_tokens + result.usage.output_tokens


def test_sdk_over_a_real_threaded_server() -> None:
    with run_in_thread(UNLIMITED, engine=FakeEngine()) as sim, sdk(base_url=sim.base_url) as client:
        decision = client.decisions.create(model=MODEL, state="x", questions=QUESTIONS)
        search = client.search.create(query="sky")
        answer = client.responses.create(input="Why is the sky blue?", tools=[{"type": "web_search"}])
    assert set(decision.answers) == set(QUESTIONS)
    assert search.results
    assert answer.output_text


class WrongTypeEngine(FakeEngine):
    """Answers a probability as text: the strict SDK must refuse it (proves the checks above bite)."""

    def decide(self, body: dict[str, Any]) -> Any:
        outcome = super().decide(body)
        return type(outcome)({"q": {"type": "noul", "noul": "high"}}, 1, 1, None)


def test_strict_sdk_rejects_a_wrongly_typed_answer() -> None:
    with (
        sdk(create_app(UNLIMITED, WrongTypeEngine())) as client,
        pytest.raises(perplexity.APIResponseValidationError),
    ):
        client.decisions.create(model=MODEL, state="x", questions={"q": QUESTIONS["is_true"]})
