"""The simulator and packed rank requests (docs/spec.md §9, the quote row): one question's search results in
one request, each with its own choice and yes/no pair, are judged as the same results ranked one per
request (the product's own builders make both bodies), and the answers map back to each result's item."""

from __future__ import annotations

from typing import Any

import pytest

from checks import quotes
from checks.packing import pack_ranks, result_key
from checks.quote_contracts import ResultInput, SourceRecord
from checks.quotes import SourceResult
from clients.results import Answer, Decision
from jobs.records import ClaimedItem
from simulator.config import SimConfig
from simulator.engine import Engine
from simulator.judge import packed_results
from workers.outcomes import AskAlone, Done, PackAnswered
from workers.quotes import handle_result, handle_result_pack
from workers.steps import Calls

MODEL = "pplx-decider-v1.1-27b"
QUESTION = "How deep is the Mariana Trench?"
RESULTS = [
    SourceResult(
        index=1,
        title="Mariana Trench",
        url="https://example.org/trench",
        snippet="",
        date=None,
        sentences=(
            "The Mariana Trench is located in the western Pacific Ocean.",
            "The Challenger Deep, its deepest point, is about 10,935 metres deep.",
        ),
    ),
    SourceResult(
        index=3,
        title="Oceans",
        url="https://example.org/oceans",
        snippet="",
        date=None,
        sentences=(
            "Oceans cover about 71 percent of the surface of the Earth.",
            "The trench was first sounded by the Challenger expedition in 1875.",
            "The Mariana Trench reaches a maximum depth of about 11,000 metres.",
        ),
    ),
    SourceResult(
        index=4,
        title="Travel",
        url="https://example.org/travel",
        snippet="",
        date=None,
        sentences=("Guam is a popular destination for divers from across Asia.",),
    ),
]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(SimConfig())


def test_a_packed_rank_request_names_each_result_and_keeps_its_choice_and_yes_no() -> None:
    packed = pack_ranks(QUESTION, RESULTS, MODEL)
    state = packed.body["state"]
    assert isinstance(state, dict)
    assert state["question"] == QUESTION
    assert list(state["results"]) == ["r1", "r3", "r4"]
    assert state["results"]["r3"] == {
        "source": {"title": "Oceans", "url": "https://example.org/oceans"},
        "sentences": {
            "1": RESULTS[1].sentences[0],
            "2": RESULTS[1].sentences[1],
            "3": RESULTS[1].sentences[2],
        },
    }
    questions = packed.body["questions"]
    assert isinstance(questions, dict)
    assert list(questions) == [
        "r1_best",
        "r1_has_answer",
        "r3_best",
        "r3_has_answer",
        "r4_best",
        "r4_has_answer",
    ]
    unpacked = quotes.rank_request(QUESTION, RESULTS[1].title, RESULTS[1].url, RESULTS[1].sentences, MODEL)
    for name in ("best", "has_answer"):
        mine, alone = questions[f"r3_{name}"], unpacked["questions"][name]
        assert mine["type"] == alone["type"] and mine["criteria"] == alone["criteria"]
    assert questions["r3_has_answer"]["instructions"] == (
        "Does at least one of the numbered sentences of result r3 answer the question?"
    )
    assert result_key(3) == "r3" and packed.keys == ("r1", "r3", "r4")
    assert packed_results(state) is not None and packed_results({"question": QUESTION}) is None


def test_packed_results_are_judged_as_each_result_ranked_alone(engine: Engine) -> None:
    packed = pack_ranks(QUESTION, RESULTS, MODEL)
    together = engine.decide(packed.body).answers
    mapped = packed.answers_of(together)
    for result, got in zip(RESULTS, mapped, strict=True):
        body = quotes.rank_request(QUESTION, result.title, result.url, result.sentences, MODEL)
        alone: dict[str, Any] = engine.decide(body).answers
        assert got == alone, result.index
        # and the product reads each mapped answer as it reads the unpacked one
        assert quotes.parse_rank_answers(result, got) == quotes.parse_rank_answers(result, alone)
    # the heuristic still tells results apart: the deep-water sentences answer, the travel one does not
    assert mapped[0] is not None and mapped[2] is not None
    assert mapped[0]["has_answer"]["noul"] > mapped[2]["has_answer"]["noul"]


def test_a_result_with_a_missing_answer_maps_to_none() -> None:
    packed = pack_ranks(QUESTION, RESULTS[:2], MODEL)
    answers = {
        "r1_best": {
            "type": "choice",
            "choice": "2",
            "probabilities": {"1": 0.1, "2": 0.9},
            "confidence": 0.5,
        },
        "r1_has_answer": {"type": "noul", "noul": 0.9},
        "r3_best": {"type": "choice", "choice": "3", "probabilities": {"3": 1.0}, "confidence": 1.0},
    }
    got = packed.answers_of(answers)
    assert got[0] == {"best": answers["r1_best"], "has_answer": answers["r1_has_answer"]}
    assert got[1] is None


class _SimClient:
    """The simulator's engine behind the client's `decide`, leaving out the questions `drop` names."""

    def __init__(self, engine: Engine, drop: str = "") -> None:
        self.engine = engine
        self.drop = drop

    def decide(self, body: dict[str, Any], *, partial: bool = False) -> Decision:
        answers = {
            name: Answer(
                type=str(a["type"]),
                noul=a.get("noul"),
                choice=a.get("choice"),
                probabilities=dict(a.get("probabilities") or {}),
                confidence=a.get("confidence"),
            )
            for name, a in self.engine.decide(body).answers.items()
            if not (self.drop and name.startswith(self.drop))
        }
        return Decision(answers=answers, input_tokens=90, output_tokens=6, search_results=[], model=MODEL)


def _item(n: int, result: SourceResult) -> ClaimedItem:
    return ClaimedItem(
        id=n,
        job_id=None,  # type: ignore[arg-type]
        tenant_id=None,  # type: ignore[arg-type]
        stage="result",
        mode="result",
        custom_id=f"q:r{result.index}",
        input=ResultInput(question=QUESTION, result=SourceRecord.of(result)).dump(),
        token=1,
        options={"model": MODEL, "reuse": "none"},  # no verdict store here
        dedupe_key=None,
        kind="quote",
    )


def test_the_pack_handler_stores_each_results_rank_and_asks_missing_ones_alone(engine: Engine) -> None:
    items = [_item(n, r) for n, r in enumerate(RESULTS, start=1)]
    client = _SimClient(engine, drop="r3_")
    calls = Calls(ctx=None, item=items[0], client=client)  # type: ignore[arg-type]
    outcome = handle_result_pack(None, items, calls)  # type: ignore[arg-type]
    assert isinstance(outcome, PackAnswered)
    assert [type(m) for m in outcome.members] == [Done, AskAlone, Done]
    first = outcome.members[0]
    assert isinstance(first, Done)
    alone = handle_result(None, items[0], Calls(ctx=None, item=items[0], client=_SimClient(engine)))  # type: ignore[arg-type]
    assert isinstance(alone, Done)
    for key in ("answers", "candidate", "result_index"):
        assert first.output[key] == alone.output[key]
    assert first.output["input_tokens"] == 30  # its share of the request's 90
