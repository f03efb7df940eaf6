"""The answer gate's reference cases (seed 000's offline tests), run against our pure functions.

The seed's retry test (429 + Retry-After) belongs to clients/, and its report-HTML assertions to the
report renderer; what they check about this layer (the passage is sent exactly as returned, the "not
confirmed" badge) is asserted here on the data the renderer receives.
"""

from __future__ import annotations

from collections.abc import Mapping

from checks.answers import (
    NOT_CONFIRMED,
    NOT_REVIEWED,
    REPLACED,
    Review,
    Scored,
    cite_passages,
    final_answer,
    investigation_request,
    label_sentence,
    select_for_review,
    sentence_request,
    split_sentences,
    summarize,
)

MODEL = "pplx-decider-v1.1-27b"


def answers_for(
    supports: Mapping[str, float], contradicts: Mapping[str, float] | None = None, checkable: float = 0.95
) -> dict[str, float]:
    """Made-up probabilities keyed by question name, as the client returns them."""
    contradicts = contradicts if contradicts is not None else {n: 0.0 for n in supports}
    answers = {"checkable": checkable}
    answers.update({f"supports_{n}": p for n, p in supports.items()})
    answers.update({f"contradicts_{n}": p for n, p in contradicts.items()})
    return answers


def label_of(supports: Mapping[str, float], contradicts=None, checkable: float = 0.95) -> str:
    return label_sentence(answers_for(supports, contradicts, checkable), supports.keys()).label


def test_split_keeps_every_sentence_and_its_markers() -> None:
    text = (
        "John J. Hopfield won, e.g. for nets.[1] He said “it works.” [2][3] "
        "Known fact [4].\n\nNo end mark [5]"
    )
    sentences = split_sentences(text)
    assert [s.source_ids for s in sentences] == [(1,), (2, 3), (4,), (5,)]
    assert [s.paragraph for s in sentences] == [1, 1, 1, 2]
    assert sentences[2].claim == "Known fact."
    assert sentences[2].text == "Known fact. [4]"
    assert sentences[0].claim == "John J. Hopfield won, e.g. for nets."
    assert sentences[1].claim == "He said “it works.”"
    assert sentences[3].claim == "No end mark"


def test_policy_order_and_bands() -> None:
    assert label_of({"1": 0.9}, {"1": 0.7}) == "contradicted"  # contradiction beats support
    assert label_of({"1": 0.9}) == "supported"
    assert label_of({"1": 0.5}) == "weak"
    assert label_of({"1": 0.1}) == "unsupported"
    assert label_of({}, checkable=0.9) == "uncited"
    assert label_of({"1": 0.9}, checkable=0.2) == "not_checkable"


def test_request_has_one_question_per_passage_plus_checkable() -> None:
    body = sentence_request("claim", {"4": "a", "7": "b"}, MODEL)
    assert set(body["questions"]) == {
        "checkable",
        "supports_4",
        "contradicts_4",
        "supports_7",
        "contradicts_7",
    }
    assert all(q["type"] == "noul" for q in body["questions"].values())


def test_review_keeps_only_supported_rewrite_sentences() -> None:
    """The seed's whole loop with fake upstream answers: score, review the flagged, build the answer."""
    results = [{"id": 1, "url": "https://example.com", "title": "t", "snippet": "snippet with `code`"}]
    rewrites = {"Weak claim.": "Better claim. [1] Extra guess. [1]", "Bad claim.": "Still bad. [1]"}
    support = {
        "Good claim.": 0.9,
        "Weak claim.": 0.5,
        "Bad claim.": 0.1,
        "Better claim.": 0.95,
        "Still bad.": 0.2,
        "Extra guess.": 0.3,
    }
    sent: list[dict] = []

    def score(text: str) -> tuple[list[Scored], list[str]]:
        scored, rules = [], []
        for sentence in split_sentences(text):
            cited = cite_passages(sentence.source_ids, results)
            sent.append(sentence_request(sentence.claim, cited.passages, MODEL))
            p = support.get(sentence.claim, 0.9)
            result = label_sentence(
                answers_for(dict.fromkeys(cited.passages, p)), cited.passages, cited.missing_ids
            )
            scored.append(
                Scored(sentence.claim, sentence.paragraph, result.label, tuple(cited.urls.values()))
            )
            rules.append(result.rule)
        return scored, rules

    answer = "Good claim. [1] Weak claim. [1] Bad claim. [1] Missing claim. [9]"
    originals, rules = score(answer)
    assert [s.label for s in originals] == ["supported", "weak", "unsupported", "uncited"]
    assert "no search result" in rules[3] and "[9]" in rules[3]

    to_review, beyond = select_for_review([s.label for s in originals])
    assert (to_review, beyond) == ([1, 2, 3], [])
    reviews = {}
    for i in to_review:
        body = investigation_request("q", answer, originals[i].claim)
        assert originals[i].claim in body["input"]
        reviews[i] = Review.of(score(rewrites.get(originals[i].claim, "Nothing. [1]"))[0])

    assert [reviews[i].outcome if i in reviews else "" for i in range(4)] == [
        "",
        REPLACED,
        NOT_CONFIRMED,
        REPLACED,
    ]
    final = final_answer(originals, reviews)
    assert [s.claim for s in final.sentences] == ["Good claim.", "Better claim.", "Bad claim.", "Nothing."]
    assert [s.outcome for s in final.sentences] == [None, None, NOT_CONFIRMED, None]
    assert [s.replaced for s in final.sentences] == [False, True, False, True]
    # The passage goes upstream exactly as the search returned it, backticks included.
    assert all(
        body["state"]["passages"] == {"1": "snippet with `code`"}
        for body in sent
        if body["state"]["passages"]
    )
    assert sent[3]["state"]["passages"] == {} and set(sent[3]["questions"]) == {"checkable"}


def test_recorded_k2_18b_run_adds_up() -> None:
    """docs/spec.md §3 / §7: 4 sentences, 1 supported, 1 weak, 2 uncited; 3 investigated, 2
    replaced (0.856, 0.986), 1 not confirmed (0.682); 7 Decisions requests, 20,625 input tokens, 14.3 s."""
    originals = [
        Scored("Webb detected methane and carbon dioxide.", 1, "uncited", (), 3000),
        Scored("Low ammonia is consistent with a water ocean.", 1, "weak", ("https://a",), 3000),
        Scored("Webb reported possible dimethyl sulfide.", 1, "uncited", (), 3000),
        Scored("That signal is tentative.", 1, "supported", ("https://b",), 3000),
    ]
    reviews = {
        0: Review.of([Scored("NIRISS and NIRSpec showed methane.", 1, "supported", ("https://c",), 2875)]),
        1: Review.of(
            [Scored("The ammonia shortage fits a water ocean.", 1, "supported", ("https://a",), 2875)]
        ),
        2: Review.of([Scored("A 2025 study reported a tentative signal.", 1, "weak", ("https://d",), 2875)]),
    }
    summary = summarize(originals, reviews, seconds=14.34).as_dict()
    assert summary == {
        "sentences": 4,
        "investigated": 3,
        "replaced": 2,
        "decisions_requests": 7,
        "decisions_input_tokens": 20625,
        "seconds": 14.3,
        "before": {"supported": 1, "weak": 1, "uncited": 2},
        "after": {"supported": 3, "uncited": 1},
    }


def test_flagged_beyond_four_are_not_reviewed() -> None:
    labels = [
        "weak",
        "supported",
        "uncited",
        "unsupported",
        "contradicted",
        "not_checkable",
        "weak",
        "uncited",
    ]
    to_review, beyond = select_for_review(labels)
    assert to_review == [0, 2, 3, 4]
    assert beyond == [6, 7]
    originals = [Scored(f"S{i}.", 1, label) for i, label in enumerate(labels)]
    reviews = {i: Review.not_reviewed() for i in beyond}
    final = final_answer(originals, reviews)
    assert [s.outcome for s in final.sentences][6:] == [NOT_REVIEWED, NOT_REVIEWED]
    assert summarize(originals, reviews, 1.0).investigated == 0
