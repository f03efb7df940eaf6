"""Packed requests (checks/packing.py), the packing audit's figures (checks/packing_audit.py), the usage
shares of a pack (jobs/packs.py:shares) and the `pack_size` / `audit_share` options."""

from __future__ import annotations

import pytest

from checks.citation_contracts import CitationPassage, SentencePlan, SentenceScore
from checks.citation_passages import decisions_request
from checks.kinds.citations import parse_options
from checks.options import OptionsError, parse_claims_options
from checks.packing import (
    MAX_PACK_SIZE,
    PackPlace,
    RequestTally,
    flash_warning,
    group_sentences,
    pack_claims,
    pack_sentences,
    sentence_questions,
    split_count,
    tally_requests,
)
from checks.packing_audit import AuditPair, audit_part, audited, combine
from jobs.items import ItemUsage
from jobs.packs import shares


def _passage(key: str, source: str, text: str, role: str = "cited", chunk: int = 1) -> CitationPassage:
    return CitationPassage(key=key, source=source, chunk=chunk, chunks=1, role=role, text=text)  # type: ignore[arg-type]


def _plan(number: int, claim: str, passages: list[CitationPassage]) -> SentencePlan:
    return SentencePlan(
        number=number,
        text=claim,
        claim=claim,
        paragraph=1,
        cited=["a"],
        missing=[],
        passages=passages,
        unchecked=[],
    )


A = "The Eiffel Tower was completed in 1889."
B = "The Danube flows through ten countries."


def _plans() -> list[SentencePlan]:
    return [
        _plan(1, "It was completed in 1889.", [_passage("1", "a", A), _passage("2", "b", B, role="other")]),
        _plan(
            2, "It flows through ten countries.", [_passage("1", "b", B), _passage("2", "a", A, role="other")]
        ),
    ]


def test_a_packed_request_holds_each_passage_once_and_each_sentence_its_own_questions() -> None:
    plans = _plans()
    packed = pack_sentences(plans, "pplx-decider-v1.2")
    state = packed.body["state"]
    assert isinstance(state, dict)
    assert state["passages"] == {"1": A, "2": B}  # both sentences use both sources: sent once
    assert state["claims"] == {"s1": plans[0].claim, "s2": plans[1].claim}
    questions = packed.body["questions"]
    assert isinstance(questions, dict)
    # the same questions as each sentence's unpacked request, one set per sentence
    single = [decisions_request(p.claim, p.passages, "m")["questions"] for p in plans]
    assert len(questions) == sum(len(q) for q in single)  # type: ignore[arg-type]
    assert questions["s2_supports_2"]["instructions"].startswith(
        "Does passage 2 state or directly imply claim s2?"
    )
    assert questions["s1_contradicts_1"]["instructions"] == (
        "Does passage 1 state something that cannot be true if claim s1 is true?"
    )
    # the answers map back onto each sentence's own passage keys
    answers = {name: i / 100 for i, name in enumerate(questions)}
    got = packed.answers_of(answers)
    assert got[0] is not None and got[1] is not None
    assert got[1].supports == {"1": answers["s2_supports_2"], "2": answers["s2_supports_1"]}
    assert got[1].contradicts == {"1": answers["s2_contradicts_2"]}
    assert got[0].checkable == answers["s1_checkable"]


def test_a_sentence_with_a_missing_answer_is_asked_again_alone() -> None:
    packed = pack_sentences(_plans(), "m")
    questions = packed.body["questions"]
    assert isinstance(questions, dict)
    answers = {name: 0.5 for name in questions if name != "s2_supports_1"}
    got = packed.answers_of(answers)
    assert got[0] is not None and got[1] is None


def test_packs_never_exceed_the_question_cap_or_the_pack_size_and_never_split_a_sentence() -> None:
    wide = [
        _plan(
            n, f"Claim {n}.", [_passage(str(k), f"src{k}", f"text {k}", role="cited") for k in range(1, 21)]
        )
        for n in range(1, 8)
    ]
    assert sentence_questions(wide[0]) == 41
    groups = group_sentences(wide, MAX_PACK_SIZE)
    assert [len(g) for g in groups] == [3, 3, 1]  # 3 × 41 = 123 ≤ 128
    assert sorted(i for g in groups for i in g) == list(range(7))
    assert group_sentences(wide, 2) == [[0, 1], [2, 3], [4, 5], [6]]
    assert group_sentences(wide, 1) == [[i] for i in range(7)]


def test_long_passages_bound_a_pack_by_its_input_tokens() -> None:
    big = "x " * 100_000  # 200 kB: about 50,000 tokens each
    plans = [_plan(n, f"Claim {n}.", [_passage("1", f"src{n}", big)]) for n in range(1, 6)]
    groups = group_sentences(plans, MAX_PACK_SIZE)
    assert len(groups) > 1 and all(len(g) <= 3 for g in groups)


def test_claims_pack_numbers_its_claims_with_one_truth_question_each() -> None:
    packed = pack_claims(["Water is wet.", "Fire is cold."], "pplx-decider-v1.2")
    assert packed.body["state"] == {"claims": {"c1": "Water is wet.", "c2": "Fire is cold."}}
    assert packed.body["questions"] == {
        "c1_is_true": {"type": "noul", "instructions": "Is claim c1 true?"},
        "c2_is_true": {"type": "noul", "instructions": "Is claim c2 true?"},
    }
    assert packed.answers_of({"c2_is_true": 0.1}) == [None, 0.1]


def test_pack_size_is_refused_with_grounding_naming_the_option_and_why() -> None:
    with pytest.raises(OptionsError) as exc:
        parse_claims_options({"mode": "grounded", "pack_size": 5})
    assert exc.value.field == "pack_size" and "search" in exc.value.message
    with pytest.raises(OptionsError):
        parse_claims_options({"mode": "both", "pack_size": "2"})
    assert parse_claims_options({"mode": "ungrounded", "pack_size": "20"}).pack_size == 20
    assert parse_claims_options({}).pack_size == 1
    for bad in (0, 129, 2.5, "many"):
        with pytest.raises(OptionsError) as exc:
            parse_claims_options({"mode": "ungrounded", "pack_size": bad})
        assert exc.value.field == "pack_size"


def test_citations_pack_by_default_and_audit_two_percent() -> None:
    options = parse_options({})
    assert options.pack_size == MAX_PACK_SIZE and options.audit_share == 0.02
    assert parse_options({"pack_size": 1, "audit_share": 0}).as_dict()["pack_size"] == 1
    with pytest.raises(OptionsError) as exc:
        parse_options({"audit_share": 1.5})
    assert exc.value.field == "audit_share"


def test_a_flash_model_packed_is_warned_in_its_model_cards_words() -> None:
    assert flash_warning("pplx-decider-v1.2", 20) is None
    assert flash_warning("pplx-decider-flash-v1.2", 1) is None
    text = flash_warning("pplx-decider-flash-v1.2", 20)
    assert text is not None and "more accurate with one question per request" in text


def test_shares_add_up_to_the_whole() -> None:
    total = ItemUsage(attempts=1, input_tokens=1001, output_tokens=7, cost_usd=0.02, upstream_latency_s=0.9)
    parts = shares(total, 3)
    assert sum(p.attempts for p in parts) == 1 and sum(p.input_tokens for p in parts) == 1001
    assert sum(p.output_tokens for p in parts) == 7
    assert sum(p.cost_usd for p in parts) == pytest.approx(0.02)
    assert split_count(10, 4) == [3, 3, 2, 2]


def test_audited_answers_are_the_first_and_every_nth() -> None:
    assert [p for p in range(200) if audited(p, 0.02)] == [0, 50, 100, 150]
    assert audited(0, 0.5) and not audited(1, 0.5)
    assert not any(audited(p, 0.0) for p in range(10))


def _score(checkable: float, supports: float) -> SentenceScore:
    return SentenceScore(checkable=checkable, supports={"1": supports}, contradicts={"1": 0.05})


def test_the_audit_reports_agreement_deltas_and_warns_when_packing_moves_verdicts() -> None:
    same = audit_part(
        [AuditPair(0, _score(0.9, 0.9), _score(0.9, 0.91), "supported", "supported") for _ in range(100)]
    )
    audit = combine([same])
    assert audit is not None and audit.sentences == 100 and audit.label_agreement == 1.0
    assert audit.max_abs_delta == pytest.approx(0.01) and audit.warning is None
    drifted = audit_part(
        [
            AuditPair(0, _score(0.9, 0.9), _score(0.9, 0.9), "supported", "supported"),
            AuditPair(1, _score(0.9, 0.5), _score(0.9, 0.9), "weak", "supported"),
        ]
    )
    audit = combine([same, drifted])
    assert audit is not None and audit.sentences == 102
    assert audit.by_position["2"].label_agreement == 0.0 and audit.by_position["1"].label_agreement == 1.0
    assert audit.warning is None  # 101 of 102 agree: 0.990, at the bar
    audit = combine([drifted])
    assert audit is not None and audit.warning is not None and "label agreement 0.500" in audit.warning
    assert combine([]) is None


def test_a_pack_place_is_read_from_an_output() -> None:
    assert PackPlace.of({"pack": {"head": 3, "size": 4, "position": 1}}) == PackPlace(
        head=3, size=4, position=1
    )
    assert PackPlace.of({"p": 0.5}) is None and PackPlace.of(None) is None


def test_a_tally_counts_a_pack_once_and_keeps_the_store_s_answers_apart() -> None:
    def packed(head: int, size: int, position: int) -> dict[str, object]:
        return {"pack": {"head": head, "size": size, "position": position}}

    answered = [
        (packed(1, 3, 0), False),
        (packed(1, 3, 1), False),
        (packed(1, 3, 2), False),
        (packed(4, 2, 0), True),  # a pack the verdict store answered: reused whole
        (packed(4, 2, 1), True),
        ({}, False),  # unpacked: a request each
        (None, True),
        (packed(7, 1, 0), False),  # a pack of one is a request of its own
    ]
    assert tally_requests(answered) == RequestTally(sent=3, reused=2)
    assert tally_requests([]) == RequestTally()
    assert RequestTally(1, 2) + RequestTally(3, 4) == RequestTally(4, 6)
