"""The simulator and packed Decisions requests (issue 33): several claims' questions in one request.

Packed questions are judged as the same questions asked one claim per request (the product's own builders
make the unpacked bodies), a packed request costs more latency and input tokens per question, and the
test knob `pack_drift` moves a packed request's probabilities by their position.
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from checks import claims as claim_rules
from checks.citation_contracts import CitationPassage
from checks.citation_passages import decisions_request
from cli import simulator_cmd
from cli.main import main
from simulator.app import create_app
from simulator.config import SimConfig
from simulator.engine import Engine, input_tokens
from simulator.fake_engine import FakeEngine
from simulator.faults import LATENCY_HEADER, FaultInjector
from simulator.wire import MAX_QUESTIONS, WireError, validate_decisions

MODEL = "pplx-decider-latest"
AUTH = {"Authorization": "Bearer test-key"}
UNLIMITED = SimConfig(decisions_rps=0, search_rps=0, agent_rps=0)

# Sources of one answer, by id; each sentence cites some and (misattribution) is asked about the others.
SOURCES = {
    "rust": "Rust 1.0 was released on May 15, 2015. It was the first stable release of the language.",
    "rust-old": "Rust 1.0 was released in 2012, according to an early draft of this page.",
    "git": "Git was created by Linus Torvalds in 2005 to manage the Linux kernel source code.",
    "linux": "The Linux kernel was first released in 1991 by Linus Torvalds.",
    "memo": "The facilities team confirmed the office move for the second week of the quarter.",
}
# (claim, cited source ids, other source ids asked about for misattribution)
SENTENCES = [
    ("Rust 1.0 was released in May 2015.", ["rust", "rust-old"], ["git"]),
    ("Git was created by Linus Torvalds.", ["git"], ["linux", "memo"]),
    ("It is fast and amazing.", [], ["rust"]),
    ("The Linux kernel was first released in 1998.", ["linux"], ["git", "rust"]),
    ("Git was created by Guido van Rossum.", ["memo"], ["git"]),
]
CLAIMS = [
    "Rust 1.0 was released in May 2015.",
    "Water boils at 50 C at sea level.",
    "Navi Pillay was awarded the 2026 Nobel Peace Prize.",
    "Git was created by Guido van Rossum.",
    "The Linux kernel was first released in 1998.",
]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(SimConfig())


def _noul(text: str) -> dict[str, str]:
    return {"type": "noul", "instructions": text}


def unpacked_citations() -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Each sentence's request as the product builds it today, with the map from its question names to
    the packed request's (whose passages are numbered across the answer)."""
    global_key = {source: str(n) for n, source in enumerate(SOURCES, 1)}
    requests = []
    for number, (claim, cited, others) in enumerate(SENTENCES, 1):
        passages = [
            CitationPassage(key=str(k), source=s, chunk=1, chunks=1, role=role, text=SOURCES[s])
            for k, (s, role) in enumerate(
                [*((s, "cited") for s in cited), *((s, "other") for s in others)], 1
            )
        ]
        body = decisions_request(claim, passages, MODEL)
        names = {"checkable": f"s{number}_checkable"}
        for p in passages:
            names[f"supports_{p.key}"] = f"s{number}_supports_{global_key[p.source]}"
            names[f"contradicts_{p.key}"] = f"s{number}_contradicts_{global_key[p.source]}"
        requests.append((body, {k: v for k, v in names.items() if k in body["questions"]}))
    return requests


def packed_citations(numbers: list[int]) -> dict[str, Any]:
    """The packed shape of issue 33 for the given sentences: every passage once, claims keyed `s<n>`."""
    global_key = {source: str(n) for n, source in enumerate(SOURCES, 1)}
    questions: dict[str, dict[str, str]] = {}
    for number in numbers:
        _claim, cited, others = SENTENCES[number - 1]
        key = f"s{number}"
        questions[f"{key}_checkable"] = _noul(
            f"Is claim {key} a factual statement that could be verified against a source? "
            "Opinions, transitions, and questions are not checkable."
        )
        for source in [*cited, *others]:
            n = global_key[source]
            questions[f"{key}_supports_{n}"] = _noul(
                f"Does passage {n} state or directly imply claim {key}? Being about the same topic is not "
                "support; the passage has to back the specific claim."
            )
            if source in cited:
                questions[f"{key}_contradicts_{n}"] = _noul(
                    f"Does passage {n} state something that cannot be true if claim {key} is true?"
                )
    return {
        "model": MODEL,
        "state": {
            "claims": {f"s{n}": SENTENCES[n - 1][0] for n in numbers},
            "passages": {global_key[s]: text for s, text in SOURCES.items()},
        },
        "questions": questions,
    }


def packed_claims(claims: list[str]) -> dict[str, Any]:
    return {
        "model": MODEL,
        "state": {"claims": {f"c{n}": claim for n, claim in enumerate(claims, 1)}},
        "questions": {f"c{n}_is_true": _noul(f"Is claim c{n} true?") for n in range(1, len(claims) + 1)},
    }


def noul(outcome_answers: dict[str, dict[str, object]]) -> dict[str, Any]:
    return {name: answer["noul"] for name, answer in outcome_answers.items()}


# ---- each question judged on its own -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 7])
def test_packed_citation_questions_get_their_unpacked_answers(seed: int) -> None:
    engine = Engine(SimConfig(seed=seed))
    packed = engine.decide(packed_citations([1, 2, 3, 4, 5])).answers
    asked = set()
    for body, names in unpacked_citations():
        alone = engine.decide(body).answers
        for name, packed_name in names.items():
            assert packed[packed_name] == alone[name], (packed_name, body["state"]["claim"])
            asked.add(packed_name)
    assert asked == set(packed), "every packed question has its unpacked twin"
    # The pack is not trivially uniform: supported, contradicted and unsupported passages, and a
    # sentence that is not checkable.
    p = noul(packed)
    assert p["s1_supports_1"] >= 0.86 and p["s1_contradicts_2"] >= 0.6 and p["s2_supports_3"] >= 0.86
    assert p["s4_contradicts_4"] >= 0.6 and p["s5_supports_3"] < 0.4
    assert p["s3_checkable"] < 0.5 <= p["s1_checkable"]


def test_a_packs_make_up_does_not_move_an_answer(engine: Engine) -> None:
    whole = engine.decide(packed_citations([1, 2, 3, 4, 5])).answers
    part = engine.decide(packed_citations([4, 2])).answers
    assert part == {name: whole[name] for name in part}


def test_packed_claims_get_their_unpacked_truth(engine: Engine) -> None:
    packed = engine.decide(packed_claims(CLAIMS)).answers
    for n, claim in enumerate(CLAIMS, 1):
        body = claim_rules.request_body(claim, model=MODEL, mode="ungrounded")
        assert packed[f"c{n}_is_true"] == engine.decide(body).answers["is_true"], claim
    probabilities = noul(packed)
    assert probabilities["c1_is_true"] >= 0.8 and probabilities["c4_is_true"] <= 0.2


def test_a_question_may_name_its_claim_in_its_text_only(engine: Engine) -> None:
    body = packed_claims(CLAIMS[:3])
    body["questions"] = {"third": _noul("Is claim c3 true?"), "first": _noul("Is claim c1 true?")}
    packed = engine.decide(body).answers
    for name, claim in (("first", CLAIMS[0]), ("third", CLAIMS[2])):
        alone = engine.decide(claim_rules.request_body(claim, model=MODEL, mode="ungrounded")).answers
        assert packed[name] == alone["is_true"]


def test_the_model_still_keys_the_jitter(engine: Engine) -> None:
    values = {
        engine.decide({**packed_claims(CLAIMS), "model": model}).answers["c2_is_true"]["noul"]
        for model in ("pplx-decider-latest", "pplx-decider-v1.2", "pplx-decider-flash-latest")
    }
    assert len(values) > 1 and max(values) - min(values) < 0.02


# ---- cost: input tokens ---------------------------------------------------------------------------------


def test_a_one_question_request_costs_its_bytes_as_before(engine: Engine) -> None:
    body = claim_rules.request_body(CLAIMS[0], model=MODEL, mode="ungrounded")
    sent = body["state"] + json.dumps(body["questions"], ensure_ascii=False)
    assert engine.decide(body).input_tokens == math.ceil(len(sent.encode()) / 4)


def test_each_further_question_costs_about_92_tokens_and_the_state_counts_once(engine: Engine) -> None:
    claims = [f"Claim number {n} says something about Rust 1.0." for n in range(MAX_QUESTIONS)]
    one = engine.decide(packed_claims(claims[:1])).input_tokens
    many = engine.decide(packed_claims(claims)).input_tokens
    state_growth = math.ceil(len(json.dumps(packed_claims(claims)["state"]).encode()) / 4) - math.ceil(
        len(json.dumps(packed_claims(claims[:1])["state"]).encode()) / 4
    )
    assert many - one - state_growth in range(127 * 92 - 1, 127 * 92 + 2)
    # The integrators' figure: 128 questions about a short state, 11,904 input tokens.
    same_state = {**packed_claims(claims[:1]), "questions": packed_claims(claims)["questions"]}
    assert engine.decide(same_state).input_tokens == pytest.approx(11_904, rel=0.03)


def test_tokens_per_question_is_a_floor_below_a_questions_own_bytes() -> None:
    short = {"a": _noul("Is it?"), "b": _noul("Is it?")}
    first = math.ceil(len(("state" + json.dumps({"a": short["a"]})).encode()) / 4)
    assert input_tokens("state", short, 92) == first + 92
    assert input_tokens("state", short, 0) == first + math.ceil(len(json.dumps({"b": short["b"]})) / 4)
    long = {"a": short["a"], "b": _noul("x" * 2000)}
    assert input_tokens("state", long, 92) > first + 500, "a long question costs its own bytes"
    cheap = Engine(SimConfig(tokens_per_question=10), index=Engine(SimConfig()).index)
    body = packed_claims(CLAIMS)
    assert cheap.decide(body).input_tokens < Engine(SimConfig(), index=cheap.index).decide(body).input_tokens


# ---- cost: latency --------------------------------------------------------------------------------------


class SleepLog:
    def __init__(self) -> None:
        self.pauses: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)


def _client(config: SimConfig, sleep: SleepLog) -> httpx.Client:
    app = create_app(config, FakeEngine(), sleep=sleep)
    return httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://simulator", headers=AUTH)


def test_latency_grows_by_65_ms_a_question_with_a_latency_model() -> None:
    injector = FaultInjector(SimConfig(latency_s=0.64))
    assert injector.draw(questions=128).latency_s == pytest.approx(0.64 + 127 * 0.065)  # ~8.9 s
    assert injector.draw(questions=1).latency_s == pytest.approx(0.64)
    assert FaultInjector(SimConfig()).draw(questions=128).latency_s == 0, "latency 0 stays instant"
    flat = FaultInjector(SimConfig(latency_s=0.5, latency_per_question_s=0))
    assert flat.draw(questions=128).latency_s == 0.5

    sleep = SleepLog()
    with _client(SimConfig(decisions_rps=0, latency_s=0.3), sleep) as client:
        assert client.post("/v1/decisions", json=packed_claims(CLAIMS)).status_code == 200
        one = claim_rules.request_body(CLAIMS[0], model=MODEL, mode="ungrounded")
        assert client.post("/v1/decisions", json=one).status_code == 200
        forced = client.post("/v1/decisions", json=packed_claims(CLAIMS), headers={LATENCY_HEADER: "0.2"})
        assert forced.status_code == 200
        assert client.post("/search", json={"query": "a b c d e"}).status_code == 200
    assert sleep.pauses == pytest.approx([0.3 + 4 * 0.065, 0.3, 0.2, 0.3])


def test_a_refused_body_is_still_answered_after_the_latency() -> None:
    sleep = SleepLog()
    body = {**packed_claims(CLAIMS), "extra": 1}
    with _client(SimConfig(decisions_rps=0, latency_s=0.3), sleep) as client:
        response = client.post("/v1/decisions", json=body)
        assert response.status_code == 400 and "extra" in response.json()["error"]["message"]
        assert response.headers["x-request-id"]
        assert client.post("/v1/decisions", content=b"{not json").status_code == 400
    assert sleep.pauses == [0.3, 0.3]


# ---- pack_drift -----------------------------------------------------------------------------------------


def test_pack_drift_moves_a_packed_request_by_position_and_nothing_else(engine: Engine) -> None:
    body = packed_citations([1, 2, 3])
    base = noul(engine.decide(body).answers)
    drifting = Engine(SimConfig(pack_drift=0.01), index=engine.index)
    moved = noul(drifting.decide(body).answers)
    assert list(moved) == list(body["questions"])
    for position, name in enumerate(body["questions"]):
        assert moved[name] == pytest.approx(min(0.999, max(0.001, base[name] + 0.01 * position)), abs=1e-4)
    assert moved != base
    for unpacked, _names in unpacked_citations():
        assert drifting.decide(unpacked).answers == engine.decide(unpacked).answers, "unpacked never drift"
    one = claim_rules.request_body(CLAIMS[0], model=MODEL, mode="ungrounded")
    assert drifting.decide(one).answers == engine.decide(one).answers


def test_pack_drift_is_clamped(engine: Engine) -> None:
    body = packed_citations([1, 2])
    up = noul(Engine(SimConfig(pack_drift=0.5), index=engine.index).decide(body).answers)
    down = noul(Engine(SimConfig(pack_drift=-0.5), index=engine.index).decide(body).answers)
    assert list(up.values())[2:] == [0.999] * (len(up) - 2)
    assert list(down.values())[2:] == [0.001] * (len(down) - 2)
    with pytest.raises(ValueError, match="pack_drift"):
        Engine(SimConfig(pack_drift=math.nan), index=engine.index)


# ---- the wire ---------------------------------------------------------------------------------------------


def test_a_packed_body_of_128_questions_is_accepted_and_129_refused(engine: Engine) -> None:
    claims = [f"Claim number {n} says something about Rust 1.0." for n in range(MAX_QUESTIONS + 1)]
    full = packed_claims(claims[:MAX_QUESTIONS])
    assert validate_decisions(json.dumps(full).encode()) == full
    with pytest.raises(WireError, match="too many questions: 129"):
        validate_decisions(json.dumps(packed_claims(claims)).encode())
    app = create_app(UNLIMITED, engine)
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://sim", headers=AUTH) as client:
        response = client.post("/v1/decisions", json=full)
        assert response.status_code == 200
        assert set(response.json()["answers"]) == set(full["questions"])
        assert client.post("/v1/decisions", json=packed_claims(claims)).status_code == 400


# ---- the CLI ----------------------------------------------------------------------------------------------


def test_cli_sets_the_packing_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, SimConfig] = {}

    def fake_serve(config: SimConfig, **_kwargs: Any) -> None:
        seen["config"] = config

    monkeypatch.setattr(simulator_cmd, "serve", fake_serve)
    args = [
        "simulator",
        "--latency-per-question-ms",
        "50",
        "--tokens-per-question",
        "80",
        "--pack-drift",
        "0.02",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert (config.latency_per_question_s, config.tokens_per_question, config.pack_drift) == (0.05, 80, 0.02)
    assert CliRunner().invoke(main, ["simulator"]).exit_code == 0
    assert (seen["config"].latency_per_question_s, seen["config"].tokens_per_question) == (0.065, 92)
    assert seen["config"].pack_drift == 0
    refused = CliRunner().invoke(main, ["simulator", "--pack-drift", "nan"])
    assert refused.exit_code == 2 and "--pack-drift" in refused.output
