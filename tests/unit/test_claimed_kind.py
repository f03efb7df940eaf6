"""A claimed item knows its job's kind, and the `question` stage, which answer and quote share, finds its
handler by it (workers/kinds:handler_for), not by what the item's input says."""

from __future__ import annotations

import uuid

import pytest

from jobs.records import ClaimedItem
from workers.answers import handle_answer_question
from workers.kinds import handler_for
from workers.quotes import handle_compare, handle_quote_question


def _item(stage: str, kind: str, input_kind: str) -> ClaimedItem:
    return ClaimedItem(
        id=1, job_id=uuid.uuid4(), tenant_id=uuid.uuid4(), stage=stage, mode="", custom_id="q1",
        input={"kind": input_kind, "question": "How many bones?"}, token=1, options={}, dedupe_key=None,
        kind=kind,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "handler"), [("answer", handle_answer_question), ("quote", handle_quote_question)]
)
def test_the_shared_question_stage_is_handled_by_the_jobs_kind(kind: str, handler: object) -> None:
    other = "quote" if kind == "answer" else "answer"
    assert handler_for(_item("question", kind, input_kind=other)) is handler


def test_a_stage_of_one_kind_needs_no_kind() -> None:
    assert handler_for(_item("compare", "", input_kind="")) is handle_compare
    assert handler_for(_item("question", "", input_kind="quote")) is None
