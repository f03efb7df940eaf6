"""The simulator reproduces the reference behaviour on tests/data (docs/spec.md §2-§4, §7).

Each test is one behaviour target, run against `Engine` directly (the HTTP layer has its own tests). The
request bodies are built with the product's pure `checks/` modules, so the simulator is held to the
requests the product really sends.
"""

from __future__ import annotations

import json

import pytest

from checks import answers as gate
from checks import quotes
from checks.grounding import claim_in_query
from simulator.config import SimConfig
from simulator.engine import Engine
from simulator.index import CORPUS_DIR
from tests.reference import answer_questions, answerable_quotes, reference_claims, unanswerable_quotes

QUESTION = {"type": "noul", "instructions": "Is the claim true?"}
SUPPORTED_MIN, CONTRADICTED_MAX = 0.80, 0.20  # docs/spec.md §2 verdict cutoffs, inclusive
# The seed's padding text (003): neutral office-move prose that relates to no claim.
FILLER = (
    "The facilities team confirmed the office move for the second week of the quarter. "
    "Badge readers on the third floor will be replaced on Monday, and visitor parking "
    "moves to the lower level. The updated seating chart goes out by email once the "
    "furniture vendor confirms delivery. Please label boxes with your team name. "
)

ANSWER_QUESTIONS = answer_questions()
ANSWERABLE = answerable_quotes()  # question -> strings one of which the quote must contain
UNANSWERABLE = unanswerable_quotes()


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(SimConfig())


@pytest.fixture(scope="module")
def claims() -> list[dict]:
    rows = reference_claims()
    assert len(rows) == 24
    return rows


def pad_before(claim: str, n: int) -> str:
    return "\n".join([(FILLER * (n // len(FILLER) + 1))[:n], claim])


def verdict(p: float) -> str:
    return "supported" if p >= SUPPORTED_MIN else "contradicted" if p <= CONTRADICTED_MAX else "review"


def correct(p: float, label: bool) -> bool:
    v = verdict(p)
    return v != "review" and (v == "supported") == label


def decide_claim(engine: Engine, state: str, *, grounded: bool):
    body: dict = {"model": "pplx-decider-latest", "state": state, "questions": {"is_true": dict(QUESTION)}}
    if grounded:
        body["mode"] = "web_grounding"
    return engine.decide(body)


# ---- claims (docs/spec.md §2) ------------------------------------------------------------------------------


def test_grounded_claims_are_all_correct_and_searched_for(engine: Engine, claims: list[dict]) -> None:
    wrong = []
    for row in claims:
        assert claim_in_query(row["claim"], row["claim"], QUESTION), row["id"]
        outcome = decide_claim(engine, row["claim"], grounded=True)
        p = outcome.answers["is_true"]["noul"]
        assert outcome.search_results, row["id"]
        if not correct(p, row["label"]):
            wrong.append((row["id"], p))
    assert wrong == [], "recorded grounded run: 24/24"


def test_ungrounded_knows_stable_facts_but_not_recent_ones(engine: Engine, claims: list[dict]) -> None:
    for row in claims:
        p = decide_claim(engine, row["claim"], grounded=False).answers["is_true"]["noul"]
        if row["kind"] == "stable":
            assert correct(p, row["label"]), (row["id"], p)
        elif row["label"]:
            assert p <= 0.25, (row["id"], p)  # recorded: true recent claims 0.01-0.24 without a search
        else:
            assert correct(p, row["label"]), (row["id"], p)  # low for every recent claim, true or false


def test_filler_before_the_claim_searches_the_filler(engine: Engine, claims: list[dict]) -> None:
    filler_urls = {
        json.loads(line)["url"] for line in (CORPUS_DIR / "filler.jsonl").read_text().splitlines() if line
    }
    not_correct = 0
    for row in claims:
        state = pad_before(row["claim"], 600)
        assert not claim_in_query(row["claim"], state, QUESTION), row["id"]
        outcome = decide_claim(engine, state, grounded=True)
        assert outcome.search_results, row["id"]
        assert {r["url"] for r in outcome.search_results} <= filler_urls, (
            "every result is an office-move page"
        )
        not_correct += not correct(outcome.answers["is_true"]["noul"], row["label"])
    assert not_correct >= 8, "recorded: grounded fell from 24/24 to 12/24"


# ---- answer gate (docs/spec.md §3) -------------------------------------------------------------------------


def score_sentence(engine: Engine, claim: str, source_ids: tuple[int, ...], results: list[dict]):
    cited = gate.cite_passages(source_ids, results)
    body = gate.sentence_request(claim, cited.passages, "pplx-decider-latest")
    answers = engine.decide(body).answers
    probabilities = {name: answer["noul"] for name, answer in answers.items()}
    return gate.label_sentence(probabilities, cited.passages.keys(), cited.missing_ids)


def test_answers_are_cited_scored_and_reviewed(engine: Engine) -> None:
    labels: list[str] = []
    for question in ANSWER_QUESTIONS:
        first = engine.agent(gate.answer_request(question))
        assert first.results and first.text
        sentences = gate.split_sentences(first.text)
        assert sentences and any(s.source_ids for s in sentences), question
        scored = [(s, score_sentence(engine, s.claim, s.source_ids, first.results)) for s in sentences]
        labels += [result.label for _, result in scored]
        for sentence, result in scored:
            if result.label not in gate.FLAGGED_LABELS:
                continue
            rewrite = engine.agent(gate.investigation_request(question, first.text, sentence.claim))
            new = gate.split_sentences(rewrite.text)
            assert 1 <= len(new) <= 3, rewrite.text
            ids = {r["id"] for r in rewrite.results}
            assert all(s.source_ids and set(s.source_ids) <= ids for s in new), rewrite.text
            rewrite_labels = [
                score_sentence(engine, s.claim, s.source_ids, rewrite.results).label for s in new
            ]
            assert "supported" in rewrite_labels, (sentence.claim, rewrite.text)
    assert "supported" in labels
    assert {"weak", "uncited"} & set(labels), labels
    assert sum(label in gate.FLAGGED_LABELS for label in labels) < len(labels) / 2, "most sentences hold up"


# ---- quote finder (docs/spec.md §4) ------------------------------------------------------------------------


def find_quote(engine: Engine, question: str) -> quotes.QuoteOutcome:
    results = quotes.prepare_results(engine.search(quotes.search_request(question)))
    assert len(results) == quotes.SEARCH_MAX_RESULTS
    candidates = []
    for source in results:
        if len(source.sentences) < quotes.MIN_SENTENCES:
            continue
        body = quotes.rank_request(
            question, source.title, source.url, source.sentences, "pplx-decider-v1.1-27b"
        )
        answers = engine.decide(body).answers
        assert sum(answers[quotes.BEST_QUESTION]["probabilities"].values()) == pytest.approx(1.0, abs=1e-9)
        candidates.append(quotes.parse_rank_answers(source, answers))
    pool = quotes.compare_pool(candidates)
    compared = None
    if pool:
        body = quotes.compare_request(question, [c.sentence for c in pool], "pplx-decider-v1.1-27b")
        compared = quotes.parse_compare_answers(engine.decide(body).answers, len(pool))
    return quotes.select_quote(candidates, compared)


@pytest.mark.parametrize("question", list(ANSWERABLE))
def test_answerable_questions_get_a_quote_with_the_answer(engine: Engine, question: str) -> None:
    outcome = find_quote(engine, question)
    assert outcome.answer is not None, outcome.closest
    assert any(answer in outcome.answer.sentence for answer in ANSWERABLE[question]), outcome.answer.sentence
    assert outcome.answer.answers is not None and outcome.answer.answers >= quotes.QUOTE_MIN


@pytest.mark.parametrize("question", UNANSWERABLE)
def test_unanswerable_questions_get_no_quote(engine: Engine, question: str) -> None:
    outcome = find_quote(engine, question)
    assert outcome.answer is None
    if outcome.closest is not None and outcome.closest.answers is not None:
        assert outcome.closest.answers < quotes.QUOTE_MIN
