"""Request bodies for the answer gate (docs/spec.md §3): the Agent API calls that write and rewrite the
answer, and the one Decisions request per sentence that scores it against the passages it cites.

Nothing here sends anything: jobs/ and workers/ post these bodies through clients/.

The Agent instructions, the investigation prompt and the `checkable` / `supports_n` / `contradicts_n` texts
are behaviour-defining data, not prose to polish: changing a word changes what the Agent writes and the
probabilities the Decisions API returns. The cutoffs of checks/answer_labels.py and the recorded outcomes
of docs/spec.md §7.2 were measured with the reference recipe's texts, so these are that recipe's texts
verbatim (docs/spec.md §3.7), as the quote finder's are (checks/quotes.py). Change one only together with
new measurements.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from checks.request_bodies import AgentRequest, AgentTool, DecisionsQuestion, DecisionsRequest

__all__ = [
    "AGENT_PRESET",
    "AGENT_TOOLS",
    "ANSWER_INSTRUCTIONS",
    "CHECKABLE_INSTRUCTIONS",
    "CHECKABLE_QUESTION",
    "MAX_CITED_PASSAGES",
    "MAX_QUESTIONS",
    "CitedPassages",
    "answer_request",
    "cite_passages",
    "contradicts_instructions",
    "contradicts_question",
    "investigation_request",
    "sentence_request",
    "supports_instructions",
    "supports_question",
]

AGENT_PRESET: Final = "fast"
AGENT_TOOLS: Final[tuple[AgentTool, ...]] = ({"type": "web_search"},)

# Each sentence is later scored on its own, hence the ask for a marker on every factual sentence and for
# sentences that name their subject ("Its orbit..." cannot be checked without the sentence before it).
# Verbatim from the reference recipe (see the module docstring).
ANSWER_INSTRUCTIONS: Final = (
    "Answer in plain prose paragraphs with no bullet points, headings, or bold text. "
    "Put a citation marker like [3] at the end of every sentence that states a fact, "
    "citing the search result that supports it. Write every sentence so it makes sense on its own: "
    "name the subject instead of starting with it, its, or they."
)

CHECKABLE_QUESTION: Final = "checkable"
CHECKABLE_INSTRUCTIONS: Final = (
    "Is the claim a factual statement that could be verified against a source? "
    "Opinions, transitions, and questions are not checkable."
)


def supports_instructions(passage_id: str | int) -> str:
    """The `supports_n` text (verbatim from the reference recipe)."""
    return (
        f"Does passage {passage_id} state or directly imply the claim? "
        "Being about the same topic is not support; the passage has to back the specific claim."
    )


def contradicts_instructions(passage_id: str | int) -> str:
    """The `contradicts_n` text (verbatim from the reference recipe)."""
    return f"Does passage {passage_id} state something that cannot be true if the claim is true?"


MAX_QUESTIONS: Final = 128  # Decisions API limit per request
MAX_CITED_PASSAGES: Final = (MAX_QUESTIONS - 1) // 2  # checkable + two questions per passage

_PASSAGE_ID: Final = re.compile(r"[0-9]+")


def answer_request(question: str) -> AgentRequest:
    """The Agent API body that answers the job's question with web search."""
    if not question.strip():
        raise ValueError("the question is empty")
    return _agent_body(question)


def investigation_request(question: str, answer_text: str, sentence_text: str) -> AgentRequest:
    """The Agent API body that searches again for one flagged sentence and asks for its replacement.

    `answer_text` is the full first answer, so the rewrite can avoid repeating it; `sentence_text` is the
    sentence's claim (markers removed), as the Decisions API scored it.
    """
    if not sentence_text.strip():
        raise ValueError("the sentence to investigate is empty")
    # Verbatim from the reference recipe (see the module docstring), line breaks included.
    prompt = (
        f'Question: "{question}"\n\nAnswer:\n{answer_text}\n\n'
        f'The sources did not clearly support this sentence from the answer:\n\n"{sentence_text}"\n\n'
        "Search for evidence about this sentence. Write the fewest sentences (one to three) that could "
        "replace it, stating only what the sources you find support and correcting anything that is wrong. "
        "Do not repeat facts the rest of the answer already states. Leave out any part you cannot support."
    )
    return _agent_body(prompt)


def _agent_body(prompt: str) -> AgentRequest:
    return {
        "input": prompt,
        "preset": AGENT_PRESET,
        "instructions": ANSWER_INSTRUCTIONS,
        "tools": [AgentTool(type=tool["type"]) for tool in AGENT_TOOLS],
    }


def supports_question(passage_id: str | int) -> str:
    return f"supports_{passage_id}"


def contradicts_question(passage_id: str | int) -> str:
    return f"contradicts_{passage_id}"


def sentence_request(claim: str, passages: Mapping[str, str], model: str) -> DecisionsRequest:
    """One Decisions request for one sentence: `checkable`, plus `supports_n` and `contradicts_n` for
    every cited passage (two passages -> five questions). An uncited sentence gets only `checkable`, so
    an uncited claim can still be told apart from a transition.

    Support and contradiction are separate yes/no questions, not one choice, so a sentence that one
    passage backs and another contradicts shows both.
    """
    if not claim.strip():
        raise ValueError("the claim is empty")
    if len(passages) > MAX_CITED_PASSAGES:
        raise ValueError(
            f"{len(passages)} cited passages need {1 + 2 * len(passages)} questions; "
            f"a Decisions request takes at most {MAX_QUESTIONS}"
        )
    questions: dict[str, DecisionsQuestion] = {
        CHECKABLE_QUESTION: {"type": "noul", "instructions": CHECKABLE_INSTRUCTIONS},
    }
    for passage_id in passages:
        if not _PASSAGE_ID.fullmatch(passage_id):
            raise ValueError(f"passage id {passage_id!r} is not a search result number")
        questions[supports_question(passage_id)] = {
            "type": "noul",
            "instructions": supports_instructions(passage_id),
        }
        questions[contradicts_question(passage_id)] = {
            "type": "noul",
            "instructions": contradicts_instructions(passage_id),
        }
    return {
        "model": model,
        "state": {"claim": claim, "passages": dict(passages)},
        "questions": questions,
    }


@dataclass(frozen=True)
class CitedPassages:
    """What one sentence's markers point at in the Agent API's search results."""

    passages: dict[str, str]  # "n" -> snippet, in order of first citation: exactly what is sent
    urls: dict[str, str]  # "n" -> the result's URL, same keys
    missing_ids: tuple[int, ...]  # markers that point at no search result, in order, once each


def cite_passages(source_ids: Iterable[int], results: Sequence[Mapping[str, Any]]) -> CitedPassages:
    """Map a sentence's `[n]` markers to the snippets of the search results with `id` n.

    `results` are the Agent response's search results as plain dicts (`id`, `url`, `snippet`, ...). If two
    results share an id, the first one wins. A repeated marker cites its passage once.
    """
    by_id: dict[int, Mapping[str, Any]] = {}
    for result in results:
        by_id.setdefault(int(result["id"]), result)
    passages: dict[str, str] = {}
    urls: dict[str, str] = {}
    missing: list[int] = []
    for n in source_ids:
        found = by_id.get(n)
        if found is None:
            if n not in missing:
                missing.append(n)
            continue
        key = str(n)
        if key not in passages:
            passages[key] = str(found.get("snippet") or "")
            urls[key] = str(found.get("url") or "")
    return CitedPassages(passages=passages, urls=urls, missing_ids=tuple(missing))
