"""The row formats a `citations` job reads: factgate's own, RAGAS samples and DeepEval test cases
(docs/spec.md §8.1).

A team evaluating its RAG pipeline with RAGAS or DeepEval keeps its rows in their shape; we read them as
they are instead of asking for a rewrite:

- **RAGAS** (`SingleTurnSample`, `EvaluationDataset.to_jsonl`): `user_input`, `response`,
  `retrieved_contexts`, optional `reference`; the pre-0.2 names `question`, `answer`, `contexts`,
  `ground_truth` are read too.
- **DeepEval** (`LLMTestCase` / `Golden`, `EvaluationDataset.save_as("json")`): `input`, `actual_output`,
  `retrieval_context`, optional `expected_output`, `context`, `name`.

Their contexts become the row's sources, numbered "1", "2", ... by position (what `[1]` markers name), the
question is kept for `review: agent`, and the reference (expected) answer is accepted but not used: we
judge the response against what was retrieved, not against a gold answer. A row id is DeepEval's `name` or
RAGAS's `id` when given, else `row-<line>`.

A format is decided once per body, by the first row (`detect`), or named by the `input_format` option; every
later row is read in that format, and its errors name its fields (`retrieved_contexts[1]`). Pure; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "CONTAINER_KEYS",
    "DEEPEVAL",
    "FORMATS",
    "INPUT_FORMATS",
    "RAGAS",
    "Document",
    "ForeignFormat",
    "InputFormat",
    "detect",
    "format_note",
    "other_format",
    "read_document",
]

InputFormat = Literal["factgate", "ragas", "deepeval"]
INPUT_FORMATS: Final = ("auto", "factgate", "ragas", "deepeval")
TITLES: Final[Mapping[str, str]] = {"factgate": "factgate", "ragas": "RAGAS", "deepeval": "DeepEval"}
# The keys a JSON document holding a list of rows may keep it under (DeepEval's dataset exports and ours).
CONTAINER_KEYS: Final = ("test_cases", "goldens", "items", "samples")


@dataclass(frozen=True)
class ForeignFormat:
    """Where a format keeps what a citations row needs. Each role lists its field names, the current one
    first (older names after it); `ignored` are fields of the format we accept and do not use."""

    name: InputFormat
    answer: tuple[str, ...]
    contexts: tuple[str, ...]
    question: tuple[str, ...]
    row_id: tuple[str, ...]
    ignored: tuple[str, ...]

    @property
    def title(self) -> str:
        return TITLES[self.name]

    @property
    def fields(self) -> tuple[str, ...]:
        return (*self.row_id, *self.question, *self.answer, *self.contexts, *self.ignored)


RAGAS: Final = ForeignFormat(
    name="ragas",
    answer=("response", "answer"),
    contexts=("retrieved_contexts", "contexts"),
    question=("user_input", "question"),
    row_id=("id",),
    ignored=(
        "reference",
        "ground_truth",
        "ground_truths",
        "reference_contexts",
        "retrieved_context_ids",
        "reference_context_ids",
        "multi_responses",
        "rubrics",
        "persona_name",
        "query_style",
        "query_length",
    ),
)
DEEPEVAL: Final = ForeignFormat(
    name="deepeval",
    answer=("actual_output",),
    contexts=("retrieval_context",),
    question=("input",),
    row_id=("name",),
    ignored=(
        "expected_output",
        "context",
        "additional_metadata",
        "comments",
        "source_file",
        "tools_called",
        "expected_tools",
        "tags",
        "token_cost",
        "completion_time",
    ),
)
FORMATS: Final[Mapping[str, ForeignFormat]] = {"ragas": RAGAS, "deepeval": DEEPEVAL}
# The fields that tell a format apart (`question` and `answer` are ours and old RAGAS's alike).
_MARKS: Final[Mapping[InputFormat, frozenset[str]]] = {
    "factgate": frozenset({"sources"}),
    "ragas": frozenset(
        {"user_input", "response", "retrieved_contexts", "contexts", "reference", "ground_truth"}
    ),
    "deepeval": frozenset({"input", "actual_output", "retrieval_context", "expected_output", "context"}),
}


def detect(obj: object) -> InputFormat:
    """The format a row is in, by the fields that tell them apart (the most such fields wins; factgate's
    own when none does, so a row of ours missing its `sources` is refused in our field names)."""
    if not isinstance(obj, dict):
        return "factgate"
    keys = set(obj)
    best: InputFormat = "factgate"
    best_hits = len(keys & _MARKS["factgate"])
    others: tuple[InputFormat, ...] = ("ragas", "deepeval")
    for name in others:
        hits = len(keys & _MARKS[name])
        if hits > best_hits:
            best, best_hits = name, hits
    return best


def other_format(obj: object, body_format: InputFormat) -> InputFormat | None:
    """The format a row is plainly in when it is not the body's (it has a field only that one has)."""
    if not isinstance(obj, dict):
        return None
    found = detect(obj)
    if found == body_format or not set(obj) & _MARKS[found]:
        return None
    return found


def format_note(input_format: str, *, detected: bool, answers: int, unmarked: int) -> str | None:
    """What the job says about how its rows were read (a warning line on the job, its page and the CLI);
    None for factgate's own rows, which need no note."""
    if input_format not in FORMATS:
        return None
    spec = FORMATS[input_format]
    how = "detected" if detected else "input_format"
    note = (
        f"rows read as {spec.title} ({how}): {spec.answer[0]} is the answer, {spec.contexts[0]} its "
        f'sources "1", "2", … in order'
    )
    if unmarked:
        note += (
            f"; {unmarked:,} of {answers:,} answers have no [n] markers, so each of their sentences is "
            "checked against every source of its row (not counted as uncited)"
        )
    return note


@dataclass(frozen=True)
class Document:
    """A file's rows: NDJSON lines as they are, or the items of a JSON array or of a JSON object's list
    (`container` names that list's key: errors name rows by it)."""

    shape: Literal["ndjson", "json"]
    lines: list[bytes]
    items: list[object]
    container: str | None = None


def read_document(data: bytes) -> Document:
    """Tell an NDJSON file from one JSON document holding the rows (an array, or an object with one of
    `CONTAINER_KEYS`): a document that does not parse whole, or parses as one row, is NDJSON."""
    text = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"[", b"{"):
        try:
            whole = json.loads(text)
        except (ValueError, RecursionError):
            whole = None
        if isinstance(whole, list):
            return Document("json", [], whole)
        if isinstance(whole, dict):
            for key in CONTAINER_KEYS:
                if isinstance(whole.get(key), list):
                    return Document("json", [], whole[key], key)
    return Document("ndjson", data.splitlines(), [])
