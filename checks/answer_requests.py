"""Request bodies for the answer gate (docs/spec.md §3): the Agent API calls that write and rewrite the
answer, and the one Decisions request per sentence that scores it against the passages it cites.

Nothing here sends anything: jobs/ and workers/ post these bodies through clients/. The instruction and
question texts are part of the contract, since changing a word changes the probabilities.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

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
    "contradicts_question",
    "investigation_request",
    "sentence_request",
    "supports_question",
]

AGENT_PRESET: Final = "fast"
AGENT_TOOLS: Final = ({"type": "web_search"},)

# Each sentence is later scored on its own, hence the ask for a marker on every factual sentence and for
# sentences that name their subject ("Its orbit..." cannot be checked without the sentence before it).
ANSWER_INSTRUCTIONS: Final = (
    "Write the answer as plain prose paragraphs, without lists, headings, tables or bold text. "
    "End every sentence that states a fact with a bracketed marker such as [2] that names the search "
    "result backing it. Each sentence will be read on its own, so name its subject in full instead of "
    "opening with a pronoun such as it, its or they."
)

CHECKABLE_QUESTION: Final = "checkable"
CHECKABLE_INSTRUCTIONS: Final = (
    "Is the claim a statement of fact that a source could confirm or refute? "
    "Opinions, transitions between topics and questions are not."
)

MAX_QUESTIONS: Final = 128  # Decisions API limit per request
MAX_CITED_PASSAGES: Final = (MAX_QUESTIONS - 1) // 2  # checkable + two questions per passage

_PASSAGE_ID: Final = re.compile(r"[0-9]+")


def answer_request(question: str) -> dict[str, Any]:
    """The Agent API body that answers the job's question with web search."""
    if not question.strip():
        raise ValueError("the question is empty")
    return _agent_body(question)


def investigation_request(question: str, answer_text: str, sentence_text: str) -> dict[str, Any]:
    """The Agent API body that searches again for one flagged sentence and asks for its replacement.

    `answer_text` is the full first answer, so the rewrite can avoid repeating it; `sentence_text` is the
    sentence's claim (markers removed), as the Decisions API scored it.
    """
    if not sentence_text.strip():
        raise ValueError("the sentence to investigate is empty")
    prompt = (
        f"Question: {question}\n\n"
        f"Earlier answer:\n{answer_text}\n\n"
        "The sources cited in the earlier answer did not clearly back this sentence from it:\n"
        f'"{sentence_text}"\n\n'
        "Search the web again for evidence about that sentence, then write one to three sentences that "
        "could take its place. State only what the sources you find support, correct anything they show "
        "to be wrong, leave out whatever they do not support, and do not repeat facts the rest of the "
        "earlier answer already gives."
    )
    return _agent_body(prompt)


def _agent_body(prompt: str) -> dict[str, Any]:
    return {
        "input": prompt,
        "preset": AGENT_PRESET,
        "instructions": ANSWER_INSTRUCTIONS,
        "tools": [dict(tool) for tool in AGENT_TOOLS],
    }


def supports_question(passage_id: str | int) -> str:
    return f"supports_{passage_id}"


def contradicts_question(passage_id: str | int) -> str:
    return f"contradicts_{passage_id}"


def sentence_request(claim: str, passages: Mapping[str, str], model: str) -> dict[str, Any]:
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
    questions: dict[str, Any] = {
        CHECKABLE_QUESTION: {"type": "noul", "instructions": CHECKABLE_INSTRUCTIONS},
    }
    for passage_id in passages:
        if not _PASSAGE_ID.fullmatch(passage_id):
            raise ValueError(f"passage id {passage_id!r} is not a search result number")
        questions[supports_question(passage_id)] = {
            "type": "noul",
            "instructions": (
                f"Does passage {passage_id} state the claim or directly imply it? A passage on the same "
                "topic that does not back this specific claim is not support."
            ),
        }
        questions[contradicts_question(passage_id)] = {
            "type": "noul",
            "instructions": (
                f"Does passage {passage_id} say something that cannot be true if the claim is true?"
            ),
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
