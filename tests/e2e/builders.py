"""Finished jobs for the page tests and the browser test, built without workers.

Jobs are created through the API (so intake, options and warnings are real), then their items are
settled through the jobs/ state functions a worker uses (claim → finish/fail, api_calls rows in the
same transaction) and the job is finalized with jobs.finalize.maybe_finalize. Outputs have the shape
workers/claims.py stores. `simulated_outcomes` asks the bundled simulator's engine for the answers,
so screenshots show real (simulated) probabilities and sources, not numbers typed into a test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from checks import claims as claim_rules
from jobs.finalize import maybe_finalize
from jobs.items import claim_item, fail_item, finish_item
from jobs.records import CallRow
from models import Item, session_scope
from tests.reference import reference_claims

MODEL = "pplx-decider-latest"  # claims jobs' default model
QUESTIONS_MODEL = "pplx-decider-v1.1-27b"  # answer and quote jobs' default: their cutoffs were measured on it

# (custom_id, mode) -> the item's output dict, or ("failed", error)
Outcomes = dict[tuple[str, str], Any]


def reference_rows() -> list[dict[str, Any]]:
    """The 24 reference claims (docs/spec.md §7), with their labels."""
    return reference_claims()


def claim_output(
    p: float,
    request_id: str,
    *,
    sources: Sequence[dict[str, Any]] = (),
    input_tokens: int = 100,
    latency_s: float = 0.12,
) -> dict[str, Any]:
    """An item output as workers/claims.py stores it."""
    return {
        "p": p,
        "verdict": claim_rules.verdict(p),
        "request_id": request_id,
        "request_ids": [request_id],
        "attempts": 1,
        "latency_s": latency_s,
        "input_tokens": input_tokens,
        "output_tokens": 1,
        "model": MODEL,
        "n_search_results": len(sources),
        "sources": list(sources),
    }


def simulated_outcomes(rows: Sequence[dict[str, Any]], modes: Sequence[str]) -> Outcomes:
    """Ask the simulator engine every claim in every mode, as a worker would over HTTP."""
    from simulator.config import SimConfig
    from simulator.engine import Engine

    engine = Engine(SimConfig())
    out: Outcomes = {}
    for n, row in enumerate(rows, start=1):
        for mode in modes:
            body = claim_rules.request_body(row["claim"], model=MODEL, mode=mode)  # type: ignore[arg-type]
            decision = engine.decide(body)
            p = float(decision.answers[claim_rules.QUESTION_NAME]["noul"])
            sources = [
                {
                    "title": r.get("title"),
                    "url": r.get("url"),
                    "date": r.get("date"),
                    "snippet": r.get("snippet"),
                }
                for r in decision.search_results or []
            ]
            rid = f"sim-{mode[0]}{n:03d}-{uuid.uuid4().hex[:8]}"
            out[(row["id"], mode)] = claim_output(
                p,
                rid,
                sources=sources,
                input_tokens=decision.input_tokens,
                latency_s=0.21 if sources else 0.09,
            )
    return out


def settle(sessions: sessionmaker[Session], job_id: str | uuid.UUID, outcomes: Outcomes) -> None:
    """Finish (or fail) the job's items with `outcomes`, each with one api_calls row."""
    jid = uuid.UUID(str(job_id))
    with session_scope(sessions) as session:
        items = list(session.scalars(select(Item).where(Item.job_id == jid).order_by(Item.position)))
        for item in items:
            outcome = outcomes.get((item.custom_id, item.mode))
            if outcome is None:
                continue
            claimed = claim_item(session, item.id, lease_s=300)
            assert claimed is not None, (item.custom_id, item.mode)
            grounded = item.mode == "grounded"
            if isinstance(outcome, tuple) and outcome[0] == "failed":
                rid = f"req-{item.custom_id}-{item.mode}"
                call = CallRow(
                    endpoint="decisions",
                    attempt=1,
                    status_code=500,
                    request_id=rid,
                    latency_ms=50.0,
                    error=outcome[1],
                )
                fail_item(session, claimed, outcome[1], [call], {"request_ids": [rid]})
                continue
            call = CallRow(
                endpoint="decisions",
                attempt=1,
                status_code=200,
                request_id=outcome["request_id"],
                latency_ms=outcome["latency_s"] * 1000,
                model=MODEL,
                input_tokens=outcome["input_tokens"],
                searches=1 if grounded else 0,
                search_results=len(outcome["sources"]),
                cost_usd=outcome["input_tokens"] * 0.02 / 1e6 + (0.001 if grounded else 0.0),
            )
            finish_item(session, claimed, outcome, [call])


def finalize(sessions: sessionmaker[Session], job_id: str | uuid.UUID) -> None:
    with session_scope(sessions) as session:
        assert maybe_finalize(session, uuid.UUID(str(job_id)))


def submit_claims(
    post: Callable[..., Any], headers: dict[str, str], rows: Sequence[dict[str, Any]], **options: Any
) -> str:
    """Create a claims job through POST /v1/jobs; returns its id."""
    resp = post("/v1/jobs", json={"kind": "claims", "options": options, "items": list(rows)}, headers=headers)
    assert resp.status_code == 202, resp.get_data(as_text=True)[:500]
    job_id: str = resp.get_json()["id"]
    return job_id


# --- answer and quote jobs with stored reports ---------------------------------------------------------
# Reports in the documented shape (docs/spec.md §6, built by jobs/answers.py and
# jobs/quotes.py). The page tests store them on the question items, as jobs.stages.advance_question does,
# so a test controls every string that reaches the page (including injection payloads).


def submit_questions(
    post: Callable[..., Any],
    headers: dict[str, str],
    kind: str,
    questions: Sequence[tuple[str, str]],
    options: dict[str, Any] | None = None,
) -> str:
    items = [{"id": cid, "question": q} for cid, q in questions]
    resp = post("/v1/jobs", json={"kind": kind, "items": items, "options": options or {}}, headers=headers)
    assert resp.status_code == 202, resp.get_data(as_text=True)[:500]
    job_id: str = resp.get_json()["id"]
    return job_id


def store_reports(sessions: sessionmaker[Session], job_id: str | uuid.UUID, reports: dict[str, Any]) -> None:
    """Settle each question item with its report (custom_id -> report, or ("failed", error))."""
    jid = uuid.UUID(str(job_id))
    with session_scope(sessions) as session:
        items = list(
            session.scalars(
                select(Item).where(Item.job_id == jid, Item.parent_id.is_(None)).order_by(Item.position)
            )
        )
        for item in items:
            report = reports.get(item.custom_id)
            if report is None:
                continue
            claimed = claim_item(session, item.id, lease_s=300)
            assert claimed is not None, item.custom_id
            rid = f"{item.custom_id}-agent"
            call = CallRow(endpoint="agent", attempt=1, status_code=200, request_id=rid, latency_ms=900.0)
            output = {
                "report": report,
                "report_status": report.get("status"),
                "summary": report.get("summary"),
                "children": {},
            }
            if isinstance(report, dict) and report.get("status") == "failed" and report.get("final") is None:
                fail_item(session, claimed, str(report.get("error")), [call], output)
            else:
                finish_item(session, claimed, output, [call])


def answer_report(question: str, *, text: str = "", title: str = "", url: str = "") -> dict[str, Any]:
    """An answer report where every step ran: a supported sentence, a weak one replaced by a supported
    rewrite, an uncited one not confirmed (its rewrite was not supported either). `text`, `title` and
    `url` are spliced into sentences, passages and sources."""
    url = url or "https://www.nobelprize.org/prizes/physics/2024/summary/"
    title = title or "The Nobel Prize in Physics 2024"
    passage = f"John J. Hopfield and Geoffrey Hinton won the 2024 Nobel Prize in Physics. {text}".strip()
    s1 = "John J. Hopfield and Geoffrey Hinton won the 2024 Nobel Prize in Physics."
    s1 = f"{s1} {text}" if text else s1
    return {
        "kind": "answer",
        "question": question,
        "status": "done",
        "error": None,
        "errors": [],
        "incomplete_steps": [],
        "built_at": "2026-01-01T00:00:00+00:00",
        "model": QUESTIONS_MODEL,
        "cutoffs_model": QUESTIONS_MODEL,
        "model_note": None,
        "agent": {
            "text": f"{s1}[1] The prize was announced in 2023[2]. It is often called a turning point.",
            "request_id": "agent-req-1",
            "request_ids": ["agent-req-1"],
            "input_tokens": 420,
            "results": [{"id": 1, "url": url, "title": title, "snippet": passage, "date": "2024-10-08"}],
        },
        "final": {
            "sentences": [
                {
                    "text": s1,
                    "paragraph": 1,
                    "label": "supported",
                    "citations": [1],
                    "origin": 1,
                    "replaced": False,
                    "outcome": None,
                    "investigation_error": None,
                },
                {
                    "text": "The prize was announced on October 8, 2024.",
                    "paragraph": 1,
                    "label": "supported",
                    "citations": [2],
                    "origin": 2,
                    "replaced": True,
                    "outcome": "replaced",
                    "investigation_error": None,
                },
                {
                    "text": "It is often called a turning point.",
                    "paragraph": 2,
                    "label": "uncited",
                    "citations": [],
                    "origin": 3,
                    "replaced": False,
                    "outcome": "not confirmed",
                    "investigation_error": None,
                },
            ],
            "paragraphs": [[0, 1], [2]],
            "sources": [
                {"number": 1, "url": url, "title": title},
                {
                    "number": 2,
                    "url": "https://www.kva.se/en/news/nobel-physics-2024/",
                    "title": "Press release",
                },
            ],
        },
        "evidence": [
            {
                "role": "original",
                "number": 1,
                "rewrite_number": None,
                "custom_id": "q:s1",
                "text": s1 + "[1]",
                "claim": s1,
                "paragraph": 1,
                "status": "done",
                "label": "supported",
                "rule": "passage 1 supports 0.981 ≥ 0.7",
                "checkable": 0.99,
                "passages": [
                    {
                        "id": "1",
                        "text": passage,
                        "url": url,
                        "title": title,
                        "supports": 0.981,
                        "contradicts": 0.012,
                    }
                ],
                "missing_ids": [],
                "request_id": "dec-req-1",
                "request_ids": ["dec-req-1"],
                "input_tokens": 250,
                "error": None,
                "outcome": None,
                "investigation": None,
            },
            {
                "role": "original",
                "number": 2,
                "rewrite_number": None,
                "custom_id": "q:s2",
                "text": "The prize was announced in 2023.[2]",
                "claim": "The prize was announced in 2023.",
                "paragraph": 1,
                "status": "done",
                "label": "weak",
                "rule": "best support 0.420 (passage 2) < 0.7",
                "checkable": 0.97,
                "passages": [
                    {
                        "id": "2",
                        "text": "The academy announces prizes in October.",
                        "url": "https://www.kva.se/en/news/nobel-physics-2024/",
                        "title": "Press release",
                        "supports": 0.42,
                        "contradicts": 0.31,
                    }
                ],
                "missing_ids": [7],
                "request_id": "dec-req-2",
                "request_ids": ["dec-req-2"],
                "input_tokens": 230,
                "error": None,
                "outcome": "replaced",
                "investigation": {
                    "status": "done",
                    "custom_id": "q:i2",
                    "text": "The prize was announced on October 8, 2024.[1]",
                    "request_id": "agent-req-2",
                    "request_ids": ["agent-req-2"],
                    "error": None,
                },
            },
            {
                "role": "rewrite",
                "number": 2,
                "rewrite_number": 1,
                "custom_id": "q:i2",
                "text": "The prize was announced on October 8, 2024.[1]",
                "claim": "The prize was announced on October 8, 2024.",
                "paragraph": 1,
                "status": "done",
                "label": "supported",
                "rule": "passage 1 supports 0.964 ≥ 0.7",
                "checkable": 0.98,
                "passages": [
                    {
                        "id": "1",
                        "text": "On 8 October 2024 the academy announced the physics prize.",
                        "url": "https://www.kva.se/en/news/nobel-physics-2024/",
                        "title": "Press release",
                        "supports": 0.964,
                        "contradicts": 0.02,
                    }
                ],
                "missing_ids": [],
                "request_id": "dec-req-3",
                "request_ids": ["dec-req-3"],
                "input_tokens": 210,
                "error": None,
                "used": True,
            },
            {
                "role": "rewrite",
                "number": 2,
                "rewrite_number": 2,
                "custom_id": "q:i2",
                "text": "Reporters were surprised.",
                "claim": "Reporters were surprised.",
                "paragraph": 1,
                "status": "done",
                "label": "not_checkable",
                "rule": "checkable 0.210 < 0.5",
                "checkable": 0.21,
                "passages": [],
                "missing_ids": [],
                "request_id": "dec-req-4",
                "request_ids": ["dec-req-4"],
                "input_tokens": 90,
                "error": None,
                "used": False,
            },
            {
                "role": "original",
                "number": 3,
                "rewrite_number": None,
                "custom_id": "q:s3",
                "text": "It is often called a turning point.",
                "claim": "It is often called a turning point.",
                "paragraph": 2,
                "status": "done",
                "label": "uncited",
                "rule": "checkable 0.700, no usable citation",
                "checkable": 0.7,
                "passages": [],
                "missing_ids": [],
                "request_id": "dec-req-5",
                "request_ids": ["dec-req-5"],
                "input_tokens": 80,
                "error": None,
                "outcome": "not confirmed",
                "investigation": {
                    "status": "done",
                    "custom_id": "q:i3",
                    "text": "Commentators called the prize a turning point for the field.",
                    "request_id": "agent-req-3",
                    "request_ids": ["agent-req-3"],
                    "error": None,
                },
            },
            {
                "role": "rewrite",
                "number": 3,
                "rewrite_number": 1,
                "custom_id": "q:i3",
                "text": "Commentators called the prize a turning point for the field.",
                "claim": "Commentators called the prize a turning point for the field.",
                "paragraph": 1,
                "status": "done",
                "label": "uncited",
                "rule": "checkable 0.810, no usable citation",
                "checkable": 0.81,
                "passages": [],
                "missing_ids": [],
                "request_id": "dec-req-6",
                "request_ids": ["dec-req-6"],
                "input_tokens": 70,
                "error": None,
                "used": False,
            },
        ],
        "summary": {
            "sentences": 3,
            "investigated": 2,
            "replaced": 1,
            "not_confirmed": 1,
            "not_reviewed": 0,
            "decisions_requests": 6,
            "decisions_input_tokens": 930,
            "agent_calls": 3,
            "seconds": 4.2,
            "before": {"supported": 1, "weak": 1, "uncited": 1},
            "after": {"supported": 2, "uncited": 1},
            "failed_sentences": 0,
            "failed_investigations": 0,
            "incomplete_steps": {},
        },
        "request_ids": {
            "agent": ["agent-req-1", "agent-req-2", "agent-req-3"],
            "decisions": ["dec-req-1", "dec-req-2", "dec-req-3", "dec-req-4", "dec-req-5", "dec-req-6"],
        },
    }


def incomplete_answer_report(question: str, error: str) -> dict[str, Any]:
    """`answer_report` with the investigation of sentence 3 failed: the question is incomplete, sentence 3
    keeps its label without a review outcome, and the report names the failed step."""
    report = answer_report(question)
    evidence = [row for row in report["evidence"] if not (row["role"] == "rewrite" and row["number"] == 3)]
    evidence[-1] = {
        **evidence[-1],
        "outcome": None,
        "investigation": {
            "status": "failed",
            "custom_id": "q:i3",
            "text": None,
            "request_id": "agent-req-3",
            "request_ids": ["agent-req-3"],
            "error": error,
        },
    }
    final = report["final"]
    sentences = [
        *final["sentences"][:2],
        {**final["sentences"][2], "outcome": None, "investigation_error": error},
    ]
    return {
        **report,
        "status": "incomplete",
        "errors": [f"investigation of sentence 3 failed: {error}"],
        "incomplete_steps": [
            {
                "step": "investigate",
                "sentence": 3,
                "status": "failed",
                "error": error,
                "request_ids": ["agent-req-3"],
                "message": f"the investigation of sentence 3 did not finish (failed: {error})",
            }
        ],
        "final": {**final, "sentences": sentences},
        "evidence": evidence,
        "summary": {
            **report["summary"],
            "investigated": 1,
            "not_confirmed": 0,
            "decisions_requests": 5,
            "decisions_input_tokens": 860,
            "failed_investigations": 1,
            "incomplete_steps": {"investigate": 1},
        },
    }


def failed_answer_report(question: str, error: str) -> dict[str, Any]:
    return {
        "kind": "answer",
        "question": question,
        "status": "failed",
        "error": error,
        "errors": [],
        "incomplete_steps": [],
        "built_at": "2026-01-01T00:00:00+00:00",
        "model": QUESTIONS_MODEL,
        "cutoffs_model": QUESTIONS_MODEL,
        "model_note": None,
        "agent": None,
        "final": None,
        "evidence": [],
        "summary": {
            "sentences": 0,
            "investigated": 0,
            "replaced": 0,
            "not_confirmed": 0,
            "not_reviewed": 0,
            "decisions_requests": 0,
            "decisions_input_tokens": 0,
            "agent_calls": 1,
            "seconds": 0.4,
            "before": {},
            "after": {},
            "failed_sentences": 0,
            "failed_investigations": 0,
            "incomplete_steps": {},
        },
        "request_ids": {"agent": [], "decisions": []},
    }


def _quote_candidate(
    text: str, title: str, url: str, index: int, p_answers: float | None, has: float
) -> dict[str, Any]:
    return {
        "text": text,
        "title": title,
        "url": url,
        "date": "2024-01-22",
        "result_index": index,
        "p_answers": p_answers,
        "has_answer": has,
        "p_best": 0.99,
        "confidence": 0.98,
        "rank_request_id": f"rank-{index}",
        "compare_request_id": "compare-1" if p_answers is not None else None,
    }


def quote_report(
    question: str, *, quoted: bool = True, text: str = "", title: str = "", url: str = ""
) -> dict[str, Any]:
    """A quote report where every step ran: three results (one without a usable sentence, one ranked low),
    one compared candidate, and a quote (or a closest candidate)."""
    url = url or "https://www.britannica.com/science/human-skeleton"
    title = title or "How many bones are in the human body?"
    best = f"The adult human body has 206 bones.{(' ' + text) if text else ''}"
    p_answers = 0.98 if quoted else 0.43
    candidate = _quote_candidate(best, title, url, 1, p_answers, 0.97 if quoted else 0.45)
    results = [
        {
            "index": 1,
            "title": title,
            "url": url,
            "date": "2024-01-22",
            "sentence_count": 2,
            "sentences": [best, "A newborn baby has around 270 bones, some of which fuse."],
            "status": "done",
            "best": {"number": 1, "text": best},
            "has_answer": candidate["has_answer"],
            "p_best": 0.99,
            "confidence": 0.98,
            "probabilities": {"1": 0.99, "2": 0.01},
            "request_id": "rank-1",
            "request_ids": ["rank-1"],
            "input_tokens": 300,
            "error": None,
            "compared": True,
        },
        {
            "index": 2,
            "title": "Skeletal system overview",
            "url": "https://my.clevelandclinic.org/skeleton",
            "date": None,
            "sentence_count": 0,
            "sentences": [],
            "status": "not_ranked",
            "best": None,
            "has_answer": None,
            "p_best": None,
            "confidence": None,
            "probabilities": {},
            "request_id": None,
            "request_ids": [],
            "input_tokens": None,
            "error": None,
            "compared": False,
        },
        {
            "index": 3,
            "title": "Bones quiz",
            "url": "https://example.org/quiz",
            "date": "2023-05-01",
            "sentence_count": 1,
            "sentences": ["Test your knowledge of the human skeleton with our quiz."],
            "status": "done",
            "best": {"number": 1, "text": "Test your knowledge of the human skeleton with our quiz."},
            "has_answer": 0.04,
            "p_best": 1.0,
            "confidence": 0.95,
            "probabilities": {"1": 1.0},
            "request_id": "rank-3",
            "request_ids": ["rank-3"],
            "input_tokens": 110,
            "error": None,
            "compared": False,
        },
    ]
    return {
        "kind": "quote",
        "question": question,
        "status": "quoted" if quoted else "no_answer",
        "error": None,
        "errors": [],
        "incomplete_steps": [],
        "built_at": "2026-01-01T00:00:00+00:00",
        "model": QUESTIONS_MODEL,
        "cutoffs_model": QUESTIONS_MODEL,
        "model_note": None,
        "quote": candidate if quoted else None,
        "closest": None if quoted else candidate,
        "closest_by": None if quoted else "answers",
        "results": results,
        "compare": {
            "status": "done",
            "request_id": "compare-1",
            "request_ids": ["compare-1"],
            "input_tokens": 110,
            "error": None,
            "candidates": [
                {
                    "number": 1,
                    "result_index": 1,
                    "title": title,
                    "url": url,
                    "sentence": best,
                    "has_answer": candidate["has_answer"],
                    "p_answers": p_answers,
                    "rank": 1,
                }
            ],
        },
        "cutoffs": {"compare_min": 0.3, "quote_min": 0.6},
        "search": {"request_id": "search-1", "request_ids": ["search-1"], "error": None},
        "run": {},
        "summary": {
            "decisions_requests": 3,
            "failed_requests": 0,
            "search_requests": 1,
            "input_tokens": 520,
            "seconds": 1.9,
            "incomplete_steps": {},
        },
        "request_ids": ["search-1", "rank-1", "rank-3", "compare-1"],
    }


def incomplete_quote_report(question: str, error: str) -> dict[str, Any]:
    """`quote_report` with the rank request of result 3 failed: the run stopped before the compare step,
    so nothing is quoted; the results ranked so far are kept and the report names the missing steps."""
    report = quote_report(question)
    failed = {
        **report["results"][2],
        "status": "failed",
        "best": None,
        "has_answer": None,
        "p_best": None,
        "confidence": None,
        "probabilities": {},
        "input_tokens": None,
        "error": error,
    }
    compare_message = "no compare request was sent, because not every result was ranked"
    return {
        **report,
        "status": "incomplete",
        "errors": [f"result 3 failed: {error}"],
        "incomplete_steps": [
            {
                "step": "rank",
                "result": 3,
                "status": "failed",
                "error": error,
                "request_ids": ["rank-3"],
                "message": f"the rank request of result 3 did not finish (failed: {error})",
            },
            {
                "step": "compare",
                "status": "not_started",
                "error": None,
                "request_ids": [],
                "message": compare_message,
            },
        ],
        "quote": None,
        "closest": None,
        "closest_by": None,
        "compare": None,
        "results": [{**report["results"][0], "compared": False}, report["results"][1], failed],
        "summary": {
            **report["summary"],
            "decisions_requests": 2,
            "failed_requests": 1,
            "input_tokens": 300,
            "incomplete_steps": {"rank": 1, "compare": 1},
        },
        "request_ids": ["search-1", "rank-1", "rank-3"],
    }


def failed_quote_report(question: str, error: str) -> dict[str, Any]:
    return {
        "kind": "quote",
        "question": question,
        "status": "failed",
        "error": error,
        "errors": [],
        "incomplete_steps": [],
        "built_at": "2026-01-01T00:00:00+00:00",
        "model": QUESTIONS_MODEL,
        "cutoffs_model": QUESTIONS_MODEL,
        "model_note": None,
        "quote": None,
        "closest": None,
        "closest_by": None,
        "results": [],
        "compare": None,
        "cutoffs": {"compare_min": 0.3, "quote_min": 0.6},
        "search": {"request_id": None, "request_ids": [], "error": error},
        "run": {},
        "summary": {
            "decisions_requests": 0,
            "failed_requests": 0,
            "search_requests": 1,
            "input_tokens": 0,
            "seconds": 0.1,
            "incomplete_steps": {},
        },
        "request_ids": [],
    }
