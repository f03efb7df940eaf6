"""Packed answer sentences (docs/spec.md §9, the answer rows): the option, how an answer's sentences are
grouped into packs, the packed request's shape, and how a packed answer maps back to each sentence's own
verdict, with sentences whose answers are missing asked again alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from checks import answers as gate
from checks.answer_contracts import AnswerQuestionOutput, SentenceSpec, SentenceVerdict
from checks.options import OptionsError, parse_questions_options
from checks.packing import answer_plan, pack_sentences, unpacked_answers
from clients.results import Answer, Decision
from jobs import answers as answer_jobs
from jobs.intake import UnitSpec
from jobs.records import ClaimedItem
from models import Item, Job
from workers.answers import handle_investigation, handle_sentence_pack, score_pack, score_sentence
from workers.outcomes import AskAlone, Done, PackAnswered
from workers.steps import Calls

MODEL = "pplx-decider-v1.1-27b"
TOWER = "The Eiffel Tower was completed in 1889 and stands 330 metres tall."
RIVER = "The Danube flows through ten countries."


def _spec(
    number: int, claim: str, passages: dict[str, str], missing: list[int] | None = None
) -> SentenceSpec:
    return SentenceSpec(
        number=number,
        text=f"{claim} " + " ".join(f"[{k}]" for k in passages),
        claim=claim,
        paragraph=1,
        source_ids=[int(k) for k in passages],
        passages=passages,
        urls={k: f"https://example.org/{k}" for k in passages},
        missing_ids=missing or [],
    )


SPECS = [
    _spec(1, "The Eiffel Tower was completed in 1889.", {"1": TOWER}),
    _spec(2, "The Danube flows through ten countries.", {"2": RIVER, "1": TOWER}),
    _spec(3, "That is remarkable.", {}),
]


def test_answer_and_quote_take_pack_size_default_one_and_refuse_bad_values() -> None:
    assert parse_questions_options(None).pack_size == 1
    assert parse_questions_options({"pack_size": "8"}).pack_size == 8
    for bad in (0, 129, 2.5, "x"):
        with pytest.raises(OptionsError) as err:
            parse_questions_options({"pack_size": bad})
        assert err.value.field == "pack_size"


def test_an_answers_sentences_pack_in_the_citations_shape_each_passage_once() -> None:
    packed = pack_sentences([answer_plan(s.number, s.claim, s.passages) for s in SPECS], "m")
    state = packed.body["state"]
    assert state == {
        "claims": {"s1": SPECS[0].claim, "s2": SPECS[1].claim, "s3": SPECS[2].claim},
        "passages": {"1": TOWER, "2": RIVER},
    }
    questions = packed.body["questions"]
    assert isinstance(questions, dict)
    assert list(questions) == [
        "s1_checkable",
        "s1_supports_1",
        "s1_contradicts_1",
        "s2_checkable",
        "s2_supports_2",
        "s2_contradicts_2",
        "s2_supports_1",
        "s2_contradicts_1",
        "s3_checkable",
    ]
    assert questions["s2_supports_2"]["instructions"] == (
        "Does passage 2 state or directly imply claim s2? "
        "Being about the same topic is not support; the passage has to back the specific claim."
    )
    # each answer maps back to the sentence's own unpacked question names
    answers = {name: 0.5 + i / 100 for i, name in enumerate(questions)}
    got = packed.answers_of(answers)
    assert got[1] is not None
    assert unpacked_answers(got[1]) == {
        "checkable": answers["s2_checkable"],
        "supports_2": answers["s2_supports_2"],
        "contradicts_2": answers["s2_contradicts_2"],
        "supports_1": answers["s2_supports_1"],
        "contradicts_1": answers["s2_contradicts_1"],
    }
    unpacked = gate.sentence_request(SPECS[1].claim, SPECS[1].passages, "m")
    assert set(unpacked_answers(got[1])) == set(unpacked["questions"])


def _question(pack_size_specs: list[SentenceSpec]) -> Item:
    output = AnswerQuestionOutput(kind="answer", sentences=pack_size_specs).dump()
    return Item(id=7, custom_id="q1", stage="question", status="done", input={}, output=output)


def test_sentence_units_pack_an_answers_sentences_only_when_the_job_packs() -> None:
    question = _question(SPECS)
    assert [u.pack for u in answer_jobs.sentence_units(question)] == [None, None, None]
    assert [u.pack for u in answer_jobs.sentence_units(question, 8)] == [0, 0, 0]
    assert [u.pack for u in answer_jobs.sentence_units(question, 2)] == [0, 0, None]
    # items stay items: one per sentence, inputs as unpacked
    assert [u.input for u in answer_jobs.sentence_units(question, 8)] == [
        u.input for u in answer_jobs.sentence_units(question)
    ]


# --- the worker side, against a fake Decisions client ---------------------------------------------------


def _probability(name: str) -> float:
    """A fixed answer per unpacked question: what an unpacked and a packed request both get."""
    if name.endswith("checkable"):
        return 0.9
    if "supports" in name:
        return 0.8 if name.rsplit("_", 1)[-1] == "1" else 0.2
    return 0.05


@dataclass
class FakeClient:
    """Answers every question (a packed `sN_` prefix taken off) except those `leave_out` names."""

    leave_out: Callable[[str], bool] = lambda name: False
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def decide(self, body: dict[str, Any], *, partial: bool = False) -> Decision:
        self.bodies.append(body)
        packed = "claims" in body["state"]
        answers: dict[str, Answer] = {}
        for name in body["questions"]:
            if self.leave_out(name):
                continue
            unpacked = name.split("_", 1)[1] if packed else name
            if packed:
                # passage numbers of a packed state are its own; map back through the passage text
                kind, _, number = unpacked.partition("_")
                text = body["state"]["passages"].get(number, "")
                unpacked = f"{kind}_{'1' if text == TOWER else '2'}" if number else kind
            answers[name] = Answer(type="noul", noul=_probability(unpacked))
        return Decision(answers=answers, input_tokens=101, output_tokens=7, search_results=[], model="m")


def _calls(client: FakeClient, options: dict[str, Any] | None = None) -> Calls:
    item = _claimed(0, {}, options)
    return Calls(ctx=None, item=item, client=client)  # type: ignore[arg-type]


def _claimed(item_id: int, input_: dict[str, Any], options: dict[str, Any] | None = None) -> ClaimedItem:
    return ClaimedItem(
        id=item_id,
        job_id=None,  # type: ignore[arg-type]
        tenant_id=None,  # type: ignore[arg-type]
        stage="sentence",
        mode="sentence",
        custom_id=f"q1:s{item_id}",
        input=input_,
        options={"model": MODEL, "reuse": "none", **(options or {})},  # no verdict store here
        token=1,
        dedupe_key=None,
        kind="answer",
    )


def test_a_packed_sentence_gets_the_verdict_its_unpacked_request_gives() -> None:
    client = FakeClient()
    packed = score_pack(_calls(client), SPECS, MODEL)
    assert len(client.bodies) == 1
    for spec, verdict in zip(SPECS, packed.verdicts, strict=True):
        assert isinstance(verdict, SentenceVerdict)
        alone = score_sentence(_calls(FakeClient()), spec, MODEL)
        assert (verdict.label, verdict.rule, verdict.supports, verdict.contradicts, verdict.answers) == (
            alone.label,
            alone.rule,
            alone.supports,
            alone.contradicts,
            alone.answers,
        )
    # each sentence carries its share of the request's tokens; the shares add up
    assert sum(v.input_tokens or 0 for v in packed.verdicts if isinstance(v, SentenceVerdict)) == 101


def test_sentences_whose_answers_are_missing_are_asked_again_alone() -> None:
    client = FakeClient(leave_out=lambda name: name.startswith("s2_supports"))
    items = [_claimed(i, s.dump()) for i, s in enumerate(SPECS, start=1)]
    outcome = handle_sentence_pack(None, items, _calls(client))  # type: ignore[arg-type]
    assert isinstance(outcome, PackAnswered)
    kinds = [type(m) for m in outcome.members]
    assert kinds == [Done, AskAlone, Done]


def test_an_investigation_packs_its_rewrite_sentences_when_the_job_packs() -> None:
    rewrite = "The Eiffel Tower was completed in 1889 [1]. The Danube flows through ten countries [2]."
    results = [
        {"id": 1, "url": "https://example.org/1", "title": "t", "snippet": TOWER},
        {"id": 2, "url": "https://example.org/2", "title": "r", "snippet": RIVER},
    ]

    class AgentClient(FakeClient):
        def agent(self, body: dict[str, Any]) -> Any:
            from clients.results import AgentAnswer, SearchResult

            return AgentAnswer(text=rewrite, results=[SearchResult(**r) for r in results])  # type: ignore[arg-type]

    inp = {"question": "Q?", "answer_text": "A.", "sentence_number": 1, "claim": "A.", "label": "weak"}
    outputs = []
    for pack_size, leave_out in ((1, None), (8, None), (8, "s2_checkable")):
        client = AgentClient(leave_out=(lambda n, x=leave_out: n == x))
        item = _claimed(9, inp)
        outcome = handle_investigation(None, item, _calls(client), pack_size=pack_size)  # type: ignore[arg-type]
        assert isinstance(outcome, Done)
        sentences = outcome.output["sentences"]
        outputs.append([(s["label"], s["answers"]) for s in sentences])
        decide_bodies = [b for b in client.bodies if "questions" in b]
        if pack_size == 1:
            assert len(decide_bodies) == 2 and all("pack" not in s for s in sentences)
        elif leave_out is None:
            assert len(decide_bodies) == 1
            assert [s["pack"] for s in sentences] == [
                {"first": 1, "size": 2, "position": 0},
                {"first": 1, "size": 2, "position": 1},
            ]
        else:  # the sentence left out is asked again on its own
            assert len(decide_bodies) == 2 and "pack" not in sentences[1]
    assert outputs[0] == outputs[1] == outputs[2]


@pytest.mark.parametrize("kind", ["answer", "quote"])
def test_a_flash_model_packed_earns_the_jobs_warning(kind: str) -> None:
    import jobs.kinds.answer
    import jobs.kinds.quote  # noqa: F401
    from checks.questions import QuestionRow
    from jobs.kinds import KINDS

    part = KINDS.find(kind)
    assert part is not None
    rows = [QuestionRow("a", "Why?")]
    flash = parse_questions_options({"model": "pplx-decider-flash-v1.2", "pack_size": 5})
    assert "model card" in " ".join(part.units(rows, flash)[1])
    assert part.units(rows, parse_questions_options({"model": "pplx-decider-flash-v1.2"}))[1] == []
    assert part.units(rows, parse_questions_options({"pack_size": 5}))[1] == []


def _settled(units: list[UnitSpec], reused: bool = False) -> list[Item]:
    """The sentence items of `units` once answered: a packed one says where (its output's `pack`), and,
    with `reused`, that its request was answered from the verdict store."""
    heads: dict[int, int] = {}
    items = []
    for n, unit in enumerate(units):
        output: dict[str, Any] = {"label": "supported", "checkable": 0.9}
        if unit.pack is not None:
            head = heads.setdefault(unit.pack, n + 1)
            size = sum(1 for u in units if u.pack == unit.pack)
            output["pack"] = {"head": head, "size": size, "position": n + 1 - head}
        if reused:
            output["reused_from"] = {"request_id": "req-old", "answered_at": "2026-01-01T00:00:00+00:00"}
        items.append(
            Item(id=n + 1, stage=unit.stage, custom_id=unit.custom_id, status="done", input=unit.input,
                 output=output)
        )  # fmt: skip
    return items


def test_an_audited_packed_answer_asks_its_packed_sentences_again_alone() -> None:
    question = _question(SPECS)
    question.position = 0
    units = answer_jobs.sentence_units(question, 2)
    audits = [
        u for u in answer_jobs.audit_units(question, _settled(units), 0.02) if u.stage == "audit_sentence"
    ]
    assert [u.custom_id for u in audits] == ["q1:a1", "q1:a2"]  # the packed ones, not sentence 3
    assert [u.input for u in audits] == [u.input for u in units[:2]] and all(u.pack is None for u in audits)
    assert not [
        u for u in answer_jobs.audit_units(question, _settled(units), 0.0) if u.stage == "audit_sentence"
    ]
    unpacked = _settled(answer_jobs.sentence_units(question, 1))
    assert not [u for u in answer_jobs.audit_units(question, unpacked, 1.0) if u.stage == "audit_sentence"]
    question.position = 1  # every 50th answer from the first
    assert not [
        u for u in answer_jobs.audit_units(question, _settled(units), 0.02) if u.stage == "audit_sentence"
    ]


def _job(options: dict[str, Any]) -> Job:
    return Job(kind="answer", options=options)


def test_the_audit_is_planned_once_the_packs_answered_and_only_for_packs_sent_upstream() -> None:
    """docs/spec.md §9.6 and §10: the sentences are planned alone; once they settled, the packed ones a
    request sent upstream are asked again — never those answered from the verdict store, and only once."""
    question = _question(SPECS)
    question.position, question.input = 0, {"kind": "answer", "question": "Who built the bridge?"}
    job = _job({"pack_size": 2, "audit_share": 1.0})
    first = answer_jobs.plan(job, question, [])
    assert [u.stage for u in first] == ["sentence"] * 3
    sent = _settled(first)
    assert [u.custom_id for u in answer_jobs.plan(job, question, sent)] == ["q1:a1", "q1:a2"]
    assert answer_jobs.plan(job, question, _settled(first, reused=True)) == []
    audit = Item(
        id=9, stage="audit_sentence", custom_id="q1:a1", status="done", input=sent[0].input, output={}
    )
    assert answer_jobs.plan(job, question, [*sent, audit]) == []  # planned once
    failed = [sent[0], Item(**{**_columns(sent[1]), "status": "failed"}), sent[2]]
    assert [u.custom_id for u in answer_jobs.plan(job, question, failed)] == ["q1:a1"]


def _columns(item: Item) -> dict[str, Any]:
    return {k: getattr(item, k) for k in ("id", "stage", "custom_id", "status", "input", "output")}


def test_answer_jobs_take_audit_share_stored_only_when_given() -> None:
    assert "audit_share" not in parse_questions_options({"pack_size": 4}).as_dict()
    assert parse_questions_options({"audit_share": "0.5"}).as_dict()["audit_share"] == 0.5
    with pytest.raises(OptionsError) as err:
        parse_questions_options({"audit_share": 2})
    assert err.value.field == "audit_share"
