"""Review selection, outcomes, the final answer with citations renumbered by URL, and the summary."""

from __future__ import annotations

import pytest

from checks.answers import (
    FLAGGED_LABELS,
    MAX_INVESTIGATIONS,
    NOT_CONFIRMED,
    NOT_REVIEWED,
    REPLACED,
    Review,
    Scored,
    final_answer,
    review_may_start,
    review_outcome,
    select_for_review,
    summarize,
)


def test_flagged_labels_and_limit() -> None:
    assert frozenset({"weak", "unsupported", "contradicted", "uncited"}) == FLAGGED_LABELS
    assert MAX_INVESTIGATIONS == 4


def test_the_review_starts_only_once_every_sentence_has_a_label() -> None:
    assert review_may_start(["supported", "weak", "not_checkable"])
    assert review_may_start([])  # an answer without sentences has nothing to wait for
    # A sentence whose scoring failed has no label: which flagged sentences are "the first four" is
    # unknown, and the recipe would have stopped there.
    assert not review_may_start(["weak", None, "unsupported"])


def test_select_for_review_keeps_order_and_splits_at_the_limit() -> None:
    labels = ["supported", "not_checkable", "uncited", "weak", "contradicted", "unsupported", "weak"]
    assert select_for_review(labels) == ([2, 3, 4, 5], [6])
    assert select_for_review(labels, limit=1) == ([2], [3, 4, 5, 6])
    assert select_for_review(labels, limit=0) == ([], [2, 3, 4, 5, 6])
    assert select_for_review(["supported", "not_checkable"]) == ([], [])
    with pytest.raises(ValueError, match="negative"):
        select_for_review(labels, limit=-1)


def test_review_outcome() -> None:
    assert review_outcome(["weak", "supported", "unsupported"]) == REPLACED
    assert review_outcome(["weak", "contradicted"]) == NOT_CONFIRMED
    assert review_outcome([]) == NOT_CONFIRMED


def test_review_record_derives_and_checks_its_outcome() -> None:
    good = Scored("Good.", 1, "supported")
    weak = Scored("Weak.", 1, "weak")
    assert Review.of([weak, good]).outcome == REPLACED
    assert Review.of([weak, good]).kept == (good,)
    assert Review.of([weak]).outcome == NOT_CONFIRMED
    assert Review.of([weak]).kept == ()
    assert Review.not_reviewed().outcome == NOT_REVIEWED and Review.not_reviewed().rewrite == ()
    with pytest.raises(ValueError, match="does not match"):
        Review(REPLACED, (weak,))
    with pytest.raises(ValueError, match="does not match"):
        Review(NOT_CONFIRMED, (good,))
    with pytest.raises(ValueError, match="no rewrite"):
        Review(NOT_REVIEWED, (weak,))


def test_final_answer_renumbers_citations_by_url_across_searches() -> None:
    originals = [
        Scored("First.", 1, "supported", ("https://a", "https://b")),
        Scored("Second.", 1, "weak", ("https://c",)),
        Scored("Third.", 2, "supported", ("https://b", "https://b")),
        Scored("Fourth.", 2, "uncited", ("",)),  # a result without a URL gets no number
    ]
    reviews = {
        1: Review.of(
            [
                Scored("Second, rewritten.", 1, "supported", ("https://d", "https://a")),
                Scored("Dropped guess.", 1, "unsupported", ("https://e",)),
                Scored("Also kept.", 1, "supported", ("https://d",)),
            ]
        ),
        3: Review.of([Scored("Still unsure.", 1, "weak", ("https://f",))]),
    }
    final = final_answer(originals, reviews)
    assert [(s.claim, s.citations) for s in final.sentences] == [
        ("First.", (1, 2)),
        ("Second, rewritten.", (3, 1)),
        ("Also kept.", (3,)),
        ("Third.", (2,)),  # a URL cited twice is one citation
        ("Fourth.", ()),
    ]
    # Dropped rewrite sentences and replaced originals take no number.
    assert final.sources == ("https://a", "https://b", "https://d")
    assert [s.label for s in final.sentences] == [
        "supported",
        "supported",
        "supported",
        "supported",
        "uncited",
    ]
    assert [s.replaced for s in final.sentences] == [False, True, True, False, False]
    assert [s.outcome for s in final.sentences] == [None, None, None, None, NOT_CONFIRMED]
    assert [s.origin for s in final.sentences] == [0, 1, 1, 2, 3]
    # Rewrite sentences sit in the replaced sentence's paragraph.
    assert [[s.claim for s in p] for p in final.paragraphs()] == [
        ["First.", "Second, rewritten.", "Also kept."],
        ["Third.", "Fourth."],
    ]


def test_rewrite_sentences_take_the_paragraph_of_the_sentence_they_replace() -> None:
    originals = [Scored("Intro.", 1, "supported"), Scored("Later claim.", 3, "weak")]
    # A rewrite is split on its own, so its sentences come numbered from paragraph 1.
    reviews = {1: Review.of([Scored("Fixed claim.", 1, "supported")])}
    final = final_answer(originals, reviews)
    assert [(s.claim, s.paragraph) for s in final.sentences] == [("Intro.", 1), ("Fixed claim.", 3)]
    assert len(final.paragraphs()) == 2


def test_final_answer_without_reviews_is_the_first_pass() -> None:
    originals = [Scored("One.", 1, "weak", ("https://x",)), Scored("Two.", 1, "supported", ("https://x",))]
    final = final_answer(originals, {})
    assert [(s.claim, s.label, s.citations, s.outcome) for s in final.sentences] == [
        ("One.", "weak", (1,), None),
        ("Two.", "supported", (1,), None),
    ]
    assert final.sources == ("https://x",)


def test_reviews_must_point_at_sentences() -> None:
    with pytest.raises(ValueError, match=r"\[2\]"):
        final_answer([Scored("One.", 1, "weak")], {2: Review.not_reviewed()})
    with pytest.raises(ValueError, match=r"\[-1\]"):
        summarize([Scored("One.", 1, "weak")], {-1: Review.not_reviewed()}, 0.0)


def test_summary_counts_requests_tokens_and_labels() -> None:
    originals = [
        Scored("A.", 1, "supported", ("u",), 100),
        Scored("B.", 1, "weak", ("u",), 110),
        Scored("C.", 1, "contradicted", ("u",), 120),
        Scored("D.", 1, "not_checkable", (), 30),
        Scored("E.", 1, "uncited", (), 40),
    ]
    reviews = {
        1: Review.of([Scored("B1.", 1, "supported", ("v",), 200), Scored("B2.", 1, "weak", ("v",), 210)]),
        2: Review.of([Scored("C1.", 1, "unsupported", ("w",), 220)]),
        4: Review.not_reviewed(),
    }
    summary = summarize(originals, reviews, seconds=3.26)
    assert summary.sentences == 5
    assert summary.investigated == 2
    assert summary.replaced == 1
    assert summary.decisions_requests == 8
    assert summary.decisions_input_tokens == 100 + 110 + 120 + 30 + 40 + 200 + 210 + 220
    assert summary.before == {"supported": 1, "weak": 1, "contradicted": 1, "uncited": 1, "not_checkable": 1}
    assert summary.after == {"supported": 2, "contradicted": 1, "uncited": 1, "not_checkable": 1}
    assert list(summary.after) == ["supported", "contradicted", "uncited", "not_checkable"]  # LABELS order
    data = summary.as_dict()
    assert data["seconds"] == 3.3
    assert data["decisions_requests"] == 8 and data["before"] == summary.before


def test_summary_of_an_empty_answer() -> None:
    assert summarize([], {}, 0.0).as_dict() == {
        "sentences": 0,
        "investigated": 0,
        "replaced": 0,
        "decisions_requests": 0,
        "decisions_input_tokens": 0,
        "seconds": 0.0,
        "before": {},
        "after": {},
    }
