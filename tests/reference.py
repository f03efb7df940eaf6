"""The reference data every test reads, from `tests/data/` in this repository (docs/spec.md §7).

One loader, so the claims file and the question lists are never copied into test modules by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
CLAIMS_FILE = DATA / "claims.jsonl"
QUESTIONS_FILE = DATA / "reference_questions.json"


def reference_claims() -> list[dict[str, Any]]:
    """The 24 labelled reference claims, in file order."""
    return [json.loads(line) for line in CLAIMS_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


def _questions() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(QUESTIONS_FILE.read_text(encoding="utf-8"))
    return data


def answer_questions() -> list[str]:
    """The five answer-gate reference questions."""
    return [q["question"] for q in _questions()["answer"]]


def answerable_quotes() -> dict[str, tuple[str, ...]]:
    """Quote questions the corpus answers -> strings one of which a correct quote contains."""
    return {
        q["question"]: tuple(q["answer_contains"]) for q in _questions()["quote"] if q["expect"] == "answer"
    }


def unanswerable_quotes() -> list[str]:
    """Quote questions no search result answers."""
    return [q["question"] for q in _questions()["quote"] if q["expect"] == "no_answer"]
