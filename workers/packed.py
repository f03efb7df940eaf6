"""What the pack handlers share: asking a packed request and sharing its answer out to the pack's members.

The pack handlers of claims, citations' sentences and quote ranks do the same with what came back: a member
whose answers the packed reply left out leaves the pack and is asked alone (`AskAlone`), every other member
gets its answers and its whole-unit share of the request's tokens (checks/packing.py:split_count), and the
pack's call rows are stored once, on the head (jobs/packs.py). Only what a member's output holds differs,
so that is the one thing a handler says. (The answer kind's sentences go through workers/answers.py:
score_pack, which a rewrite's sentences share.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from checks.packing import split_count
from clients.results import Decision
from workers.outcomes import AskAlone, Failed, Member, PackAnswered, PackOutcome, Transient
from workers.steps import Calls, ask_packed

A = TypeVar("A")
A_co = TypeVar("A_co", covariant=True)


@dataclass(frozen=True)
class Share(Generic[A]):
    """One member's part of a packed answer: its place in the pack, its answers, its tokens."""

    index: int
    answers: A
    input_tokens: int
    output_tokens: int


class Packed(Protocol[A_co]):
    """A packed Decisions request read back by noul probability (checks/packing.py: claims, sentences)."""

    @property
    def body(self) -> dict[str, object]: ...

    def answers_of(self, answers: Mapping[str, float]) -> Sequence[A_co | None]: ...


def share_out(
    calls: Calls,
    decision: Decision,
    answers: Sequence[A | None],
    member: Callable[[Share[A]], Member],
    *,
    left_out: str,
) -> PackAnswered:
    """Each member's outcome, in the pack's order: `member` of its share, or `AskAlone(left_out)` when the
    reply left out its answers (`answers` holds one entry per member, None for those)."""
    tokens_in = split_count(decision.input_tokens, len(answers))
    tokens_out = split_count(decision.output_tokens, len(answers))
    members: list[Member] = [
        AskAlone(left_out) if got is None else member(Share(i, got, tokens_in[i], tokens_out[i]))
        for i, got in enumerate(answers)
    ]
    return PackAnswered(members, calls.rows)


def answer_pack(
    calls: Calls,
    model: str,
    pack: Callable[[], Packed[A]],
    member: Callable[[Decision, Share[A]], Member],
    *,
    cannot: str,
    left_out: str,
) -> PackOutcome:
    """Build the packed request (a `ValueError` fails the pack as "`cannot`: why"), send it with its answers
    read leniently (workers/steps.py:ask_packed), and share the answer out."""
    try:
        packed = pack()
    except ValueError as exc:
        return Failed(f"{cannot}: {exc}")
    asked = ask_packed(calls, packed.body, model)
    if isinstance(asked, Failed | Transient):
        return asked
    decision, answers = asked
    return share_out(
        calls, decision, packed.answers_of(answers), lambda share: member(decision, share), left_out=left_out
    )
