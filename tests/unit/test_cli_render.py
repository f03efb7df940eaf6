"""The CLI's plain-text renderings: the claims table, the scorecard lines, answers and quotes."""

from __future__ import annotations

from typing import Any

from checks import claims as claim_rules
from checks.kinds import answer as answer_kind
from checks.kinds import quote as quote_kind
from checks.kinds.answer import AnswerResult
from checks.kinds.claims import ClaimResult
from checks.kinds.quote import QuoteResult
from cli.render import (
    GROUNDED_NOTE,
    claim_modes,
    claims_table,
    scorecard_lines,
)
from cli.render import answer_lines as render_answer
from cli.render import quote_lines as render_quote
from cli.render import request_ids as line_request_ids


def _line(kind: str, line: dict[str, Any]) -> AnswerResult | QuoteResult:
    """A results line as jobs/ builds it (the contract the CLI reads), from a line-shaped dict of the test."""
    report = line.get("report")
    if report is not None:
        report = {"kind": kind, **report}
        if "request_ids" in line:
            report["request_ids"] = line["request_ids"]
    build = answer_kind.result_line if kind == "answer" else quote_kind.result_line
    return build(line.get("custom_id", "q1"), line["question"], line.get("status", "done"), report)


def answer_lines(line: dict[str, Any]) -> list[str]:
    return render_answer(_line("answer", line))  # type: ignore[arg-type]


def quote_lines(line: dict[str, Any]) -> list[str]:
    return render_quote(_line("quote", line))  # type: ignore[arg-type]


def request_ids(line: dict[str, Any]) -> list[str]:
    return line_request_ids(_line("answer", line))


def _result(cid: str, label: bool | None, **modes: tuple[str, float | None, str | None]) -> ClaimResult:
    return ClaimResult.model_validate(
        {
            "custom_id": cid,
            "label": label,
            "results": {m: {"status": s, "p": p, "verdict": v} for m, (s, p, v) in modes.items()},
        }
    )


ROWS = [
    _result("s01", True, ungrounded=("done", 0.99, "supported"), grounded=("done", 0.98, "supported")),
    _result("r01", True, ungrounded=("done", 0.08, "contradicted"), grounded=("done", 1.0, "supported")),
    _result("r02", False, ungrounded=("failed", None, None), grounded=("done", 0.5, "review")),
    _result("x1", None, ungrounded=("pending", None, None), grounded=("done", 0.01, "contradicted")),
]


def test_claims_table_one_row_per_claim_with_each_mode_and_flips() -> None:
    lines = claims_table(ROWS, ["ungrounded", "grounded"], kinds={"s01": "stable", "r01": "recent"})
    header, *rows = lines
    assert header.split() == [
        "id",
        "kind",
        "label",
        "p_ungrounded",
        "verdict_ungrounded",
        "p_grounded",
        "verdict_grounded",
    ]
    assert len(rows) == 4
    assert rows[0].split() == ["s01", "stable", "true", "0.99", "supported", "0.98", "supported"]
    # A verdict change between modes is a flip; a failed or unfinished mode is not.
    assert rows[1].split()[-1] == "flip" and "contradicted" in rows[1]
    assert rows[2].split() == ["r02", "false", "-", "failed", "0.50", "review"]
    assert rows[3].split() == ["x1", "-", "-", "pending", "0.01", "contradicted"]


def test_claims_table_columns_line_up() -> None:
    header, *rows = claims_table(ROWS, ["ungrounded", "grounded"])
    col = header.index("verdict_grounded")
    for row in rows:
        # Every row's grounded verdict starts in the header's column, whatever the ids' widths.
        assert row[col - 1] == " " and row[col] != " "
        assert row[col:].split()[0] in ("supported", "review", "contradicted")


def test_claims_table_without_kinds_and_with_a_row_limit() -> None:
    lines = claims_table(ROWS, ["grounded"], limit=2)
    assert lines[0].split() == ["id", "label", "p_grounded", "verdict_grounded"]
    assert len(lines) == 1 + 2 + 1
    assert lines[-1].startswith("… 2 more claims")


def _scorecard(mode: str, outcomes: list[claim_rules.Outcome]) -> dict[str, Any]:
    return claim_rules.scorecard(outcomes, mode=mode, model="pplx-decider-latest").as_dict()  # type: ignore[arg-type]


def test_scorecard_lines_show_every_bound_and_acceptance() -> None:
    true_claims = [claim_rules.Outcome(f"t{i}", True, 0.95, input_tokens=100, latency_s=0.5, attempts=1,
                                       search_results=5, queue_wait_s=1.25) for i in range(19)]  # fmt: skip
    contradicted = claim_rules.Outcome("t19", True, 0.05, input_tokens=100, latency_s=0.5, attempts=1)
    grounded = _scorecard("grounded", [*true_claims, contradicted])
    ungrounded = _scorecard("ungrounded", [claim_rules.Outcome(f"t{i}", True, 0.1) for i in range(20)])
    summary = {
        "scorecards": {"grounded": grounded, "ungrounded": ungrounded},
        "flips": [{"id": f"t{i}"} for i in range(19)],
        "outside_query": 1,
    }
    lines = scorecard_lines(summary)
    assert lines[0] == "claim text in the search query: 19 of 20"
    # Ungrounded first, as in the table.
    assert lines[1].startswith("ungrounded correct 0/20  wrong 20  review 0 (0%, bound 25%)")
    assert "false contradictions 20 (bound 5%)" in lines[1] and "flips 19" in lines[1]
    assert lines[2].endswith("acceptance not met")
    assert lines[3].startswith("grounded   correct 19/20  wrong 1")
    assert "false contradictions 1 (bound 5%)" in lines[3]  # 1 of 20 is exactly 5 %: within the bound
    assert "mean search results 4.8" in lines[4] and "grounded attempts 20" in lines[4]
    # Upstream latency and our own queue are two figures (the failed claim waited nothing).
    assert "mean latency 0.50 s  queue wait 1.19 s" in lines[4]
    assert lines[4].endswith("acceptance met")
    assert lines[-1] == GROUNDED_NOTE


def test_scorecard_lines_without_labels_say_so() -> None:
    card = _scorecard(
        "ungrounded", [claim_rules.Outcome("a", None, 0.9), claim_rules.Outcome("b", None, 0.1)]
    )
    lines = scorecard_lines({"scorecards": {"ungrounded": card}})
    assert lines[0].startswith("ungrounded supported 1  contradicted 1  review 0 of 2")
    assert "no labels" in lines[0]
    assert lines[1].endswith("acceptance n/a")
    assert GROUNDED_NOTE not in lines


def test_scorecard_lines_count_errors() -> None:
    card = _scorecard(
        "ungrounded", [claim_rules.Outcome("a", True, 0.9), claim_rules.Outcome("b", True, None, error="x")]
    )
    first = scorecard_lines({"scorecards": {"ungrounded": card}})[0]
    assert "errors 1" in first


def test_claim_modes_follow_the_job_option() -> None:
    assert claim_modes({"options": {"mode": "both"}}) == ["ungrounded", "grounded"]
    assert claim_modes({"options": {"mode": "ungrounded"}}) == ["ungrounded"]
    assert claim_modes({"options": {}}) == ["grounded"]


ANSWER_LINE = {
    "custom_id": "q1",
    "question": "What did JWST find on K2-18b?",
    "status": "done",
    "request_ids": {"agent": ["ag-1"], "decisions": ["d-1", "d-2"]},
    "report": {
        "status": "done",
        "errors": [],
        "incomplete_steps": [],
        "model_note": None,
        "final": {
            "sentences": [
                {"text": "It found methane.", "label": "supported", "citations": [1], "outcome": None},
                {
                    "text": "It has an ocean.",
                    "label": "supported",
                    "citations": [2, 1],
                    "outcome": "replaced",
                },
                {"text": "Life is likely.", "label": "uncited", "citations": [], "outcome": "not confirmed"},
            ],
            "paragraphs": [[0, 1, 2]],
            "sources": [
                {"number": 1, "url": "https://a.example", "title": "A"},
                {"number": 2, "url": "https://b.example", "title": ""},
            ],
        },
        "summary": {
            "sentences": 3,
            "investigated": 2,
            "replaced": 1,
            "decisions_requests": 5,
            "decisions_input_tokens": 12345,
            "seconds": 2.5,
            "before": {"supported": 1, "weak": 1, "uncited": 1},
            "after": {"supported": 2, "uncited": 1},
        },
    },
}


def test_answer_lines_label_every_sentence_and_list_sources() -> None:
    out = answer_lines(ANSWER_LINE)
    assert out[0] == "question: What did JWST find on K2-18b?"
    assert " 1. [supported] It found methane. [1]" in out
    assert " 2. [supported, replaced] It has an ocean. [2][1]" in out
    assert " 3. [uncited, not confirmed] Life is likely." in out
    assert "  [1] A https://a.example" in out and "  [2] https://b.example" in out
    assert any(
        line.startswith("sentences 3  investigated 2  replaced 1") and "12,345" in line for line in out
    )
    assert "labels before review: supported 1, weak 1, uncited 1; after: supported 2, uncited 1" in out
    assert not any("INCOMPLETE" in line or line.startswith("note:") for line in out)
    assert request_ids(ANSWER_LINE) == ["ag-1", "d-1", "d-2"]


def test_answer_lines_for_an_incomplete_question_say_what_is_missing() -> None:
    report = dict(ANSWER_LINE["report"])  # type: ignore[arg-type]
    report["status"] = "incomplete"
    report["errors"] = ["sentence 3 failed: timeout"]
    report["final"] = {
        **report["final"],
        "sentences": [
            *report["final"]["sentences"][:2],
            {"text": "Life is likely.", "label": None, "citations": [], "outcome": None},
        ],
    }
    missing = "sentence 3 was not scored (failed: timeout)"
    report["incomplete_steps"] = [
        {"step": "score", "sentence": 3, "status": "failed", "message": missing},
        {"step": "review", "status": "not_started", "message": "no investigation was started"},
    ]
    out = answer_lines({**ANSWER_LINE, "report": report})
    assert out[1:4] == [
        "INCOMPLETE: not every step ran, so this is not a checked answer.",
        "  missing: sentence 3 was not scored (failed: timeout)",
        "  missing: no investigation was started",
    ]
    assert "answer so far (not every sentence scored or reviewed):" in out
    assert " 3. [not scored] Life is likely." in out
    assert not any(line.startswith("warning:") for line in out)  # the steps say it once


def test_answer_and_quote_lines_note_a_model_the_cutoffs_were_not_measured_on() -> None:
    note = "The cutoffs were measured on pplx-decider-v1.1-27b; this job used pplx-decider-latest, ..."
    report = {**ANSWER_LINE["report"], "model_note": note}  # type: ignore[dict-item]
    assert f"note: {note}" in answer_lines({**ANSWER_LINE, "report": report})
    quoted = {"status": "quoted", "quote": QUOTE, "model_note": note}
    assert f"note: {note}" in quote_lines({"question": "Q", "report": quoted})


def test_answer_lines_for_a_failed_question() -> None:
    out = answer_lines(
        {"question": "Q?", "status": "failed", "report": {"status": "failed", "error": "agent 500"}}
    )
    assert out == ["question: Q?", "no checked answer (failed): agent 500"]


QUOTE = {"text": "An adult human body typically has 206 bones.", "title": "Skeleton", "url": "https://s.example",
         "date": "2024-01-22", "p_answers": 0.998, "has_answer": 0.97}  # fmt: skip


def test_quote_lines_print_the_quote_exactly_with_its_source() -> None:
    summary = {"decisions_requests": 6, "search_requests": 1, "input_tokens": 4177, "seconds": 2.1}
    report = {"status": "quoted", "quote": QUOTE, "summary": summary}
    line = {"question": "How many bones?", "request_ids": ["s-1", "r-1"], "report": report}
    out = quote_lines(line)
    assert out[1] == 'quote: "An adult human body typically has 206 bones."'
    assert out[2] == "  Skeleton (2024-01-22)" and out[3] == "  https://s.example"
    assert out[4] == "p(answers) 0.998  has_answer 0.970"
    assert "input tokens 4,177" in out[5]
    assert request_ids(line) == ["s-1", "r-1"]


def test_quote_lines_without_an_answer_show_the_closest_below_the_cutoff() -> None:
    closest = {**QUOTE, "p_answers": 0.536, "date": None}
    out = quote_lines({"question": "Rivets?", "report": {"status": "no_answer", "closest": closest,
                                                         "cutoffs": {"quote_min": 0.6}}})  # fmt: skip
    assert out[1] == "no search result answers the question"
    assert out[2].startswith("closest (below the 0.6 cutoff, 0.536): ")
    assert out[3] == "  Skeleton"


def test_quote_lines_for_an_incomplete_question_quote_nothing_and_show_the_ranked_candidates() -> None:
    results = [
        {"index": 1, "best": {"number": 1, "text": QUOTE["text"]}, "has_answer": 0.97},
        {"index": 2, "best": None, "has_answer": None, "status": "failed"},
    ]
    missing = "the rank request of result 2 did not finish"
    steps = [
        {"step": "rank", "result": 2, "status": "failed", "message": missing},
        {"step": "compare", "status": "not_started", "message": "no compare request was sent"},
    ]
    report = {"status": "incomplete", "quote": None, "results": results, "incomplete_steps": steps,
              "errors": ["result 2 failed: 500"]}  # fmt: skip
    out = quote_lines({"question": "How many bones?", "report": report})
    assert out[1:4] == [
        "INCOMPLETE: not every step ran, so nothing is quoted.",
        "  missing: the rank request of result 2 did not finish",
        "  missing: no compare request was sent",
    ]
    assert out[4] == "candidates ranked so far (none compared, none quoted):"
    assert out[5] == f'  result 1 (has_answer 0.970): "{QUOTE["text"]}"'
    assert not any(line.startswith(("quote:", "no search result", "warning:")) for line in out)
