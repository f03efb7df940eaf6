"""checks/reuse.py: the request key (canonical body, every part named apart) and which requests may use the
store; the `reuse` options of every kind; a stored answer read back as the Decision it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from checks import reuse
from checks.kinds.citations import parse_options as parse_citations_options
from checks.options import OptionsError, parse_claims_options, parse_questions_options
from clients.results import Answer, Decision, SearchResult
from jobs.verdicts import StoredVerdict
from workers.reuse import decision_json, stored_decision

BODY = {
    "model": "pplx-decider-v1.2",
    "state": {"claim": "Rust 1.0 was released in May 2015.", "passages": {"p1": "Rust 1.0 shipped."}},
    "questions": {"checkable": {"type": "noul", "instructions": "Is it checkable?"}},
}
UP = "https://api.perplexity.ai"


def test_the_key_does_not_depend_on_key_order_or_spacing() -> None:
    shuffled = {"questions": BODY["questions"], "state": BODY["state"], "model": BODY["model"]}
    assert reuse.request_key("decisions", UP, shuffled) == reuse.request_key("decisions", UP, BODY)
    assert len(reuse.request_key("decisions", UP, BODY)) == 32


@pytest.mark.parametrize(
    "change",
    [
        {"model": "pplx-decider-v1.1-27b"},
        {"mode": "web_grounding"},
        {"state": {"claim": "Rust 1.0 was released in May 2015!", "passages": BODY["state"]["passages"]}},
        {"questions": {"checkable": {"type": "noul", "instructions": "Is it checkable? "}}},
    ],
)
def test_any_other_byte_of_model_mode_state_or_questions_is_another_key(change: dict[str, object]) -> None:
    assert reuse.request_key("decisions", UP, {**BODY, **change}) != reuse.request_key("decisions", UP, BODY)


def test_another_endpoint_or_upstream_is_another_key() -> None:
    key = reuse.request_key("decisions", UP, BODY)
    assert reuse.request_key("decisions", "http://simulator.invalid", BODY) != key
    assert reuse.request_key("agent", UP, BODY) != key


def test_a_pinned_ungrounded_request_reads_and_writes() -> None:
    assert reuse.policy_for({}, BODY) == reuse.ReusePolicy(read=True, write=True)


@pytest.mark.parametrize("model", ["pplx-decider-latest", "pplx-decider-flash-latest", ""])
def test_a_moving_alias_never_uses_the_store(model: str) -> None:
    assert reuse.policy_for({}, {**BODY, "model": model}) == reuse.NEVER


def test_reuse_none_never_uses_the_store() -> None:
    assert reuse.policy_for({"reuse": "none"}, BODY) == reuse.NEVER
    assert reuse.policy_for(
        {"reuse": "none", "reuse_max_age_hours": 5}, {**BODY, "mode": "web_grounding"}
    ) == (reuse.NEVER)


def test_grounded_is_read_only_with_a_max_age_and_then_only_younger_entries() -> None:
    grounded = {**BODY, "mode": "web_grounding"}
    assert reuse.policy_for({}, grounded) == reuse.ReusePolicy(read=False, write=True)
    policy = reuse.policy_for({"reuse_max_age_hours": 2}, grounded)
    assert policy == reuse.ReusePolicy(read=True, write=True, max_age=timedelta(hours=2))
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    young = {"now": now, "job_ended_at": None, "retention_days": 30}
    assert reuse.usable(policy, answered_at=now - timedelta(hours=1), **young)
    assert not reuse.usable(policy, answered_at=now - timedelta(hours=3), **young)


def test_an_entry_of_a_job_past_its_retention_never_answers() -> None:
    policy = reuse.ReusePolicy(read=True, write=True)
    now = datetime(2026, 12, 3, 12, tzinfo=UTC)
    at = now - timedelta(days=40)
    assert reuse.usable(policy, answered_at=at, now=now, job_ended_at=None, retention_days=30)
    assert reuse.usable(
        policy, answered_at=at, now=now, job_ended_at=now - timedelta(days=29), retention_days=30
    )
    assert not reuse.usable(
        policy, answered_at=at, now=now, job_ended_at=now - timedelta(days=31), retention_days=30
    )
    assert not reuse.usable(reuse.NEVER, answered_at=now, now=now, job_ended_at=None, retention_days=30)


@pytest.mark.parametrize("parse", [parse_claims_options, parse_questions_options, parse_citations_options])
def test_every_kind_takes_the_reuse_options_and_names_the_bad_one(parse: object) -> None:
    assert callable(parse)
    options = parse({"reuse": "none", "reuse_max_age_hours": "12"}).as_dict()
    assert (options["reuse"], options["reuse_max_age_hours"]) == ("none", 12.0)
    plain = parse({}).as_dict()
    assert "reuse" not in plain and "reuse_max_age_hours" not in plain  # the defaults are not stored
    for bad, field in (
        ({"reuse": "always"}, "reuse"),
        ({"reuse_max_age_hours": 0}, "reuse_max_age_hours"),
        ({"reuse_max_age_hours": "soon"}, "reuse_max_age_hours"),
        ({"reuse_max_age_hours": True}, "reuse_max_age_hours"),
    ):
        with pytest.raises(OptionsError) as err:
            parse(bad)
        assert err.value.field == field


def test_a_stored_answer_reads_back_as_the_decision_it_was_with_a_record_that_sent_nothing() -> None:
    decision = Decision(
        answers={
            "checkable": Answer(type="noul", noul=0.93),
            "pick": Answer(type="choice", choice="a", probabilities={"a": 0.8, "b": 0.2}, confidence=0.8),
        },
        input_tokens=120,
        output_tokens=7,
        search_results=[SearchResult(url="https://example.org/a", title="A", snippet="s", date="2024-01-01")],
        model="pplx-decider-v1.2",
        sanitized=["search_results[0].snippet"],
    )
    at = datetime(2026, 12, 3, 12, tzinfo=UTC)
    stored = StoredVerdict("req-1", at, "pplx-decider-v1.2", decision_json(decision), 120, 7)
    back = stored_decision(stored, grounded=True)
    assert back == decision
    assert back.record.reused and back.record.attempt_count == 0
    assert back.record.request_id == "req-1"
