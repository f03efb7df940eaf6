"""Which passages one sentence's Decisions request asks about, and the request itself (docs/spec.md §5,
citations).

A sentence is scored against the sources it cites: `supports_n` and `contradicts_n` for each passage n, as
the answer kind's §3.3 request. By default it is also asked `supports_k` for each source of the row it does
not cite, so a sentence its own citation does not support but another source does can be flagged
misattributed (the option `misattribution: false` leaves them out, for cost: fewer questions, fewer input
tokens).

**Long sources.** A source longer than `PASSAGE_MAX_CHARS` (a retrieved document rather than a snippet) is
cut at sentence ends into chunks of at most that many characters (a sentence longer than that is cut at a
space), each sent as a passage of its own; the source's best chunk is what counts (MiniCheck's max over
chunks), and the evidence says which chunk that was.

**Within the cap.** A request holds at most 128 questions (§1.1): `checkable`, two per cited passage, one
per other passage. Cited passages come first, at most `MAX_CITED_PASSAGES` of them, then other sources'
passages with what is left. When a source has more chunks than fit, its chunks sharing the most words with
the sentence are sent (round robin over the sources, so every source gets its best chunk before any gets a
second); another source none of whose chunks fit is listed in `unchecked` (not checked for
misattribution). A source the sentence does not cite is asked about its `OTHER_CHUNKS_PER_SOURCE` best
chunks only. At 128 questions of chunks of at most 2,000 characters the state is at most ~250 kB, about
64,000 tokens by the gateway's four-bytes-a-token count: well inside the upstream's 262,144-token input
limit, so the question cap is the bound that binds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Final

from checks.answer_requests import (
    CHECKABLE_INSTRUCTIONS,
    CHECKABLE_QUESTION,
    MAX_QUESTIONS,
    contradicts_instructions,
    contradicts_question,
    supports_instructions,
    supports_question,
)
from checks.citation_contracts import (
    CitationEntry,
    CitationPassage,
    CitationSource,
    PassageRole,
    SentencePlan,
)
from checks.citation_markers import cited_sentences
from checks.request_bodies import DecisionsQuestion, DecisionsRequest

__all__ = [
    "MAX_CITED_PASSAGES",
    "PASSAGE_MAX_CHARS",
    "choose_passages",
    "chunk_spans",
    "decisions_request",
    "plan_sentences",
]

PASSAGE_MAX_CHARS: Final = 2_000
# Two questions each: 96 of the 127 after `checkable`, leaving at least 31 for other sources.
MAX_CITED_PASSAGES: Final = 48
# Misattribution is a second look, not the verdict: a source the sentence does not cite is asked about its
# two chunks sharing the most words with the sentence, not all of them (a 100 kB document would otherwise
# add ~25,000 input tokens to every sentence's request).
OTHER_CHUNKS_PER_SOURCE: Final = 2
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])[\"'”’)]*\s+")
_WORD: Final = re.compile(r"[^\W_]{3,}")


def chunk_spans(text: str, limit: int = PASSAGE_MAX_CHARS) -> list[tuple[int, int]]:
    """(start, end) character spans covering `text` in order, each at most `limit` long, cut after a
    sentence end where possible, else at the last space, else hard. A text within `limit` is one span."""
    if len(text) <= limit:
        return [(0, len(text))]
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    spans: list[tuple[int, int]] = []
    start = 0
    while len(text) - start > limit:
        window = start + limit
        cut = max((e for e in ends if start < e <= window), default=0)
        if cut <= start:
            space = text.rfind(" ", start + 1, window)
            cut = space + 1 if space > start else window
        spans.append((start, cut))
        start = cut
    spans.append((start, len(text)))
    return spans


def _words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


@lru_cache(maxsize=256)
def _chunks(text: str) -> tuple[tuple[int, str, frozenset[str]], ...]:
    """A source's chunks as (1-based chunk number, text, words). Every sentence of an answer ranks the
    same sources, so an answer of n sentences would split and tokenise each source n times; kept for the
    last few sources (a pure function of the text)."""
    return tuple((n, text[a:b], _words(text[a:b])) for n, (a, b) in enumerate(chunk_spans(text), 1))


def _ranked(claim_words: frozenset[str], source: CitationSource) -> list[tuple[int, str]]:
    """The source's chunks as (1-based chunk number, text), most words shared with the claim first
    (earlier chunks first on ties)."""
    ranked = sorted(_chunks(source.text), key=lambda c: (-len(claim_words & c[2]), c[0]))
    return [(n, chunk) for n, chunk, _ in ranked]


def _round_robin(
    claim_words: frozenset[str], sources: Sequence[CitationSource], room: int, per_source: int | None = None
) -> list[tuple[CitationSource, int, int, str]]:
    """Up to `room` chunks over `sources` (at most `per_source` of each): every source's best chunk, then
    every second best, ...; each as (source, chunk number, chunk count, text), in source then chunk order."""
    ranked = {s.id: _ranked(claim_words, s)[:per_source] for s in sources}
    picked: list[tuple[CitationSource, int, int, str]] = []
    depth = 0
    while len(picked) < room and any(len(r) > depth for r in ranked.values()):
        for source in sources:
            chunks = ranked[source.id]
            if depth < len(chunks) and len(picked) < room:
                number, text = chunks[depth]
                picked.append((source, number, len(chunks), text))
        depth += 1
    order = {s.id: i for i, s in enumerate(sources)}
    return sorted(picked, key=lambda p: (order[p[0].id], p[1]))


def choose_passages(
    claim: str,
    cited: Sequence[str],
    sources: Sequence[CitationSource],
    *,
    misattribution: bool,
) -> tuple[list[CitationPassage], list[str]]:
    """The passages of one sentence's request and the other sources left unchecked (see the module
    docstring). Keys are "1", "2", ... in request order: cited passages first."""
    by_id = {s.id: s for s in sources}
    claim_words = _words(claim)
    cited_sources = [by_id[i] for i in cited if i in by_id]
    room = MAX_QUESTIONS - 1
    chosen: list[tuple[CitationSource, int, int, str, PassageRole]] = [
        (*c, "cited") for c in _round_robin(claim_words, cited_sources, min(MAX_CITED_PASSAGES, room // 2))
    ]
    room -= 2 * len(chosen)
    unchecked: list[str] = []
    if misattribution:
        cited_ids = set(cited)
        others = [s for s in sources if s.id not in cited_ids]
        picked = _round_robin(claim_words, others, room, OTHER_CHUNKS_PER_SOURCE)
        chosen += [(*c, "other") for c in picked]
        asked = {p[0].id for p in picked}
        unchecked = [s.id for s in others if s.id not in asked]
    passages = [
        CitationPassage(key=str(n), source=s.id, chunk=chunk, chunks=count, role=role, text=text)
        for n, (s, chunk, count, text, role) in enumerate(chosen, 1)
    ]
    return passages, unchecked


def decisions_request(claim: str, passages: Iterable[CitationPassage], model: str) -> DecisionsRequest:
    """One Decisions request: `checkable`, then for each passage n `supports_n`, and for a cited one also
    `contradicts_n` (the answer kind's texts, §3.7: the cutoffs were measured with them). An uncited
    sentence with misattribution off gets only `checkable`, so an uncited claim is still told from a
    transition."""
    if not claim.strip():
        raise ValueError("the claim is empty")
    state: dict[str, str] = {}
    questions: dict[str, DecisionsQuestion] = {
        CHECKABLE_QUESTION: {"type": "noul", "instructions": CHECKABLE_INSTRUCTIONS}
    }
    for p in passages:
        state[p.key] = p.text
        questions[supports_question(p.key)] = {"type": "noul", "instructions": supports_instructions(p.key)}
        if p.role == "cited":
            questions[contradicts_question(p.key)] = {
                "type": "noul",
                "instructions": contradicts_instructions(p.key),
            }
    if len(questions) > MAX_QUESTIONS:
        raise ValueError(f"{len(questions)} questions; a Decisions request takes at most {MAX_QUESTIONS}")
    return {"model": model, "state": {"claim": claim, "passages": state}, "questions": questions}


def plan_sentences(entry: CitationEntry, *, misattribution: bool) -> list[SentencePlan]:
    """Every sentence of the entry's answer with the passages its request asks about (the items of the
    `cited_sentence` stage). Raises `SplitError` when the answer cannot be split (checks/answer_split.py)."""
    sentences = cited_sentences(entry.answer, [s.id for s in entry.sources])
    plans: list[SentencePlan] = []
    for s in sentences:
        # An unmarked answer (a RAGAS or DeepEval row without markers) is checked as faithfulness is:
        # every sentence against every source, as if it cited them all.
        cited = [x.id for x in entry.sources] if entry.unmarked else list(s.cited)
        passages, unchecked = choose_passages(s.claim, cited, entry.sources, misattribution=misattribution)
        plans.append(
            SentencePlan(
                number=s.number,
                text=s.text,
                claim=s.claim,
                paragraph=s.paragraph,
                cited=cited,
                missing=list(s.missing),
                passages=passages,
                unchecked=unchecked,
                unmarked=entry.unmarked,
            )
        )
    return plans
