"""The `answer` job kind's pure core (docs/spec.md §3), the answer gate: ask the Agent API, score every
sentence of the answer against the passages it cites, send flagged sentences back for another search, and keep
only what the sources support. This module is the one import point; the parts live in `checks/answer_*.py`:

- `answer_split`: sentences and their `[n]` markers;
- `answer_requests`: Agent API and Decisions request bodies, markers -> cited passages;
- `answer_labels`: the label policy and its cutoffs;
- `answer_review`: review selection and outcomes, the final answer, the summary.

The Agent API writes and rewrites, the Decisions API returns probabilities, and only this code labels
sentences and decides what to keep. Nothing here does I/O.
"""

from __future__ import annotations

from checks.answer_labels import (
    CHECKABLE_MIN,
    CONTRADICTED_MIN,
    LABELS,
    SUPPORTED_MIN,
    WEAK_MIN,
    Label,
    LabelResult,
    label_sentence,
)
from checks.answer_requests import (
    AGENT_PRESET,
    AGENT_TOOLS,
    ANSWER_INSTRUCTIONS,
    CHECKABLE_INSTRUCTIONS,
    CHECKABLE_QUESTION,
    MAX_CITED_PASSAGES,
    MAX_QUESTIONS,
    CitedPassages,
    answer_request,
    cite_passages,
    contradicts_question,
    investigation_request,
    sentence_request,
    supports_question,
)
from checks.answer_review import (
    FLAGGED_LABELS,
    MAX_INVESTIGATIONS,
    NOT_CONFIRMED,
    NOT_REVIEWED,
    REPLACED,
    AnswerSummary,
    FinalAnswer,
    FinalSentence,
    Outcome,
    Review,
    Scored,
    final_answer,
    review_may_start,
    review_outcome,
    select_for_review,
    summarize,
)
from checks.answer_split import CLOSING_QUOTES, Sentence, SplitError, plain_claim, split_sentences

__all__ = [
    "AGENT_PRESET",
    "AGENT_TOOLS",
    "ANSWER_INSTRUCTIONS",
    "CHECKABLE_INSTRUCTIONS",
    "CHECKABLE_MIN",
    "CHECKABLE_QUESTION",
    "CLOSING_QUOTES",
    "CONTRADICTED_MIN",
    "FLAGGED_LABELS",
    "LABELS",
    "MAX_CITED_PASSAGES",
    "MAX_INVESTIGATIONS",
    "MAX_QUESTIONS",
    "NOT_CONFIRMED",
    "NOT_REVIEWED",
    "REPLACED",
    "SUPPORTED_MIN",
    "WEAK_MIN",
    "AnswerSummary",
    "CitedPassages",
    "FinalAnswer",
    "FinalSentence",
    "Label",
    "LabelResult",
    "Outcome",
    "Review",
    "Scored",
    "Sentence",
    "SplitError",
    "answer_request",
    "cite_passages",
    "contradicts_question",
    "final_answer",
    "investigation_request",
    "label_sentence",
    "plain_claim",
    "review_may_start",
    "review_outcome",
    "select_for_review",
    "sentence_request",
    "split_sentences",
    "summarize",
    "supports_question",
]
