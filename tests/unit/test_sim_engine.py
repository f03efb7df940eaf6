"""The simulator's content engine: corpus, FTS5 index, judge heuristic, Engine facade (no HTTP)."""

from __future__ import annotations

import functools
import json
import re
import threading
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.agent_writer import flagged_sentence
from simulator.config import SimConfig
from simulator.engine import Engine, grounding_query
from simulator.index import CORPUS_DIR, CorpusIndex, fts_query, load_corpus, split_sentences
from simulator.judge import Judge, answer_score, checkable_score, compare, features

TRUTH = {"type": "noul", "instructions": "Is the claim true?"}
CUTOFF = SimConfig().knowledge_cutoff


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(SimConfig())


def claim_body(state: object, *, grounded: bool = False, model: str = "pplx-decider-latest") -> dict:
    body: dict = {"model": model, "state": state, "questions": {"is_true": dict(TRUTH)}}
    if grounded:
        body["mode"] = "web_grounding"
    return body


def p_true(engine: Engine, state: object, *, grounded: bool = False) -> float:
    return engine.decide(claim_body(state, grounded=grounded)).answers["is_true"]["noul"]


# ---- corpus and index --------------------------------------------------------------------------------


def test_corpus_documents_are_well_formed() -> None:
    documents = load_corpus()
    assert len(documents) >= 80
    assert sum(len(d.sentences) for d in documents) >= 250
    for doc in documents:
        assert doc.url.startswith(("http://", "https://"))
        date.fromisoformat(doc.date)
        assert doc.sentences and all(s.strip() for s in doc.sentences)
    assert len({d.url for d in documents}) == len(documents), "a url names one page"
    # The cutoff matters only if the corpus has pages on both sides of it.
    assert any(date.fromisoformat(d.date) < CUTOFF for d in documents)
    assert any(date.fromisoformat(d.date) >= CUTOFF for d in documents)


def test_load_corpus_names_the_bad_line(tmp_path: Path) -> None:
    good = {"title": "t", "url": "https://example.org/a", "date": "2024-01-02", "text": "A sentence here."}
    (tmp_path / "a.jsonl").write_text(
        json.dumps(good) + "\n" + json.dumps({**good, "url": "ftp://x"}) + "\n", encoding="utf-8"
    )
    with pytest.raises(ValueError, match=r"a\.jsonl:2: url"):
        load_corpus(tmp_path)
    (tmp_path / "a.jsonl").write_text(json.dumps({**good, "date": "2024-13-01"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a\.jsonl:1: date"):
        load_corpus(tmp_path)


def test_split_sentences_keeps_initials_and_breaks_sections() -> None:
    text = (
        "John J. Hopfield won. The pyramid by I. M. Pei opened in 1989. One e.g. two.\n"
        "Next line ... last part"
    )
    assert split_sentences(text) == [
        "John J. Hopfield won.",
        "The pyramid by I. M. Pei opened in 1989.",
        "One e.g. two.",
        "Next line",
        "last part",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('NEAR(a b) AND "x" OR y* ^z col:w', '"near" OR "col"'),  # operators are words, not syntax
        ("Python 3.12 was released", '"python" OR "3.12" OR "released"'),
        ("the of and ?!", None),
        ("", None),
    ],
)
def test_fts_query_quotes_every_term(text: str, expected: str | None) -> None:
    assert fts_query(text) == expected


@functools.cache
def _shared_index() -> CorpusIndex:
    return CorpusIndex.from_directory(CORPUS_DIR)


@given(st.text(max_size=200))
@settings(max_examples=150)
def test_any_text_is_a_safe_query(text: str) -> None:
    index = _shared_index()
    hits = index.search(text, 5)  # never an FTS5 syntax error
    assert len(hits) <= 5


def test_search_ranks_the_matching_page_first_with_matching_snippets() -> None:
    hits = _shared_index().search("How deep is the Mariana Trench?", 5)
    assert hits[0].document.title in {"Mariana Trench", "Mapping the Challenger Deep"}
    assert all("Mariana" in s or "Challenger" in s or "trench" in s.lower() for s in hits[0].sentences)
    assert all(s in hits[0].document.sentences for s in hits[0].sentences)
    ranks = [h.rank for h in hits]
    assert ranks == sorted(ranks), "bm25: lower is better, best first"


def test_search_before_applies_the_cutoff() -> None:
    query = "Navi Pillay 2026 Nobel Peace Prize"
    everything = _shared_index().search(query, 10)
    known = _shared_index().search(query, 10, before=CUTOFF)
    assert any(h.document.date >= CUTOFF.isoformat() for h in everything)
    assert known and all(h.document.date < CUTOFF.isoformat() for h in known)


def test_snippet_joins_sections_with_ellipsis() -> None:
    hit = _shared_index().search("Eiffel Tower height metres antenna opened 1889", 1, max_sentences=3)[0]
    assert len(hit.sentences) >= 2
    assert hit.snippet == " ... ".join(hit.sentences)


# ---- judge --------------------------------------------------------------------------------------------


def test_compare_support_and_contradiction() -> None:
    claim = features("The Linux kernel was first released in 1998.")
    assert compare(claim, features("The Linux kernel was first released in 1998 by a student.")).supports
    wrong_year = compare(claim, features("The Linux kernel was first released by Linus Torvalds in 1991."))
    assert wrong_year.contradicts and not wrong_year.supports
    # Two kinds of disagreement (a different version and a different year): another subject, no conflict.
    other = compare(
        features("Python 3.12 was released in 2023."), features("Python 3.13 was released in 2024.")
    )
    assert not other.contradicts and not other.supports
    negated = compare(
        features("The Milwaukee Brewers won a World Series."),
        features("The Milwaukee Brewers have never won a World Series."),
    )
    assert negated.contradicts


def test_checkable_separates_facts_from_questions_and_opinions() -> None:
    assert checkable_score("Hubble was launched on April 24, 1990.") > 0.9
    assert checkable_score("Why does this matter?") < 0.1
    assert checkable_score("I think the tower is beautiful.") < 0.5
    assert checkable_score("In summary, there is more to it.") < 0.5


def test_answer_score_needs_the_asked_detail() -> None:
    question = "How many bones are in the adult human body?"
    assert answer_score(question, "The adult human body has 206 bones.") > 0.9
    assert answer_score(question, "The femur is the longest bone in the adult human body.") <= 0.45
    assert answer_score("What color was the ink?", "The ink was white.") > answer_score(
        "What color was the ink?", "The ink was used to sign."
    )


def _judge() -> Judge:
    return Judge(lambda text: (), seed=0)


def test_judge_answers_every_question_type_in_api_shapes() -> None:
    state = {
        "claim": "The adult human body has 206 bones.",
        "passages": {"1": "Anatomy texts agree. The adult human body has 206 bones."},
    }
    questions = {
        "truth": dict(TRUTH),
        "pick": {
            "type": "choice",
            "instructions": "Which?",
            "criteria": {"a": "bones", "b": "rivers", "c": None},
        },
        "rate": {"type": "score", "instructions": "How well supported?", "criteria": ["low", "mid", "high"]},
    }
    answers = _judge().answer(state, questions, model="m")
    assert answers["truth"]["type"] == "noul" and 0.0 <= answers["truth"]["noul"] <= 1.0
    pick = answers["pick"]
    assert pick["type"] == "choice" and pick["choice"] in {"a", "b", "c"}
    assert set(pick["probabilities"]) == {"a", "b", "c"}
    assert sum(pick["probabilities"].values()) == pytest.approx(1.0, abs=1e-9)
    assert 0.0 <= pick["confidence"] <= 1.0
    rate = answers["rate"]
    assert rate["type"] == "score" and rate["score"] in (0, 1, 2)
    assert rate["legend"] == {"0": "low", "1": "mid", "2": "high"}
    assert sum(rate["probabilities"].values()) == pytest.approx(1.0, abs=1e-9)
    assert rate["score"] == 2, "a passage that states the claim rates it at the top level"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
question_shapes = st.fixed_dictionaries(
    {"type": st.sampled_from(["noul", "choice", "score", "other"])},
    optional={
        "instructions": json_values,
        "criteria": json_values
        | st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=40), min_size=1, max_size=5)
        | st.lists(st.text(max_size=20), min_size=1, max_size=6),
    },
)


@given(
    state=json_values,
    questions=st.dictionaries(st.text(min_size=1, max_size=10), question_shapes, max_size=4),
)
@settings(max_examples=150, deadline=None)
def test_judge_never_crashes_and_keeps_probabilities_valid(state: object, questions: dict) -> None:
    answers = _judge().answer(state, questions, evidence=["Some evidence sentence about things."], model="x")
    assert set(answers) == set(questions)
    for answer in answers.values():
        if answer["type"] == "noul":
            assert 0.0 <= answer["noul"] <= 1.0
        else:
            probabilities = answer["probabilities"]
            assert all(0.0 <= p <= 1.0 for p in probabilities.values())
            assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-9)
            chosen = answer["choice"] if answer["type"] == "choice" else str(answer["score"])
            assert chosen in probabilities


# ---- engine: decisions --------------------------------------------------------------------------------


def test_decide_is_deterministic_and_seeded(engine: Engine) -> None:
    body = claim_body("Rust 1.0 was released in May 2015.", grounded=True)
    assert engine.decide(body) == engine.decide(json.loads(json.dumps(body)))
    other_seed = Engine(SimConfig(seed=7), index=engine.index).decide(body)
    ours = engine.decide(body).answers["is_true"]["noul"]
    theirs = other_seed.answers["is_true"]["noul"]
    assert ours != theirs, "the seed keys the jitter"
    assert abs(ours - theirs) < 0.02, "...which stays below the second decimal's worth"


def test_similar_requests_differ_only_in_the_jitter(engine: Engine) -> None:
    values = [
        engine.decide(claim_body("Git was created by Guido van Rossum.", model=m)).answers["is_true"]["noul"]
        for m in ("pplx-decider-latest", "pplx-decider-v1.2", "pplx-decider-flash-latest")
    ]
    assert len(set(values)) > 1
    assert max(values) - min(values) < 0.02


def test_grounded_response_carries_search_results(engine: Engine) -> None:
    outcome = engine.decide(claim_body("Navi Pillay was awarded the 2026 Nobel Peace Prize.", grounded=True))
    assert outcome.search_results is not None and 1 <= len(outcome.search_results) <= 5
    for result in outcome.search_results:
        assert set(result) == {"title", "url", "snippet", "date", "last_updated"}
        assert result["url"].startswith("https://")
    assert (
        engine.decide(claim_body("Navi Pillay was awarded the 2026 Nobel Peace Prize.")).search_results
        is None
    )


def test_grounding_fails_open(engine: Engine) -> None:
    claim = "Navi Pillay was awarded the 2026 Nobel Peace Prize."
    failed = engine.decide(claim_body(claim, grounded=True), fail_search=True)
    assert failed.search_results == []
    assert failed.answers["is_true"]["noul"] <= 0.25, "without evidence the model is left with its cutoff"
    assert engine.decide(claim_body(claim, grounded=True)).answers["is_true"]["noul"] >= 0.8
    vague = {"type": "noul", "instructions": "Is it so?"}
    nothing = engine.decide(
        {"model": "m", "state": "??? !!!", "questions": {"q": vague}, "mode": "web_grounding"}
    )
    assert nothing.search_results == [], "a query with no searchable words finds nothing"


def test_equal_queries_share_a_search_and_results_are_capped(engine: Engine) -> None:
    claim = "Harry Kane won the 2026 men's Ballon d'Or."
    body = {"model": "m", "state": claim, "questions": {f"q{i}": dict(TRUTH) for i in range(3)}}
    one = engine.decide(claim_body(claim, grounded=True)).search_results
    same = engine.decide({**body, "mode": "web_grounding"}).search_results
    assert same == one, "three equal queries are one search"
    questions = {
        f"q{i}": {"type": "noul", "instructions": f"Is claim {word} true?"}
        for i, word in enumerate(
            [
                "first",
                "second",
                "third",
                "fourth",
                "fifth",
                "sixth",
                "seventh",
                "eighth",
                "ninth",
                "tenth",
                "eleventh",
                "twelfth",
            ]
        )
    }
    many = engine.decide({"model": "m", "state": claim, "questions": questions, "mode": "web_grounding"})
    assert many.search_results is not None
    urls = [r["url"] for r in many.search_results]
    assert len(urls) == len(set(urls)) and len(urls) <= 12, "more than 10 queries: one result per query"
    few = {k: questions[k] for k in list(questions)[:3]}
    capped = engine.decide({"model": "m", "state": claim, "questions": few, "mode": "web_grounding"})
    assert capped.search_results is not None and len(capped.search_results) <= 10


def test_fallback_query_for_shapes_the_port_refuses() -> None:
    state = {"claim": "The Rosetta Stone was discovered in 1799.", "passages": {"1": "x"}}
    query = grounding_query(state, {"type": "noul", "instructions": "Does passage 1 support the claim?"})
    assert query.startswith("Does passage 1 support the claim?")
    assert "Rosetta Stone" in query and len(query.encode()) <= 256
    assert grounding_query("plain claim", TRUTH) == "Is the claim true? plain claim"
    assert grounding_query("x", "not a question") == ""


def test_tokens_grow_with_what_the_model_reads(engine: Engine) -> None:
    short = engine.decide(claim_body("Rust 1.0 was released in May 2015."))
    longer = engine.decide(claim_body("Rust 1.0 was released in May 2015. " * 20))
    grounded = engine.decide(claim_body("Rust 1.0 was released in May 2015.", grounded=True))
    assert 0 < short.input_tokens < longer.input_tokens
    assert grounded.input_tokens > short.input_tokens + 50, "the evidence is read too"
    assert short.output_tokens == 1


def test_decisions_are_thread_safe(engine: Engine) -> None:
    claims = [
        "Rust 1.0 was released in May 2015.",
        "Git was created by Guido van Rossum.",
        "Navi Pillay was awarded the 2026 Nobel Peace Prize.",
        "The Tampa Bay Rays won the 2026 World Series.",
    ]
    expected = {c: engine.decide(claim_body(c, grounded=True)) for c in claims}
    seen: dict[str, object] = {}
    errors: list[BaseException] = []

    def work(claim: str) -> None:
        try:
            for _ in range(5):
                seen[claim] = engine.decide(claim_body(claim, grounded=True))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(c,)) for c in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert seen == expected


# ---- engine: agent and search -------------------------------------------------------------------------


def test_agent_answer_cites_numbered_results(engine: Engine) -> None:
    body = {
        "input": "When was the Rosetta Stone discovered?",
        "preset": "fast",
        "tools": [{"type": "web_search"}],
    }
    outcome = engine.agent(body)
    assert outcome == engine.agent(body), "one question, one answer"
    ids = [r["id"] for r in outcome.results]
    assert ids == list(range(1, len(ids) + 1))
    markers = {int(n) for n in re.findall(r"\[(\d+)\]", outcome.text)}
    assert markers and markers <= set(ids)
    assert "1799" in outcome.text
    assert outcome.input_tokens > 0 and outcome.output_tokens > 0


def test_agent_accepts_message_lists(engine: Engine) -> None:
    text = engine.agent({"input": "When was the Rosetta Stone discovered?"}).text
    as_messages = engine.agent(
        {"input": [{"role": "user", "content": "When was the Rosetta Stone discovered?"}]}
    )
    assert as_messages.text == text


def test_flagged_sentence_detection_is_wording_free() -> None:
    answer = "Hubble was launched in 1990[1]. Hubble is named after Edwin Hubble[2]."
    prompt = (
        f'Q: when?\n\nAnswer:\n{answer}\n\nThis one was weak:\n"Hubble is named after Edwin Hubble."\nFix it.'
    )
    assert flagged_sentence(prompt) == "Hubble is named after Edwin Hubble."
    assert flagged_sentence("In what year was the Hubble Space Telescope launched?") is None


def test_search_api_results_and_filters(engine: Engine) -> None:
    results = engine.search({"query": "Hubble Space Telescope launch", "max_results": 3})
    assert 1 <= len(results) <= 3
    assert all(set(r) == {"title", "url", "snippet", "date", "last_updated"} for r in results)
    only_nasa = engine.search(
        {"query": "Hubble Space Telescope launch", "search_domain_filter": ["nasa.gov"]}
    )
    assert only_nasa and all(r["url"].split("/")[2].endswith("nasa.gov") for r in only_nasa)
    no_nasa = engine.search({"query": "Hubble Space Telescope launch", "search_domain_filter": ["-nasa.gov"]})
    assert all(not r["url"].split("/")[2].endswith("nasa.gov") for r in no_nasa)
    recent = engine.search({"query": "Nobel Prize", "search_recency_filter": "month", "max_results": 20})
    assert recent and all(r["date"] >= "2026-09-30" for r in recent)  # newest page: 2026-10-31
    short = engine.search({"query": "Eiffel Tower height", "max_results": 1, "max_tokens_per_page": 10})
    assert " ... " not in short[0]["snippet"], "a small page budget keeps one sentence"
    assert engine.search({"query": "   "}) == []
