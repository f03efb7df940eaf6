"""Packed Decisions requests: several items' questions about one state in one request (docs/spec.md §9).

A Decisions request takes 1 to 128 questions about one state. One request per sentence (or claim) spends
the organisation's 10 requests/s on the sentence count; an answer's sentences share their sources, so their
questions can go together: the state holds every passage once and every sentence as a named claim, and each
question names its claim and its passage. Nothing else changes: the questions are the unpacked request's
texts with "the claim" replaced by "claim s3", every sentence keeps its own questions (never split across
requests), and each answer maps back to exactly one item and one of its questions.

Pure: no I/O. The workers post these bodies; `jobs/` stores what comes back per item.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import JsonValue

from checks.answer_requests import CHECKABLE_QUESTION, MAX_QUESTIONS, contradicts_question, supports_question
from checks.citation_contracts import CitationPassage, SentencePlan
from checks.contracts import StoredContract
from checks.quotes import (
    BEST_QUESTION,
    HAS_ANSWER_CRITERIA,
    HAS_ANSWER_QUESTION,
    MAX_SENTENCES,
    MIN_SENTENCES,
    SourceResult,
)

__all__ = [
    "AUDIT_STAGE",
    "DEFAULT_AUDIT_SHARE",
    "INPUT_TOKEN_BUDGET",
    "MAX_PACK_SIZE",
    "PackAnswerError",
    "PackPlace",
    "PackedClaims",
    "PackedRanks",
    "PackedSentences",
    "SentenceAnswers",
    "answer_plan",
    "claim_key",
    "flash_warning",
    "group_sentences",
    "is_flash",
    "pack_claims",
    "pack_ranks",
    "pack_sentences",
    "result_key",
    "sentence_key",
    "sentence_questions",
    "split_count",
    "unpacked_answers",
]

# The stage of a packed sentence asked again alone, for the packing audit (checks/packing_audit.py): its
# requests always reach the upstream and are never kept for reuse.
AUDIT_STAGE: Final = "audit_sentence"
MAX_PACK_SIZE: Final = MAX_QUESTIONS  # one question per item at the least
DEFAULT_AUDIT_SHARE: Final = 0.02
# The upstream's input limit is 262,144 tokens; a pack stops well below it, counted as the gateway counts
# (about four bytes of UTF-8 a token), so a surprise in the tokenizer cannot turn a pack into a 400.
INPUT_TOKEN_BUDGET: Final = 160_000
_BYTES_PER_TOKEN: Final = 4
# What every question adds to the body besides its passage (its name, type and instruction text).
_QUESTION_BYTES: Final = 220

QuestionKind = Literal["checkable", "supports", "contradicts", "is_true"]


class PackAnswerError(ValueError):
    """A packed answer that cannot be read back (a question missing or of another type)."""


def split_count(total: int, n: int) -> list[int]:
    """`total` as `n` whole shares that add up to it (the remainder to the first)."""
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def sentence_key(number: int) -> str:
    """The name of sentence `number` in a packed state: `s3`."""
    return f"s{number}"


def claim_key(index: int) -> str:
    """The name of the pack's `index`-th claim (0-based) in a packed claims state: `c1`, `c2`, ..."""
    return f"c{index + 1}"


def is_flash(model: str) -> bool:
    return "flash" in model


def flash_warning(model: str, pack_size: int) -> str | None:
    """The job's warning when a flash model runs packed, in the words of its model card."""
    if pack_size <= 1 or not is_flash(model):
        return None
    return (
        f"{model} packs up to {pack_size} items a request: its model card says the flash decider is more "
        "accurate with one question per request on most multi-question tasks. Check the job's packing "
        "audit (label agreement with unpacked answers), or set pack_size 1."
    )


# --- sentences (citations, answer) ----------------------------------------------------------------------


def sentence_questions(plan: SentencePlan) -> int:
    """How many questions the sentence asks: `checkable`, `supports_k` per passage, `contradicts_k` per
    cited passage (as its unpacked request, checks/citation_passages.py:decisions_request)."""
    return 1 + len(plan.passages) + sum(1 for p in plan.passages if p.role == "cited")


def _passage_id(p: CitationPassage) -> tuple[str, int, str]:
    return (p.source, p.chunk, p.text)


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def group_sentences(plans: Sequence[SentencePlan], pack_size: int) -> list[list[int]]:
    """Indexes of `plans` grouped into packs, in order: at most `pack_size` sentences, 128 questions and
    INPUT_TOKEN_BUDGET tokens (each distinct passage counted once) a pack; a sentence never splits."""
    packs: list[list[int]] = []
    current: list[int] = []
    questions = 0
    size = 0
    seen: set[tuple[str, int, str]] = set()
    for index, plan in enumerate(plans):
        asks = sentence_questions(plan)
        new = [p for p in plan.passages if _passage_id(p) not in seen]
        adds = _bytes(plan.claim) + sum(_bytes(p.text) for p in new) + asks * _QUESTION_BYTES
        fits = (
            len(current) < pack_size
            and questions + asks <= MAX_QUESTIONS
            and (size + adds) // _BYTES_PER_TOKEN <= INPUT_TOKEN_BUDGET
        )
        if current and not fits:
            packs.append(current)
            current, questions, size, seen = [], 0, 0, set()
            new = list(plan.passages)
            adds = _bytes(plan.claim) + sum(_bytes(p.text) for p in new) + asks * _QUESTION_BYTES
        current.append(index)
        questions += asks
        size += adds
        seen.update(_passage_id(p) for p in new)
    if current:
        packs.append(current)
    return packs


def _checkable_text(key: str) -> str:
    return (
        f"Is claim {key} a factual statement that could be verified against a source? "
        "Opinions, transitions, and questions are not checkable."
    )


def _supports_text(passage: str, key: str) -> str:
    return (
        f"Does passage {passage} state or directly imply claim {key}? "
        "Being about the same topic is not support; the passage has to back the specific claim."
    )


def _contradicts_text(passage: str, key: str) -> str:
    return f"Does passage {passage} state something that cannot be true if claim {key} is true?"


@dataclass(frozen=True)
class PackedQuestion:
    """Where one question's answer goes: the pack's `member`-th item, which of its questions, and for a
    passage question the passage key of that item's own plan."""

    member: int
    kind: QuestionKind
    passage: str | None = None


@dataclass(frozen=True)
class SentenceAnswers:
    """One sentence's probabilities, keyed as its own unpacked request keys them."""

    checkable: float
    supports: dict[str, float]
    contradicts: dict[str, float]


@dataclass(frozen=True)
class PackedSentences:
    """A packed request of sentences and how to read its answers back."""

    body: dict[str, object]
    questions: Mapping[str, PackedQuestion]
    members: int

    def answers_of(self, answers: Mapping[str, float]) -> list[SentenceAnswers | None]:
        """Each member's probabilities from the answers by question name (noul p); None for a member one
        of whose questions has no answer (it is asked again on its own)."""
        got: list[dict[QuestionKind, dict[str | None, float]]] = [{} for _ in range(self.members)]
        missing: set[int] = set()
        for name, q in self.questions.items():
            if name not in answers:
                missing.add(q.member)
                continue
            got[q.member].setdefault(q.kind, {})[q.passage] = answers[name]
        out: list[SentenceAnswers | None] = []
        for member, by_kind in enumerate(got):
            if member in missing or None not in by_kind.get("checkable", {}):
                out.append(None)
                continue
            out.append(
                SentenceAnswers(
                    checkable=by_kind["checkable"][None],
                    supports={str(k): v for k, v in by_kind.get("supports", {}).items()},
                    contradicts={str(k): v for k, v in by_kind.get("contradicts", {}).items()},
                )
            )
        return out


def answer_plan(number: int, claim: str, passages: Mapping[str, str]) -> SentencePlan:
    """An answer kind's sentence (docs/spec.md §3.3) as a sentence to pack: every passage it cites is
    asked `supports` and `contradicts`, as its unpacked request asks, keyed by its marker number."""
    return SentencePlan(
        number=number,
        text=claim,
        claim=claim,
        paragraph=1,
        cited=list(passages),
        missing=[],
        passages=[
            CitationPassage(key=key, source=key, chunk=1, chunks=1, role="cited", text=text)
            for key, text in passages.items()
        ],
    )


def unpacked_answers(got: SentenceAnswers) -> dict[str, float]:
    """A packed sentence's probabilities named as its unpacked request names them (`checkable`,
    `supports_<n>`, `contradicts_<n>`), so the label policy reads it as an unpacked one."""
    out = {CHECKABLE_QUESTION: got.checkable}
    for key, p in got.supports.items():
        out[supports_question(key)] = p
        if key in got.contradicts:
            out[contradicts_question(key)] = got.contradicts[key]
    return out


def pack_sentences(plans: Sequence[SentencePlan], model: str) -> PackedSentences:
    """One Decisions request for `plans` (one answer's sentences): every distinct passage once in the
    state (numbered in order of first use), every sentence as claim `s<number>`, and per sentence the
    questions of its unpacked request, named `s<number>_<question>`."""
    if not plans:
        raise ValueError("a pack needs at least one sentence")
    passages: dict[tuple[str, int, str], str] = {}
    state_passages: dict[str, str] = {}
    claims: dict[str, str] = {}
    questions: dict[str, dict[str, str]] = {}
    index: dict[str, PackedQuestion] = {}
    for member, plan in enumerate(plans):
        if not plan.claim.strip():
            raise ValueError(f"sentence {plan.number}: the claim is empty")
        key = sentence_key(plan.number)
        if key in claims:
            raise ValueError(f"sentence {plan.number} twice in one pack")
        claims[key] = plan.claim
        name = f"{key}_checkable"
        questions[name] = {"type": "noul", "instructions": _checkable_text(key)}
        index[name] = PackedQuestion(member, "checkable")
        for p in plan.passages:
            ident = _passage_id(p)
            if ident not in passages:
                passages[ident] = str(len(passages) + 1)
                state_passages[passages[ident]] = p.text
            g = passages[ident]
            name = f"{key}_supports_{g}"
            questions[name] = {"type": "noul", "instructions": _supports_text(g, key)}
            index[name] = PackedQuestion(member, "supports", p.key)
            if p.role == "cited":
                name = f"{key}_contradicts_{g}"
                questions[name] = {"type": "noul", "instructions": _contradicts_text(g, key)}
                index[name] = PackedQuestion(member, "contradicts", p.key)
    if len(questions) > MAX_QUESTIONS:
        raise ValueError(f"{len(questions)} questions; a Decisions request takes at most {MAX_QUESTIONS}")
    body: dict[str, object] = {
        "model": model,
        "state": {"claims": claims, "passages": state_passages},
        "questions": questions,
    }
    return PackedSentences(body=body, questions=index, members=len(plans))


# --- claims (ungrounded) ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackedClaims:
    """A packed request of ungrounded claims: the claims numbered in the state, one truth question each."""

    body: dict[str, object]
    names: tuple[str, ...]  # the question name of each member, in member order

    def answers_of(self, answers: Mapping[str, float]) -> list[float | None]:
        return [answers.get(name) for name in self.names]


def pack_claims(claims: Sequence[str], model: str) -> PackedClaims:
    """One ungrounded Decisions request for several claims (never grounded: the search query is built from
    the question text and the start of the state, docs/spec.md §1.2, so packed claims would share one)."""
    if not claims:
        raise ValueError("a pack needs at least one claim")
    if len(claims) > MAX_QUESTIONS:
        raise ValueError(f"{len(claims)} claims; a Decisions request takes at most {MAX_QUESTIONS}")
    state = {claim_key(i): c for i, c in enumerate(claims)}
    names = tuple(f"{claim_key(i)}_is_true" for i in range(len(claims)))
    questions = {
        name: {"type": "noul", "instructions": f"Is claim {claim_key(i)} true?"}
        for i, name in enumerate(names)
    }
    return PackedClaims(
        body={"model": model, "state": {"claims": state}, "questions": questions}, names=names
    )


# --- quote ranks ------------------------------------------------------------------------------------------


def result_key(index: int) -> str:
    """The name of search result `index` (1-based) in a packed rank state: `r3`. Not "result 3": a number
    after a noun reads as a sentence number in the rank questions' own numbering."""
    return f"r{index}"


def _best_text(key: str) -> str:
    return (
        f"Which numbered sentence of result {key} most directly answers the question? "
        "Prefer a sentence that states the answer itself over one that only mentions the topic."
    )


def _has_answer_text(key: str) -> str:
    return f"Does at least one of the numbered sentences of result {key} answer the question?"


@dataclass(frozen=True)
class PackedRanks:
    """A packed rank request: one question's search results, each with its own choice and yes/no pair."""

    body: dict[str, object]
    keys: tuple[str, ...]  # each member's result key, in member order

    def answers_of(
        self, answers: Mapping[str, Mapping[str, JsonValue]]
    ) -> list[dict[str, dict[str, JsonValue]] | None]:
        """Each member's raw answers (in the API's JSON shape) named as its unpacked rank request names them
        (`best`, `has_answer`); None for a member with either missing (it is asked again on its own)."""
        out: list[dict[str, dict[str, JsonValue]] | None] = []
        for key in self.keys:
            best = answers.get(f"{key}_{BEST_QUESTION}")
            has = answers.get(f"{key}_{HAS_ANSWER_QUESTION}")
            out.append(
                None
                if best is None or has is None
                else {BEST_QUESTION: dict(best), HAS_ANSWER_QUESTION: dict(has)}
            )
        return out


def pack_ranks(question: str, results: Sequence[SourceResult], model: str) -> PackedRanks:
    """One Decisions request for several results' rank requests (docs/spec.md §4.3): every result's
    source and numbered sentences in one state under `r<index>`, and per result the unpacked request's
    `best` choice (its sentences as options) and `has_answer` yes/no, named `r<index>_best` and
    `r<index>_has_answer`, their texts naming the result."""
    if not results:
        raise ValueError("a pack needs at least one result")
    state: dict[str, object] = {}
    questions: dict[str, object] = {}
    keys: list[str] = []
    for result in results:
        if not MIN_SENTENCES <= len(result.sentences) <= MAX_SENTENCES:
            raise ValueError(
                f"result {result.index}: a rank request needs {MIN_SENTENCES}-{MAX_SENTENCES} sentences, "
                f"got {len(result.sentences)}"
            )
        key = result_key(result.index)
        if key in state:
            raise ValueError(f"result {result.index} twice in one pack")
        numbered = {str(n): text for n, text in enumerate(result.sentences, start=1)}
        state[key] = {"source": {"title": result.title, "url": result.url}, "sentences": numbered}
        questions[f"{key}_{BEST_QUESTION}"] = {
            "type": "choice",
            "instructions": _best_text(key),
            "criteria": dict(numbered),
        }
        questions[f"{key}_{HAS_ANSWER_QUESTION}"] = {
            "type": "noul",
            "instructions": _has_answer_text(key),
            "criteria": dict(HAS_ANSWER_CRITERIA),
        }
        keys.append(key)
    body: dict[str, object] = {
        "model": model,
        "state": {"question": question, "results": state},
        "questions": questions,
    }
    return PackedRanks(body=body, keys=tuple(keys))


def input_bytes(body: Mapping[str, object]) -> int:
    """The body's size as sent (compact JSON): what the token estimate of a pack is counted from."""
    return len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


class PackPlace(StoredContract):
    """Where a packed item was answered (its output's `pack`): the pack's head item, its size, and the
    item's 0-based position in it."""

    head: int
    size: int
    position: int

    @classmethod
    def of(cls, output: Mapping[str, object] | None) -> PackPlace | None:
        found = (output or {}).get("pack")
        return cls.read(found) if isinstance(found, Mapping) else None


@dataclass(frozen=True)
class RequestTally:
    """Decisions requests behind a report's rows: those sent upstream and those answered from the tenant's
    verdict store instead (docs/spec.md §10). A report's `decisions_requests` counts the sent ones only."""

    sent: int = 0
    reused: int = 0

    def __add__(self, other: RequestTally) -> RequestTally:
        return RequestTally(self.sent + other.sent, self.reused + other.reused)


def tally_requests(answered: Sequence[tuple[Mapping[str, object] | None, bool]]) -> RequestTally:
    """The requests that answered some items, from each item's (output, answered from the store): a pack
    once (by its head), an unpacked item each. A pack is reused whole or sent (docs/spec.md §10)."""
    sent: set[int] = set()
    reused: set[int] = set()
    alone = RequestTally()
    for output, from_store in answered:
        place = PackPlace.of(output)
        if place is None or place.size <= 1:
            alone += RequestTally(0, 1) if from_store else RequestTally(1, 0)
        else:
            (reused if from_store else sent).add(place.head)
    return alone + RequestTally(len(sent), len(reused))
