"""The citations kind's pure core: markers, passages and the request, labels and misattribution, metrics,
rows and options (checks/citation_*.py, checks/kinds/citations.py)."""

from __future__ import annotations

import json

import pytest

from checks.answer_split import SplitError
from checks.citation_contracts import (
    CitationCutoffs,
    CitationEntry,
    CitationPassage,
    CitationSource,
    SentencePlan,
    SentenceScore,
)
from checks.citation_markers import cited_sentences
from checks.citation_passages import (
    MAX_CITED_PASSAGES,
    PASSAGE_MAX_CHARS,
    choose_passages,
    chunk_spans,
    decisions_request,
    plan_sentences,
)
from checks.citation_rows import (
    CSV_REFUSAL,
    CitationsValidationError,
    parse_citation_lines,
    validate_citation_rows,
)
from checks.citation_verdicts import add_metrics, judge, metrics_of, relabel
from checks.kinds.citations import parse_options, summarize_job
from checks.options import OptionsError

SOURCES = ["1", "2", "doc-7"]


# --- markers ------------------------------------------------------------------------------------------


def test_markers_name_sources_by_id_in_every_format() -> None:
    text = "Alpha holds [1]. Beta holds [2][doc-7]. Gamma holds [doc-7, 1]. Delta [sic] holds."
    sentences = cited_sentences(text, SOURCES)
    assert [s.cited for s in sentences] == [("1",), ("2", "doc-7"), ("doc-7", "1"), ()]
    assert [s.claim for s in sentences] == [
        "Alpha holds.",
        "Beta holds.",
        "Gamma holds.",
        "Delta [sic] holds.",
    ]
    assert sentences[2].text == "Gamma holds. [doc-7][1]"  # one bracket per id, after the punctuation


def test_a_numeric_marker_naming_no_source_is_missing_not_an_error() -> None:
    (s,) = cited_sentences("Python 3.0 shipped [1, 4][9].", SOURCES)
    assert s.cited == ("1",) and s.missing == ("4", "9")
    (prose,) = cited_sentences("Version [1.5] is out [x-1].", SOURCES)  # not numeric, not a source: text
    assert prose.cited == () and prose.missing == () and prose.claim == "Version [1.5] is out [x-1]."


def test_markers_alone_before_any_sentence_cannot_be_placed() -> None:
    with pytest.raises(SplitError):
        cited_sentences("[1]\n\nThen a sentence.", SOURCES)
    (s,) = cited_sentences("A sentence.\n\n[2]", SOURCES)  # a markers-only paragraph joins the one before
    assert s.cited == ("2",)


# --- passages and the request --------------------------------------------------------------------------


def test_long_sources_are_cut_at_sentence_ends_within_the_limit() -> None:
    text = " ".join(f"Sentence number {n} says something about the topic." for n in range(200))
    spans = chunk_spans(text)
    assert len(spans) > 1 and spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(b - a <= PASSAGE_MAX_CHARS for a, b in spans)
    assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))  # nothing lost or repeated
    assert all(text[b - 2 : b] == ". " for _a, b in spans[:-1])
    assert chunk_spans("x" * 5000) == [(0, 2000), (2000, 4000), (4000, 5000)]  # no space: cut hard


def _source(sid: str, text: str) -> CitationSource:
    return CitationSource(id=sid, text=text)


def test_the_request_asks_support_and_contradiction_of_cited_passages_and_support_of_the_others() -> None:
    sources = [_source("a", "The sky is blue."), _source("b", "Grass is green.")]
    passages, unchecked = choose_passages("The sky is blue.", ["a"], sources, misattribution=True)
    assert [(p.key, p.source, p.role) for p in passages] == [("1", "a", "cited"), ("2", "b", "other")]
    assert unchecked == []
    body = decisions_request("The sky is blue.", passages, "pplx-decider-v1.1-27b")
    assert list(body["questions"]) == ["checkable", "supports_1", "contradicts_1", "supports_2"]  # type: ignore[call-overload]
    assert body["state"] == {
        "claim": "The sky is blue.",
        "passages": {"1": "The sky is blue.", "2": "Grass is green."},
    }
    off, _ = choose_passages("The sky is blue.", ["a"], sources, misattribution=False)
    assert [p.source for p in off] == ["a"]


def test_many_chunks_stay_within_128_questions_every_cited_source_keeping_its_best() -> None:
    long = " ".join(f"Filler sentence {n} about nothing in particular here." for n in range(2000))
    sources = [
        _source("big", long + " The answer is forty two."),
        _source("small", "The answer is forty two."),
    ]
    sources += [_source(f"o{n}", long) for n in range(20)]
    passages, unchecked = choose_passages(
        "The answer is forty two.", ["big", "small"], sources, misattribution=True
    )
    cited = [p for p in passages if p.role == "cited"]
    assert len(cited) == MAX_CITED_PASSAGES and {p.source for p in cited} == {"big", "small"}
    assert any("forty two" in p.text for p in cited if p.source == "big")  # its best chunk was kept
    questions = decisions_request("The answer is forty two.", passages, "m")["questions"]
    assert len(questions) <= 128  # type: ignore[arg-type]
    others = {p.source for p in passages if p.role == "other"}
    assert all(sum(1 for p in passages if p.source == o) <= 2 for o in others)
    assert sorted(others | set(unchecked)) == sorted(f"o{n}" for n in range(20))


# --- labels, misattribution, metrics --------------------------------------------------------------------


def _plan(
    cited: list[str], passages: list[tuple[str, str, str]], missing: list[str] | None = None
) -> SentencePlan:
    return SentencePlan(
        number=1,
        text="Claim.",
        claim="Claim.",
        paragraph=1,
        cited=cited,
        missing=missing or [],
        passages=[
            CitationPassage(key=k, source=s, chunk=1, chunks=1, role=r, text="t") for k, s, r in passages
        ],  # type: ignore[arg-type]
    )


def _score(checkable: float, supports: dict[str, float], contradicts: dict[str, float]) -> SentenceScore:
    return SentenceScore(checkable=checkable, supports=supports, contradicts=contradicts)


CUT = CitationCutoffs()


def test_labels_follow_the_policy_at_the_jobs_cutoffs() -> None:
    plan = _plan(["a"], [("1", "a", "cited")])
    assert judge(plan, _score(0.9, {"1": 0.8}, {"1": 0.1}), CUT).label == "supported"
    assert judge(plan, _score(0.9, {"1": 0.5}, {"1": 0.1}), CUT).label == "weak"
    assert judge(plan, _score(0.9, {"1": 0.2}, {"1": 0.1}), CUT).label == "unsupported"
    assert judge(plan, _score(0.9, {"1": 0.9}, {"1": 0.7}), CUT).label == "contradicted"
    assert judge(plan, _score(0.3, {"1": 0.9}, {"1": 0.1}), CUT).label == "not_checkable"
    strict = CitationCutoffs(supported_min=0.85)
    assert judge(plan, _score(0.9, {"1": 0.8}, {"1": 0.1}), strict).label == "weak"
    uncited = judge(_plan([], [], missing=["9"]), _score(0.9, {}, {}), CUT)
    assert uncited.label == "uncited" and "cites [9] but the row has no source with that id" in (
        uncited.rule or ""
    )


def test_a_source_counts_by_its_best_chunk_and_another_source_flags_misattribution() -> None:
    plan = _plan(["a"], [("1", "a", "cited"), ("2", "a", "cited"), ("3", "b", "other")])
    judged = judge(plan, _score(0.9, {"1": 0.1, "2": 0.3, "3": 0.95}, {"1": 0.0, "2": 0.0}), CUT)
    assert judged.label == "unsupported" and judged.rule and "passage a" in judged.rule
    assert judged.misattributed == ["b"] and judged.supported_by == []
    supported = judge(plan, _score(0.9, {"1": 0.1, "2": 0.92, "3": 0.95}, {"1": 0.0, "2": 0.0}), CUT)
    assert supported.label == "supported" and supported.supported_by == ["a"]
    assert supported.misattributed == []  # its own citation holds: another source agreeing is no news


def test_metrics_follow_their_definitions_and_sum_as_a_micro_average() -> None:
    one = _plan(["a", "b"], [("1", "a", "cited"), ("2", "b", "cited")], missing=["z"])
    two = _plan([], [("1", "a", "other")])
    three = _plan(["a"], [("1", "a", "cited")])
    sentences = [
        judge(one, _score(0.9, {"1": 0.9, "2": 0.1}, {"1": 0.0, "2": 0.0}), CUT),  # supported by a only
        judge(two, _score(0.9, {"1": 0.9}, {}), CUT),  # uncited, but a supports it: misattributed
        judge(three, _score(0.1, {"1": 0.9}, {"1": 0.0}), CUT),  # not checkable: left out of every rate
    ]
    m = metrics_of(sentences)
    assert (m.sentences, m.scored, m.checkable) == (3, 3, 2)
    assert m.citation_recall == 0.5 and m.citations == 3 and m.supporting_citations == 1
    assert m.citation_precision == pytest.approx(1 / 3, abs=1e-4)
    assert m.uncited_rate == 0.5 and m.misattributed == 1 and m.supported_share == 1.0
    total = add_metrics([m, m])
    assert total.checkable == 4 and total.citation_recall == 0.5 and total.labels["uncited"] == 2


def test_relabel_replays_other_cutoffs_from_the_stored_probabilities() -> None:
    plan = _plan(["a"], [("1", "a", "cited")])
    stored = judge(plan, _score(0.9, {"1": 0.5}, {"1": 0.1}), CUT)
    assert stored.label == "weak"
    assert relabel(stored, CitationCutoffs(weak_min=0.6)).label == "unsupported"
    assert relabel(stored, CitationCutoffs(supported_min=0.45)).label == "supported"


def test_plan_sentences_gives_each_sentence_its_passages() -> None:
    entry = CitationEntry(
        answer="A holds [1]. B holds.",
        sources=[_source("1", "A holds."), _source("2", "B holds.")],
    )
    plans = plan_sentences(entry, misattribution=True)
    assert [(p.cited, [(q.source, q.role) for q in p.passages]) for p in plans] == [
        (["1"], [("1", "cited"), ("2", "other")]),
        ([], [("1", "other"), ("2", "other")]),
    ]


# --- rows and options -----------------------------------------------------------------------------------


def _line(row: object) -> bytes:
    return json.dumps(row).encode()


def test_rows_number_sources_without_ids_and_name_each_bad_field() -> None:
    (row,) = parse_citation_lines(
        [_line({"id": "r", "answer": "A [2].", "sources": [{"text": "x"}, {"text": "y"}]})]
    )
    assert [s.id for s in row.entry.sources] == ["1", "2"] and row.entry.question is None
    with pytest.raises(CitationsValidationError) as bad:
        parse_citation_lines(
            [
                _line({"id": "a", "answer": "", "sources": []}),
                _line({"id": "b", "answer": "x", "sources": [{"id": "bad id", "text": "t"}, {"text": 5}]}),
                _line({"id": "c", "answer": "x", "sources": [{"id": "1", "text": "t", "url": "ftp://x"}]}),
                _line({"id": "d", "answer": "x", "sources": "none", "extra": 1}),
            ]
        )
    found = {(e.line, e.field) for e in bad.value.errors}
    assert found == {
        (1, "answer"), (2, "sources[0].id"), (2, "sources[1].text"), (3, "sources[0].url"), (4, "extra"),
        (4, "sources"),
    }  # fmt: skip


def test_row_size_limits_and_csv_records_are_refused() -> None:
    big = {"id": "a", "answer": "x", "sources": [{"text": "y" * 90_000} for _ in range(12)]}
    with pytest.raises(CitationsValidationError) as too_big:
        parse_citation_lines([_line(big)])
    assert "over the limit" in str(too_big.value.errors[0]) and too_big.value.errors[0].field is None
    with pytest.raises(CitationsValidationError) as csv_row:
        parse_citation_lines([None, {"id": "a", "answer": "x"}])
    assert csv_row.value.errors[0].message == CSV_REFUSAL
    with pytest.raises(CitationsValidationError) as items:
        validate_citation_rows(
            [{"id": "a", "answer": "x", "sources": []}, {"id": "a", "answer": "y", "sources": []}]
        )
    assert items.value.errors[0].line == 2 and "duplicate id" in items.value.errors[0].message


def test_options_take_cutoffs_misattribution_and_review_and_refuse_the_rest() -> None:
    opts = parse_options({"supported_min": "0.8", "misattribution": "false", "review": "agent"})
    assert opts.cutoffs.supported_min == 0.8 and opts.misattribution is False and opts.review == "agent"
    assert opts.as_dict()["weak_min"] == 0.4 and "webhook_url" not in opts.as_dict()
    for bad, field in (({"weak_min": 0.9}, "weak_min"), ({"review": "human"}, "review"),
                       ({"misattribution": "maybe"}, "misattribution"), ({"mode": "x"}, "mode"),
                       ({"checkable_min": 2}, "checkable_min")):  # fmt: skip
        with pytest.raises(OptionsError) as exc:
            parse_options(bad)
        assert exc.value.field == field, bad


def test_the_job_summary_sums_each_answers_metrics() -> None:
    plan = _plan(["a"], [("1", "a", "cited")])
    m = metrics_of([judge(plan, _score(0.9, {"1": 0.9}, {"1": 0.0}), CUT)])
    summary = summarize_job(
        [("done", {"sentences": 1, "decisions_requests": 1, "metrics": m.dump(), "cutoffs": CUT.dump()}),
         ("failed", {"sentences": 0}), (None, None)]
    )  # fmt: skip
    assert summary.questions == 3 and summary.outcomes["done"] == 1 and summary.outcomes["failed"] == 1
    assert summary.metrics.checkable == 1 and summary.metrics.citation_recall == 1.0
    assert summary.totals["decisions_requests"] == 1


# --- the simulator judges the caller's passages ---------------------------------------------------------


@pytest.mark.parametrize(
    ("passage", "label"),
    [
        ("The Danube flows through 10 countries on its way to the Black Sea.", "supported"),
        ("The Danube flows through 12 countries on its way to the Black Sea.", "contradicted"),  # a number
        ("The Rhine flows through 10 countries on its way to the Black Sea.", "contradicted"),  # a name
        ("The Louvre in Paris is the most visited museum in the world.", "unsupported"),  # another topic
    ],
)
def test_the_simulator_judges_caller_passages_so_tests_can_build_each_label(passage: str, label: str) -> None:
    from simulator.config import SimConfig
    from simulator.engine import Engine

    claim = "The Danube flows through 10 countries on its way to the Black Sea."
    entry = CitationEntry(answer=f"{claim} [1]", sources=[_source("1", passage)])
    (plan,) = plan_sentences(entry, misattribution=False)
    outcome = Engine(SimConfig()).decide(
        decisions_request(plan.claim, plan.passages, "pplx-decider-v1.1-27b")
    )
    answers = {name: float(a["noul"]) for name, a in outcome.answers.items()}
    score = SentenceScore(
        checkable=answers["checkable"],
        supports={"1": answers["supports_1"]},
        contradicts={"1": answers["contradicts_1"]},
    )
    assert judge(plan, score, CUT).label == label
