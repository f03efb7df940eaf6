"""The `claims` rules (docs/spec.md §2): input validation, the request, verdicts, the scorecard and flips.

Scorecard arithmetic is checked against the three runs recorded on the real API for the 24 reference
claims (probabilities as printed, two decimals) and against the reference recipe's own small fixtures."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks import claims
from checks.claims import (
    CLAIM_ROOM_BYTES,
    INSTRUCTIONS,
    MAX_ERRORS_KEPT,
    QUESTION_NAME,
    ClaimRow,
    ClaimsValidationError,
    Outcome,
    RowError,
    claim_outside_query,
    flips,
    modes_for,
    parse_ndjson_lines,
    question,
    request_body,
    scorecard,
    validate_cutoffs,
    validate_rows,
    verdict,
)
from checks.grounding import claim_in_query
from tests.reference import CLAIMS_FILE

MODEL = "pplx-decider-latest"
FLASH = "pplx-decider-flash-latest"


def reference_rows() -> list[ClaimRow]:
    return parse_ndjson_lines(CLAIMS_FILE.read_text(encoding="utf-8").splitlines())


def errors_of(lines: list[str], **limits: int) -> list[str]:
    with pytest.raises(ClaimsValidationError) as info:
        parse_ndjson_lines(lines, **limits)
    return [str(e) for e in info.value.errors]


# --- input rows -------------------------------------------------------------------------------------------


def test_reference_claims_file_validates() -> None:
    rows = reference_rows()
    assert len(rows) == 24
    assert rows[0] == ClaimRow(
        "s01",
        "Python 3.12 was released in October 2023.",
        True,
        "stable",
        "https://www.python.org/downloads/release/python-3120/",
    )
    assert sum(r.label is True for r in rows) == 13 and sum(r.label is False for r in rows) == 11
    assert sum(r.kind == "stable" for r in rows) == 8 and sum(r.kind == "recent" for r in rows) == 16
    assert max(len(r.claim.encode()) for r in rows) == 100  # the longest claim fits the query whole
    assert not any(claim_outside_query(r.claim) for r in rows)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "no claims"),
        ("\n  \n", "no claims"),
        (
            '{"id": "a", "claim": "ok", "label": true, "kind": "stable"}\n{"id": "b", "label": true}\n',
            'line 2: field "claim": is required',
        ),
        (
            '{"id": "a", "claim": "ok", "label": "true"}',
            'line 1: field "label": must be true or false, got "true"',
        ),
        ("not json", "line 1: is not valid JSON: Expecting value at column 1"),
    ],
)
def test_the_bad_line_is_named(content: str, expected: str) -> None:
    assert errors_of(content.splitlines()) == [expected]


def test_error_names_line_and_field_as_specified() -> None:
    lines = ['{"id": "a", "claim": "x"}', "", '{"id": "b", "claim": "y", "label": "yes"}']
    assert errors_of(lines) == ['line 3: field "label": must be true or false, got "yes"']  # blanks count


def test_every_bad_row_is_reported_and_nothing_is_returned() -> None:
    lines = [
        '{"id": "a", "claim": "fine"}',
        '{"id": 7, "claim": "   "}',
        "[1, 2]",
        '{"id": "a", "claim": "again", "kind": 3, "source": null, "lable": true}',
        '{"id": "c", "claim": "ok"',
    ]
    assert errors_of(lines) == [
        'line 2: field "id": must be a string, got 7',
        'line 2: field "claim": must not be empty',
        "line 3: must be a JSON object, got [1, 2]",
        'line 4: field "lable": unknown field (allowed: id, claim, label, kind, source)',
        'line 4: field "id": duplicate id "a" (first on line 1)',
        'line 4: field "kind": must be a string, got 3',
        "line 5: is not valid JSON: Expecting ',' delimiter at column 26",
    ]


def test_a_duplicate_of_a_clean_row_is_named() -> None:
    line = '{"id": "a", "claim": "x"}'
    assert errors_of([line, "", line]) == ['line 3: field "id": duplicate id "a" (first on line 1)']


def test_optional_fields_may_be_absent_or_null() -> None:
    rows = parse_ndjson_lines(
        [
            '{"id": "a", "claim": "x"}',
            '{"id": "b", "claim": "y", "label": null, "kind": null, "source": null}',
            '{"id": "c", "claim": "z", "label": false}',
        ]
    )
    assert rows == [ClaimRow("a", "x"), ClaimRow("b", "y"), ClaimRow("c", "z", False)]


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"id": "", "claim": "x"}, 'field "id": must not be empty'),
        ({"id": " \t", "claim": "x"}, 'field "id": must not be empty'),
        ({"claim": "x"}, 'field "id": is required'),
        ({"id": "a" * 201, "claim": "x"}, 'field "id": is 201 characters, over the limit of 200'),
        ({"id": "a", "claim": ""}, 'field "claim": must not be empty'),
        ({"id": "a", "claim": "\n\u3000"}, 'field "claim": must not be empty'),
        ({"id": "a", "claim": ["x"]}, 'field "claim": must be a string, got ["x"]'),
        ({"id": "a", "claim": "é" * 11}, 'field "claim": is 22 bytes, over the limit of 20'),
        ({"id": "a", "claim": "x\u0000y"}, 'field "claim": must not contain a NUL character'),
        ({"id": "a", "claim": "\ud800"}, 'field "claim": is not valid Unicode'),
        ({"id": "a\u0000", "claim": "x"}, 'field "id": must not contain a NUL character'),
        ({"id": "a", "claim": "x", "label": 1}, 'field "label": must be true or false, got 1'),
        ({"id": "a", "claim": "x", "source": "\udfff"}, 'field "source": is not valid Unicode'),
        ({"id": "a", "claim": "x", "kind": "k\u0000"}, 'field "kind": must not contain a NUL character'),
        ({"id": "\ud800", "claim": "x"}, 'field "id": is not valid Unicode'),
        ({"id": "a", "claim": "x", "kind": "k" * 65}, 'field "kind": is 65 characters, over the limit of 64'),
        ({"id": "a", "claim": "x", "label": True, "extra": 1}, 'field "extra": unknown field'),
    ],
)
def test_field_rules(row: dict[str, object], expected: str) -> None:
    line = json.dumps(row)  # JSON escapes keep the NUL and the lone surrogates in the text
    found = errors_of([line], max_claim_bytes=20)
    assert len(found) == 1 and found[0].startswith("line 1: " + expected)


def test_claim_limit_counts_utf8_bytes_not_characters() -> None:
    assert parse_ndjson_lines([json.dumps({"id": "a", "claim": "é" * 10})], max_claim_bytes=20)
    assert errors_of([json.dumps({"id": "a", "claim": "é" * 10 + "x"})], max_claim_bytes=20)


def test_errors_are_capped_but_counted() -> None:
    lines = ['{"id": "a"}'] * (MAX_ERRORS_KEPT + 30)  # each line: claim missing; from line 2 also a duplicate
    with pytest.raises(ClaimsValidationError) as info:
        parse_ndjson_lines(lines)
    error = info.value
    assert len(error.errors) == MAX_ERRORS_KEPT
    assert error.total == 1 + 2 * (MAX_ERRORS_KEPT + 29)
    assert error.more == error.total - MAX_ERRORS_KEPT
    assert f"and {error.total - 5} more" in str(error)
    assert error.as_dict()["total"] == error.total
    assert error.errors[0] == RowError(1, "claim", "is required")


def test_row_limit_names_the_limit_and_stops_reading() -> None:
    def lines() -> Iterator[str]:
        for i in range(3):
            yield json.dumps({"id": f"c{i}", "claim": "x"})
        raise AssertionError("read past the first row over the limit")

    exactly = (json.dumps({"id": f"c{i}", "claim": "x"}) for i in range(2))
    assert len(parse_ndjson_lines(exactly, max_rows=2)) == 2  # exactly at the limit is fine
    with pytest.raises(ClaimsValidationError) as info:
        parse_ndjson_lines(lines(), max_rows=2)
    assert [str(e) for e in info.value.errors] == ["line 3: too many claims: the limit is 2 per batch"]


def test_bytes_lines_bom_and_bad_utf8() -> None:
    rows = parse_ndjson_lines([b'\xef\xbb\xbf{"id": "a", "claim": "caf\xc3\xa9"}\n', b"\n"])
    assert rows == [ClaimRow("a", "café")]
    with pytest.raises(ClaimsValidationError) as info:
        parse_ndjson_lines([b'{"id": "a", "claim": "\xff"}'])
    assert str(info.value.errors[0]) == "line 1: is not valid UTF-8 (byte 23)"


def test_json_array_intake_says_item() -> None:
    rows = validate_rows([{"id": "a", "claim": "x", "label": True}, {"id": "b", "claim": "y"}])
    assert rows == [ClaimRow("a", "x", True), ClaimRow("b", "y")]
    with pytest.raises(ClaimsValidationError) as info:
        validate_rows([{"id": "a", "claim": "x"}, {"id": "b", "claim": "y"}, {"id": "c", "label": "yes"}])
    assert [str(e) for e in info.value.errors] == [
        'item 3: field "claim": is required',
        'item 3: field "label": must be true or false, got "yes"',
    ]
    with pytest.raises(ClaimsValidationError, match='line 1: field "claim"'):
        validate_rows([{"id": "a"}], unit="line")
    with pytest.raises(ClaimsValidationError, match="no claims"):
        validate_rows([])
    with pytest.raises(ClaimsValidationError, match="too many claims: 3, the limit is 2"):
        validate_rows([{"id": f"{i}", "claim": "x"} for i in range(3)], max_rows=2)
    with pytest.raises(ClaimsValidationError, match="item 2: must be a JSON object"):
        validate_rows([{"id": "a", "claim": "x"}, "b"])


# Rows that are mostly valid, built from pieces that hit every rule, so the fast path and the full check
# meet on all of them (duplicates included: ids come from a small set).
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from(["", " ", "x\u0000", "\ud800", "\u3000", "\t1", "\x85", "long" * 60]),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)
ROW = st.fixed_dictionaries(
    {
        "id": st.one_of(st.sampled_from(["a", "b", "c", "é", "a b"]), ODD),
        "claim": st.one_of(st.sampled_from(["Claim one.", "x", "漢字", "tab\there"]), ODD),
    },
    optional={
        "label": st.one_of(st.booleans(), ODD),
        "kind": st.one_of(st.sampled_from(["stable", "recent"]), ODD),
        "source": st.one_of(st.just("https://example.com/"), ODD),
        "other": ODD,
    },
)
ROWS = st.lists(ROW, min_size=1, max_size=6)


@settings(max_examples=200)
@given(objs=ROWS)
def test_fast_path_agrees_with_the_full_check(objs: list[dict[str, object]]) -> None:
    def outcome(fast: bool) -> tuple[list[ClaimRow], list[str]]:
        original = claims._Checker._accept_plain
        if not fast:
            claims._Checker._accept_plain = lambda self, line, obj: False  # type: ignore[method-assign]
        try:
            return validate_rows(objs, max_claim_bytes=64), []
        except ClaimsValidationError as error:
            return [], [str(e) for e in error.errors]
        finally:
            claims._Checker._accept_plain = original  # type: ignore[method-assign]

    assert outcome(fast=True) == outcome(fast=False)


# --- the request ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "model"), [("ungrounded", MODEL), ("grounded", FLASH)])
def test_request_body_sends_mode_only_when_grounded(mode: claims.Mode, model: str) -> None:
    claim = "Rust 1.0 was released in May 2015."
    expected = {
        "model": model,
        "state": claim,
        "questions": {"is_true": {"type": "noul", "instructions": "Is the claim true?"}},
    }
    if mode == "grounded":
        expected["mode"] = "web_grounding"
    assert request_body(claim, model=model, mode=mode) == expected


def test_request_body_refuses_unknown_model_and_mode() -> None:
    with pytest.raises(ValueError, match="'gpt-x'"):
        request_body("c", model="gpt-x", mode="grounded")
    with pytest.raises(ValueError, match="mode"):
        request_body("c", model=MODEL, mode="web_grounding")  # type: ignore[arg-type]


def test_question_is_short_and_fresh() -> None:
    assert QUESTION_NAME == "is_true"
    assert question() == {"type": "noul", "instructions": INSTRUCTIONS}
    assert len(INSTRUCTIONS.encode()) == 18 and CLAIM_ROOM_BYTES == 237
    question()["instructions"] = "changed"
    assert question()["instructions"] == INSTRUCTIONS


def test_modes_for_job_modes() -> None:
    assert modes_for("both") == ("ungrounded", "grounded")
    assert modes_for("grounded") == ("grounded",)
    with pytest.raises(ValueError):
        modes_for("eval")  # type: ignore[arg-type]


def test_claim_outside_query_at_the_room_boundary() -> None:
    assert not claim_outside_query("a" * 40 + " " + "b" * 196)  # 237 bytes: inside
    assert claim_outside_query("a" * 40 + " " + "b" * 197)  # 238 bytes: the last word is cut
    assert not claim_outside_query("word  " * 47)  # 282 raw bytes, but 234 once whitespace collapses
    assert claim_outside_query("data:text/plain,the claim")  # data: URLs are never searched


@settings(max_examples=200)
@given(
    claim=st.one_of(
        st.text(max_size=300),
        st.lists(st.sampled_from(["word", " ", "  ", "é", "漢", "x" * 40, "\n", "data:"]), max_size=80).map(
            "".join
        ),
    )
)
def test_claim_outside_query_shortcut_is_exact(claim: str) -> None:
    assert claim_outside_query(claim) is not claim_in_query(claim, claim, question())


# --- verdicts ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "expected"),
    [(1.0, "supported"), (0.80, "supported"), (0.7999, "review"), (0.2001, "review"), (0.20, "contradicted")],
)
def test_verdict_cutoffs_are_inclusive(p: float, expected: str) -> None:
    assert verdict(p) == expected


def test_verdict_with_other_cutoffs() -> None:
    assert verdict(0.6, 0.6, 0.4) == "supported"
    assert verdict(0.4, 0.6, 0.4) == "contradicted"
    assert verdict(0.5, 0.6, 0.4) == "review"
    assert verdict(0.0, 0.5, 0.0) == "contradicted"


@pytest.mark.parametrize("p", [1.5, -0.1, math.nan, True, None, "0.9"])
def test_verdict_refuses_what_is_not_a_probability(p: object) -> None:
    with pytest.raises(ValueError):
        verdict(p)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("supported_min", "contradicted_max"),
    [(0.5, 0.5), (0.2, 0.8), (1.1, 0.2), (0.8, -0.1), (math.nan, 0.2), (True, 0.2)],
)
def test_cutoffs_must_leave_review_between(supported_min: float, contradicted_max: float) -> None:
    with pytest.raises(ValueError):
        validate_cutoffs(supported_min, contradicted_max)


def test_valid_cutoffs_pass() -> None:
    validate_cutoffs(1.0, 0.0)
    validate_cutoffs(0.8, 0.2)


# --- scorecard: the reference recipe's fixtures ----------------------------------------------------------

LABELS = {"a": True, "b": False, "c": True, "d": False}
GROUNDED = [
    Outcome(i, LABELS[i], p, tokens, 0.4, 1, results)
    for i, p, tokens, results in [
        ("a", 0.9, 100, 5),
        ("b", 0.1, 200, 0),
        ("c", 0.5, 300, 0),
        ("d", 0.85, 400, 0),
    ]
]
UNGROUNDED = [Outcome(i, LABELS[i], 0.5, 50, 0.3, 1, 0) for i in LABELS]


def probabilities(outcomes: list[Outcome]) -> dict[str, float | None]:
    return {o.id: o.p for o in outcomes}


def test_scorecard_counts() -> None:
    card = scorecard(GROUNDED, mode="grounded", model=MODEL, baseline=probabilities(UNGROUNDED))
    assert (card.correct, card.wrong, card.review) == (2, 1, 1)
    assert (card.missed_failures, card.false_contradictions) == (1, 0)  # d: false, 0.85 -> supported
    assert card.flips == 3  # a, b and d changed verdict; c stayed in review
    assert card.brier == pytest.approx((0.01 + 0.01 + 0.25 + 0.7225) / 4)
    assert (card.supported, card.contradicted, card.n, card.errors) == (2, 1, 4, 0)


def test_scorecard_cost_adds_one_search_per_grounded_attempt() -> None:
    grounded = scorecard(GROUNDED, mode="grounded", model=MODEL)
    ungrounded = scorecard(UNGROUNDED, mode="ungrounded", model=MODEL)
    flash = scorecard(UNGROUNDED, mode="ungrounded", model=FLASH)
    assert (grounded.mean_input_tokens, grounded.mean_latency_s) == (250, pytest.approx(0.4))
    assert (grounded.grounded_attempts, ungrounded.grounded_attempts, ungrounded.flips) == (4, 0, None)
    assert (grounded.mean_search_results, ungrounded.mean_search_results) == (1.25, 0)
    assert grounded.cost_per_1000_usd == pytest.approx(1.005)
    assert ungrounded.cost_per_1000_usd == pytest.approx(1000 * 50 * 0.02 / 1e6)
    assert flash.cost_per_1000_usd == pytest.approx(1000 * 50 * 0.01 / 1e6)


def test_retried_attempts_count_as_searches() -> None:
    card = scorecard([Outcome("a", True, 0.5, 100, 2.1, 2, 5)], mode="grounded", model=MODEL)
    assert card.grounded_attempts == 2


@pytest.mark.parametrize(
    ("outcomes", "baseline"),
    [
        ([], None),
        ([Outcome("a", "true", 0.9)], None),  # type: ignore[arg-type]
        ([Outcome("a", True, 1.5)], None),
        ([Outcome("a", True, math.nan)], None),
        ([Outcome("a", True, True)], None),  # type: ignore[arg-type]
        ([Outcome("a", True, 0.9), Outcome("a", False, 0.1)], None),  # an id twice
        ([Outcome("a", True, 0.9, error="also failed")], None),
        ([Outcome("a", True, 0.9, input_tokens=-1)], None),
        ([Outcome("a", True, 0.9, latency_s=math.inf)], None),
        ([Outcome("a", True, 0.9)], {"a": -0.1}),
    ],
)
def test_scorecard_rejects_bad_input(outcomes: list[Outcome], baseline: dict[str, float] | None) -> None:
    with pytest.raises(ValueError):
        scorecard(outcomes, mode="grounded", model=MODEL, baseline=baseline)


def test_scorecard_rejects_unknown_model_mode_and_cutoffs() -> None:
    with pytest.raises(ValueError, match="unknown model"):
        scorecard(GROUNDED, mode="grounded", model="nope")
    with pytest.raises(ValueError, match="mode"):
        scorecard(GROUNDED, mode="both", model=MODEL)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        scorecard(GROUNDED, mode="grounded", model=MODEL, supported_min=0.2, contradicted_max=0.8)


@pytest.mark.parametrize(
    ("true_p", "false_p", "counts", "passes"),
    [
        (0.0, 0.0, (0, 13, 0), False),  # contradict everything
        (0.5, 0.5, (0, 0, 24), False),  # review everything
        (0.98, 0.0, (0, 0, 0), True),  # the recorded grounded run's shape
    ],
)
def test_acceptance_needs_all_three_bounds(
    true_p: float, false_p: float, counts: tuple[int, int, int], passes: bool
) -> None:
    outcomes = [
        Outcome(r.id, r.label, true_p if r.label else false_p, 1000, 0.4, 1) for r in reference_rows()
    ]
    card = scorecard(outcomes, mode="grounded", model=MODEL)
    assert (card.missed_failures, card.false_contradictions, card.review) == counts
    assert card.acceptance is passes


@pytest.mark.parametrize(
    ("false_contradictions", "reviews", "passes"),
    [(1, 0, True), (2, 0, False), (0, 5, True), (0, 6, False)],  # 1 of 20 is 5 % exactly; 5 of 20 is 25 %
)
def test_acceptance_bounds_are_inclusive(false_contradictions: int, reviews: int, passes: bool) -> None:
    ps = [0.0] * false_contradictions + [0.5] * reviews
    ps += [1.0] * (20 - len(ps))
    card = scorecard([Outcome(f"t{i}", True, p) for i, p in enumerate(ps)], mode="ungrounded", model=MODEL)
    assert (card.false_contradictions, card.review) == (false_contradictions, reviews)
    assert card.false_contradictions_ok is (false_contradictions <= 1)
    assert card.review_ok is (reviews <= 5)
    assert card.acceptance is passes


def test_one_missed_failure_fails_acceptance() -> None:
    outcomes = [Outcome("f", False, 0.8)] + [Outcome(f"t{i}", True, 1.0) for i in range(99)]
    card = scorecard(outcomes, mode="grounded", model=MODEL)
    assert (card.missed_failures, card.missed_failures_ok, card.acceptance) == (1, False, False)


# --- scorecard: unlabelled and failed claims -------------------------------------------------------------


def test_unlabelled_claims_get_verdicts_but_no_score() -> None:
    outcomes = [Outcome("a", True, 0.9), Outcome("u", None, 0.1), Outcome("v", None, 0.5)]
    card = scorecard(outcomes, mode="ungrounded", model=MODEL)
    assert (card.n, card.supported, card.contradicted, card.review) == (3, 1, 1, 1)
    assert (card.labelled, card.correct, card.wrong, card.labelled_review) == (1, 1, 0, 0)
    assert card.brier == pytest.approx(0.01)
    assert card.acceptance is True


def test_without_labels_there_is_no_score_or_acceptance() -> None:
    card = scorecard([Outcome("u", None, 0.9, 120, 0.5, 1, 0)], mode="ungrounded", model=MODEL)
    assert card.supported == 1
    assert (card.correct, card.wrong, card.brier, card.missed_failures) == (None, None, None, None)
    assert (card.missed_failures_ok, card.false_contradictions_ok, card.review_ok) == (None, None, None)
    assert card.acceptance is None
    assert card.mean_input_tokens == 120


def test_failed_claims_are_counted_never_dropped() -> None:
    outcomes = [
        Outcome("a", True, 1.0, 2000, 0.5, 1, 5),
        Outcome("b", False, None, 0, 3.5, 4, 0, error="503: upstream"),  # 4 grounded attempts, all failed
        Outcome("c", None, None, 0, 1.0, 1, 0, error="skipped"),
    ]
    card = scorecard(outcomes, mode="grounded", model=MODEL)
    assert (card.n, card.errors, card.labelled, card.labelled_errors) == (3, 2, 2, 1)
    assert (card.correct, card.wrong, card.labelled_review) == (1, 0, 0)  # the failure has no verdict
    assert card.brier == 0.0  # over answered labelled claims only
    assert card.grounded_attempts == 6  # failed attempts may have billed their search
    assert card.mean_latency_s == pytest.approx(5.0 / 3)
    assert card.cost_per_1000_usd == pytest.approx(1000 * (2000 / 3 * 0.02 / 1e6 + 0.001 * 6 / 3))
    assert (card.missed_failures_ok, card.false_contradictions_ok, card.review_ok) == (True, True, True)
    assert card.acceptance is False  # the failed labelled claim might have been any verdict


def test_flips_ignore_claims_unanswered_in_either_mode() -> None:
    outcomes = [Outcome("a", True, 0.9), Outcome("b", True, None, error="x"), Outcome("c", False, 0.1)]
    card = scorecard(outcomes, mode="grounded", model=MODEL, baseline={"a": 0.1, "b": 0.1, "c": None})
    assert card.flips == 1


def test_as_dict_is_json_safe() -> None:
    card = scorecard(GROUNDED, mode="grounded", model=MODEL, baseline=probabilities(UNGROUNDED))
    data = card.as_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["acceptance"] is False and data["bounds"]["max_review_rate"] == 0.25
    assert data["mode"] == "grounded" and data["cost_per_1000_usd"] == pytest.approx(1.005)
    unlabelled = scorecard([Outcome("u", None, 0.5)], mode="ungrounded", model=MODEL).as_dict()
    assert unlabelled["brier"] is None and json.dumps(unlabelled, allow_nan=False)


# --- scorecard: the runs recorded on the real API (seed 003) ---------------------------------------------

# id: (ungrounded p, grounded p) as printed, per run.
UNPADDED = {
    "s01": (1.00, 1.00), "s02": (1.00, 1.00), "s03": (1.00, 1.00), "s04": (1.00, 1.00),
    "s05": (0.04, 0.00), "s06": (0.00, 0.00), "s07": (0.00, 0.00), "s08": (0.15, 0.00),
    "r01": (0.01, 1.00), "r02": (0.04, 1.00), "r03": (0.04, 1.00), "r04": (0.04, 1.00),
    "r05": (0.10, 1.00), "r06": (0.07, 1.00), "r07": (0.13, 1.00), "r08": (0.24, 1.00),
    "r09": (0.02, 0.00), "r10": (0.04, 0.00), "r11": (0.18, 0.00), "r12": (0.10, 0.00),
    "r13": (0.03, 0.00), "r14": (0.00, 0.00), "r15": (0.03, 0.00), "r16": (0.02, 1.00),
}  # fmt: skip
# r03 grounded printed 0.20 but went to review, so it was above the cutoff: 0.204 here.
FILLER_FIRST = {
    "s01": (0.99, 0.92), "s02": (0.75, 0.15), "s03": (1.00, 1.00), "s04": (0.99, 0.99),
    "s05": (0.07, 0.03), "s06": (0.00, 0.00), "s07": (0.00, 0.00), "s08": (0.95, 0.82),
    "r01": (0.02, 0.07), "r02": (0.26, 0.21), "r03": (0.33, 0.204), "r04": (0.21, 0.26),
    "r05": (0.07, 0.08), "r06": (0.28, 0.07), "r07": (0.07, 0.12), "r08": (0.39, 0.17),
    "r09": (0.10, 0.10), "r10": (0.05, 0.07), "r11": (0.10, 0.21), "r12": (0.21, 0.11),
    "r13": (0.17, 0.05), "r14": (0.01, 0.03), "r15": (0.13, 0.16), "r16": (0.12, 0.23),
}  # fmt: skip
CLAIM_FIRST = {
    "s01": (0.99, 1.00), "s02": (0.99, 1.00), "s03": (1.00, 1.00), "s04": (1.00, 0.99),
    "s05": (0.05, 0.00), "s06": (0.00, 0.00), "s07": (0.00, 0.00), "s08": (0.23, 0.00),
    "r01": (0.01, 1.00), "r02": (0.03, 1.00), "r03": (0.03, 1.00), "r04": (0.06, 1.00),
    "r05": (0.03, 1.00), "r06": (0.06, 1.00), "r07": (0.04, 1.00), "r08": (0.24, 1.00),
    "r09": (0.01, 0.00), "r10": (0.01, 0.00), "r11": (0.09, 0.00), "r12": (0.09, 0.00),
    "r13": (0.01, 0.01), "r14": (0.00, 0.00), "r15": (0.03, 0.00), "r16": (0.02, 0.99),
}  # fmt: skip

# (correct, wrong, review, missed failures, false contradictions, printed Brier, acceptance)
RECORDED = [
    (UNPADDED, (15, 8, 1, 0, 8, 0.326, False), (24, 0, 0, 0, 0, 0.000, True), 9),
    (FILLER_FIRST, (12, 5, 7, 1, 4, 0.294, False), (12, 7, 5, 1, 6, 0.330, False), 6),
    (CLAIM_FIRST, (14, 8, 2, 0, 8, 0.338, False), (24, 0, 0, 0, 0, 0.000, True), 10),
]


def recorded_outcomes(table: dict[str, tuple[float, float]], column: int, tokens: int) -> list[Outcome]:
    labels = {r.id: r.label for r in reference_rows()}
    return [Outcome(i, labels[i], ps[column], tokens, 0.5, column, 5 * column) for i, ps in table.items()]


@pytest.mark.parametrize(("table", "ungrounded", "grounded", "flip_count"), RECORDED)
def test_recorded_runs_reproduce(
    table: dict[str, tuple[float, float]],
    ungrounded: tuple[int, int, int, int, int, float, bool],
    grounded: tuple[int, int, int, int, int, float, bool],
    flip_count: int,
) -> None:
    modes: list[claims.Mode] = ["ungrounded", "grounded"]
    runs = [recorded_outcomes(table, column, 100) for column in (0, 1)]
    for column, (mode, expected) in enumerate(zip(modes, [ungrounded, grounded], strict=True)):
        own, other = runs[column], runs[1 - column]
        card = scorecard(own, mode=mode, model=MODEL, baseline=probabilities(other))
        counts = (card.correct, card.wrong, card.review, card.missed_failures, card.false_contradictions)
        assert counts == expected[:5]
        assert card.brier is not None
        # Exact for the printed probabilities; within rounding of the figure printed from unrounded ones.
        labels = {r.id: r.label for r in reference_rows()}
        squares = [(ps[column] - float(bool(labels[i]))) ** 2 for i, ps in table.items()]
        assert card.brier == pytest.approx(sum(squares) / 24)
        assert card.brier == pytest.approx(expected[5], abs=0.01)
        assert card.acceptance is expected[6]
        assert card.flips == flip_count
    assert len(flips(probabilities(runs[0]), probabilities(runs[1]))) == flip_count


def test_recorded_eval_cost_and_means() -> None:
    ungrounded = scorecard(recorded_outcomes(UNPADDED, 0, 99), mode="ungrounded", model=MODEL)
    grounded = scorecard(recorded_outcomes(UNPADDED, 1, 1906), mode="grounded", model=MODEL)
    assert f"{ungrounded.cost_per_1000_usd:.4f}" == "0.0020"
    assert f"{grounded.cost_per_1000_usd:.4f}" == "1.0381"  # 1,906 x $0.02/M + $0.001, x 1,000
    assert (grounded.grounded_attempts, grounded.mean_search_results) == (24, 5.0)
    assert (ungrounded.grounded_attempts, ungrounded.mean_search_results) == (0, 0.0)
    assert not ungrounded.false_contradictions_ok and ungrounded.review_ok and ungrounded.missed_failures_ok


def test_replaying_other_cutoffs_needs_only_the_probabilities() -> None:
    outcomes = recorded_outcomes(UNPADDED, 0, 99)
    strict = scorecard(outcomes, mode="ungrounded", model=MODEL, supported_min=0.99, contradicted_max=0.01)
    assert (strict.supported, strict.contradicted, strict.review) == (4, 4, 16)


# --- flips ------------------------------------------------------------------------------------------------


def test_flips_list_the_claims_that_changed() -> None:
    found = flips(probabilities(UNGROUNDED), probabilities(GROUNDED))
    assert [f.id for f in found] == ["a", "b", "d"]
    assert found[0].as_dict() == {
        "id": "a",
        "ungrounded_p": 0.5,
        "grounded_p": 0.9,
        "ungrounded": "review",
        "grounded": "supported",
    }


def test_flips_skip_unanswered_and_missing_ids_and_use_the_cutoffs() -> None:
    ungrounded = {"a": 0.5, "b": None, "c": 0.5, "only_here": 0.0}
    grounded = {"a": 0.7, "b": 1.0, "c": 0.3, "only_there": 1.0}
    assert flips(ungrounded, grounded) == []
    assert [f.id for f in flips(ungrounded, grounded, supported_min=0.6, contradicted_max=0.4)] == ["a", "c"]
    with pytest.raises(ValueError):
        flips({"a": 2.0}, {"a": 0.5})


@pytest.mark.parametrize("row_id", ["bell\x07", "rlo\u202egnp.exe", "zw\u200bj", "tab\there"])
def test_ids_with_control_or_format_characters_are_refused_on_both_paths(row_id: str) -> None:
    """An id that would display as another one (a bidi override, a zero-width space) names its line/item."""
    row = {"id": row_id, "claim": "Rust 1.0 was released in May 2015."}
    with pytest.raises(ClaimsValidationError) as items:
        validate_rows([row])
    with pytest.raises(ClaimsValidationError) as lines:
        parse_ndjson_lines([json.dumps(row)])
    for err in (items.value.errors[0], lines.value.errors[0]):
        assert err.field == "id" and "control or formatting characters" in err.message
