"""What the pack handlers share (workers/packed.py): a packed answer shared out to the pack's members."""

from __future__ import annotations

from dataclasses import dataclass, field

from checks.packing import pack_claims
from clients.results import Answer, Decision
from workers.outcomes import AskAlone, Done, Failed
from workers.packed import Share, answer_pack, share_out


@dataclass
class FakeCalls:
    """Only what the helpers touch: the rows, and a Decisions request that answers as told."""

    decision: Decision
    rows: list[str] = field(default_factory=lambda: ["the pack's call row"])
    asked: list[object] = field(default_factory=list)

    def decide(self, body: object, model: str, *, partial: bool = False) -> Decision:
        self.asked.append((body, model, partial))
        return self.decision


def _decision(answers: dict[str, float], input_tokens: int = 7, output_tokens: int = 5) -> Decision:
    return Decision(
        answers={name: Answer(type="noul", noul=p) for name, p in answers.items()},
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        search_results=[],
        model="sonar",
    )


def _done(share: Share[float]) -> Done:
    return Done({"p": share.answers, "at": share.index, "in": share.input_tokens, "out": share.output_tokens})


def test_each_member_gets_its_share_and_one_left_out_is_asked_alone() -> None:
    calls = FakeCalls(_decision({}))
    shared = share_out(calls, calls.decision, [0.9, None, 0.1], _done, left_out="left out")
    assert shared.calls == ["the pack's call row"]
    # 7 and 5 tokens as three whole shares, the remainder to the first (a left-out member keeps its share).
    assert shared.members == [
        Done({"p": 0.9, "at": 0, "in": 3, "out": 2}),
        AskAlone("left out"),
        Done({"p": 0.1, "at": 2, "in": 2, "out": 1}),
    ]


def test_a_pack_is_asked_leniently_and_its_answers_read_by_member() -> None:
    packed = pack_claims(["The sky is blue.", "Water is dry."], "sonar")
    calls = FakeCalls(_decision({packed.names[1]: 0.2}))
    outcome = answer_pack(
        calls,
        "sonar",
        lambda: packed,
        lambda decision, share: _done(share),
        cannot="cannot check these claims",
        left_out="the packed answer left out this claim's question",
    )
    assert calls.asked == [(packed.body, "sonar", True)]
    assert outcome.members == [
        AskAlone("the packed answer left out this claim's question"),
        Done({"p": 0.2, "at": 1, "in": 3, "out": 2}),
    ]


def test_a_pack_that_cannot_be_built_fails_saying_why() -> None:
    def too_many() -> object:
        raise ValueError("too many claims")

    outcome = answer_pack(
        FakeCalls(_decision({})),
        "sonar",
        too_many,
        lambda decision, share: _done(share),
        cannot="cannot check these claims",
        left_out="unused",
    )
    assert outcome == Failed("cannot check these claims: too many claims")
