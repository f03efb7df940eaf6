"""The simulator's content engine: what the Decisions, Agent and Search endpoints answer.

The wire layer (`simulator/app.py`) validates requests and wraps these outcomes in the API's envelopes;
everything here is about content. It is a simulator, not a fact checker: answers come from a bundled
corpus (`simulator/corpus/`) through a full-text index and one documented heuristic (`simulator/judge.py`),
deterministically for a given seed.

Decisions. The simulated model "knows" the corpus documents dated before `SimConfig.knowledge_cutoff`.
With `mode: "web_grounding"` each question gets the gateway's search query
(`checks.grounding.search_query`; a documented approximation for shapes that port does not cover), the
whole corpus is searched (every date, top 5), equal queries share a search, empty ones are skipped, the
request keeps up to 10 results, and an `Evidence:` block with their snippets is added to what the model
reads. The search fails open: if it fails or finds nothing, `search_results` is `[]` and the answer comes
from the state and the model's knowledge alone.

Packed requests (a state whose `claims` is a mapping, or a rank state whose `results` is, docs/spec.md
§7.4): each question is judged as it would be in a request holding its claim (its result) alone
(`simulator/judge.py`), so packed and unpacked answers agree, unless the test knob `SimConfig.pack_drift`
moves them by their position in the request.

Token counts are about UTF-8 bytes / 4 of what the model read (state, evidence, the first question); each
further question costs `SimConfig.tokens_per_question` (the model reads the state once and every question
after it), or its own bytes / 4 when that is more.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache

from checks.grounding import MAX_QUERY_BYTES, QueryPart, is_data_url, search_query
from simulator.agent_writer import AgentWriter
from simulator.config import SimConfig
from simulator.index import CorpusIndex, Hit
from simulator.judge import Judge, packed_claims, packed_results, strings_in

__all__ = ["AgentOutcome", "DecisionOutcome", "Engine", "drifted", "grounding_query", "input_tokens"]

SEARCH_RESULTS_PER_QUERY = 5
MAX_GROUNDED_QUESTIONS = 100  # the gateway builds queries for up to 100 questions
MAX_KEPT_RESULTS = 10
EVIDENCE_SENTENCES = 5  # sentences per result snippet the grounded model reads
KNOWLEDGE_DOCUMENTS = 5  # pre-cutoff documents the model recalls per claim sentence
SEARCH_SNIPPET_SENTENCES = 5
SEARCH_POOL = 50  # documents considered before Search API filters are applied
RECENCY = {"hour": 0, "day": 1, "week": 7, "month": 31, "year": 366}


@dataclass(frozen=True)
class DecisionOutcome:
    answers: dict[str, dict[str, object]]  # name -> {"type": "noul", "noul": p} | choice | score answer
    input_tokens: int  # ~ bytes/4 of state + first question (+ evidence), then per further question
    output_tokens: int
    search_results: list[dict[str, object]] | None  # None when not grounded; [] when nothing was added


@dataclass(frozen=True)
class AgentOutcome:
    text: str  # plain prose with [n] markers
    results: list[dict[str, object]]  # [{"id": 1, "url", "title", "snippet", "date"}, ...] from 1
    input_tokens: int
    output_tokens: int


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def input_tokens(read: str, questions: Mapping[str, object], per_question: int) -> int:
    """Tokens of a Decisions request: bytes/4 of what the model read (`read`: the state and any evidence)
    and of the first question, then for every further question `per_question` or its own bytes/4 when
    that is more. A one-question request costs bytes/4 of all it sent."""
    items = list(questions.items())
    first = _json(dict(items[:1]))
    further = sum(max(per_question, _tokens(_json({name: question}))) for name, question in items[1:])
    return _tokens(read + first) + further


def drifted(answers: Mapping[str, dict[str, object]], drift: float) -> dict[str, dict[str, object]]:
    """`pack_drift`: each noul probability moved by `drift` times its 0-based position in the request,
    within [0.001, 0.999]. Choice and score answers are left whole (their probabilities sum to 1)."""
    moved: dict[str, dict[str, object]] = {}
    for position, (name, answer) in enumerate(answers.items()):
        p = answer.get("noul")
        if answer.get("type") == "noul" and isinstance(p, float | int):
            moved[name] = {**answer, "noul": round(min(0.999, max(0.001, p + drift * position)), 4)}
        else:
            moved[name] = answer
    return moved


def grounding_query(state: object, question: object) -> str:
    """The search query for one question when grounded.

    The gateway's rule as ported in `checks.grounding` where it applies (string state, one plain noul).
    For other shapes, which that port refuses, the same recipe applied to text we can see: the question's
    instructions then criteria texts (at most 128 bytes when the state has text), then the state's string
    values in order, 256 bytes in all. That fallback is an approximation of the gateway, not a port.
    """
    if not isinstance(question, Mapping):
        return ""
    if isinstance(state, str):
        try:
            return search_query(state, question)
        except ValueError:
            pass
    state_text = " ".join(s for s in strings_in(state) if not is_data_url(s))
    question_text = " ".join(
        s for s in strings_in(question.get("instructions")) + strings_in(question.get("criteria")) if s
    )
    state_part = QueryPart(MAX_QUERY_BYTES)
    state_part.add(state_text)
    question_part = QueryPart(MAX_QUERY_BYTES // 2 if state_part.text else MAX_QUERY_BYTES)
    if not is_data_url(question_text):
        question_part.add(question_text)
    query = QueryPart(MAX_QUERY_BYTES)
    query.add(question_part.text)
    query.add(state_part.text)
    return query.text


def _result(hit: Hit) -> dict[str, object]:
    day = hit.document.date
    return {
        "title": hit.document.title,
        "url": hit.document.url,
        "snippet": hit.snippet,
        "date": day,
        "last_updated": day,
    }


def _merge(per_query: Sequence[Sequence[Hit]]) -> list[Hit]:
    """Up to 10 results ordered by rank across queries, or one per query when there are more than 10."""
    seen: set[str] = set()
    merged: list[Hit] = []
    depth = 1 if len(per_query) > MAX_KEPT_RESULTS else SEARCH_RESULTS_PER_QUERY
    limit = len(per_query) if len(per_query) > MAX_KEPT_RESULTS else MAX_KEPT_RESULTS
    for rank in range(depth):
        for hits in per_query:
            if rank < len(hits) and hits[rank].document.url not in seen and len(merged) < limit:
                seen.add(hits[rank].document.url)
                merged.append(hits[rank])
    return merged


class Engine:
    """Loads the corpus and its FTS5 index once; every method is safe to call from many threads."""

    def __init__(self, config: SimConfig, *, index: CorpusIndex | None = None) -> None:
        if not math.isfinite(config.pack_drift) or config.tokens_per_question < 0:
            raise ValueError("pack_drift must be finite and tokens_per_question >= 0")
        self.config = config
        self.index = index if index is not None else CorpusIndex.from_directory()
        self._recall = lru_cache(maxsize=8192)(self._recall_uncached)
        self.judge = Judge(self._recall, seed=config.seed)
        self.writer = AgentWriter(self.index, seed=config.seed)
        dates = [d.date for d in self.index.documents]
        self._today = date.fromisoformat(max(dates))  # "now" for recency filters: the newest page

    # -- Decisions ----------------------------------------------------------------------------------

    def decide(self, body: Mapping[str, object], *, fail_search: bool = False) -> DecisionOutcome:
        """Answer a validated Decisions body. `fail_search` simulates a grounding search that failed
        (the API then answers from the state alone and returns `search_results: []`)."""
        state = body.get("state")
        raw_questions = body.get("questions")
        questions: Mapping[str, object] = raw_questions if isinstance(raw_questions, Mapping) else {}
        grounded = body.get("mode") == "web_grounding"
        results: list[dict[str, object]] | None = None
        evidence: list[str] = []
        evidence_block = ""
        if grounded:
            hits = [] if fail_search else self._ground(state, questions)
            results = [_result(hit) for hit in hits]
            evidence = [hit.snippet for hit in hits]
            if hits:
                evidence_block = "\n\nEvidence:\n" + "\n".join(
                    f"[{n}] {hit.document.title} ({hit.document.url}, {hit.document.date})\n{hit.snippet}"
                    for n, hit in enumerate(hits, start=1)
                )
        model = body.get("model")
        answers = self.judge.answer(
            state,
            questions,
            evidence=evidence,
            model=model if isinstance(model, str) else "",
            # Grounded evidence comes from every question's search, so the whole request keys the jitter.
            request_key=self._request_key(body) if grounded else None,
        )
        packed = packed_claims(state) is not None or packed_results(state) is not None
        if self.config.pack_drift and packed:
            answers = drifted(answers, self.config.pack_drift)
        state_text = state if isinstance(state, str) else _json(state)
        per_question = self.config.tokens_per_question
        return DecisionOutcome(
            answers=answers,
            input_tokens=input_tokens(state_text + evidence_block, questions, per_question),
            output_tokens=len(answers),
            search_results=results,
        )

    def _ground(self, state: object, questions: Mapping[str, object]) -> list[Hit]:
        queries: list[str] = []
        for question in list(questions.values())[:MAX_GROUNDED_QUESTIONS]:
            query = grounding_query(state, question)
            if query and query not in queries:
                queries.append(query)
        per_query: list[list[Hit]] = []
        for query in queries:
            try:
                per_query.append(
                    self.index.search(query, SEARCH_RESULTS_PER_QUERY, max_sentences=EVIDENCE_SENTENCES)
                )
            except sqlite3.Error:  # fail open, as the gateway does on a failed search
                per_query.append([])
        return _merge(per_query)

    def _recall_uncached(self, text: str) -> tuple[str, ...]:
        """What the model knows about `text`: sentences of the best pre-cutoff documents."""
        try:
            hits = self.index.search(text, KNOWLEDGE_DOCUMENTS, before=self.config.knowledge_cutoff)
        except sqlite3.Error:
            return ()
        return tuple(sentence for hit in hits for sentence in hit.document.sentences)

    def _request_key(self, body: Mapping[str, object]) -> str:
        canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()

    # -- Agent --------------------------------------------------------------------------------------

    def agent(self, body: Mapping[str, object]) -> AgentOutcome:
        """Answer an Agent API (or Responses API) body: `input` as a string or a list of messages."""
        prompt = "\n".join(_input_text(body.get("input")))
        instructions = body.get("instructions")
        written = self.writer.write(prompt, instructions if isinstance(instructions, str) else "")
        return AgentOutcome(
            text=written.text,
            results=written.results,
            input_tokens=_tokens(written.read),
            output_tokens=_tokens(written.text),
        )

    # -- Search -------------------------------------------------------------------------------------

    def search(self, body: Mapping[str, object]) -> list[dict[str, object]]:
        """Answer a Search API body: the top `max_results` pages, snippets of sentences joined by "...".

        Supported filters: `search_domain_filter` (allow list, "-domain" to exclude),
        `search_recency_filter` (relative to the newest corpus page, so results never depend on the
        wall clock), `search_after_date_filter` / `search_before_date_filter` (m/d/yyyy), and
        `max_tokens_per_page` (snippet cut to about 4 bytes per token, whole sentences).
        """
        raw_query = body.get("query")
        query = " ".join(strings_in(raw_query))
        max_results = _int(body.get("max_results"), 10, 1, 20)
        filtered = any(
            body.get(name)
            for name in (
                "search_domain_filter",
                "search_recency_filter",
                "search_after_date_filter",
                "search_before_date_filter",
            )
        )
        try:
            hits = self.index.search(
                query, SEARCH_POOL if filtered else max_results, max_sentences=SEARCH_SNIPPET_SENTENCES
            )
        except sqlite3.Error:
            return []
        hits = [hit for hit in hits if self._passes_filters(hit, body)][:max_results]
        budget = _int(body.get("max_tokens_per_page"), 0, 0, 1_000_000) * 4
        results = []
        for hit in hits:
            result = _result(hit)
            if budget:
                result["snippet"] = _cut_snippet(hit, budget)
            results.append(result)
        return results

    def _passes_filters(self, hit: Hit, body: Mapping[str, object]) -> bool:
        domains = [d.lower() for d in strings_in(body.get("search_domain_filter")) if d]
        host = hit.document.url.split("/")[2].lower()
        allowed = [d for d in domains if not d.startswith("-")]
        denied = [d[1:] for d in domains if d.startswith("-")]
        if allowed and not any(host == d or host.endswith("." + d) for d in allowed):
            return False
        if any(host == d or host.endswith("." + d) for d in denied):
            return False
        day = date.fromisoformat(hit.document.date)
        recency = body.get("search_recency_filter")
        if (
            isinstance(recency, str)
            and recency in RECENCY
            and day < self._today - timedelta(days=RECENCY[recency])
        ):
            return False
        after = _us_date(body.get("search_after_date_filter"))
        before = _us_date(body.get("search_before_date_filter"))
        return not ((after and day < after) or (before and day > before))


def _input_text(value: object) -> list[str]:
    """Text of an Agent `input`: a string, or Responses-style messages whose content is text parts."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return _input_text(value.get("content")) or _input_text(value.get("text"))
    if isinstance(value, list):
        return [text for item in value for text in _input_text(item)]
    return []


def _int(value: object, default: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return min(high, max(low, value))


def _us_date(value: object) -> date | None:
    """Perplexity's date filters are written m/d/yyyy; anything else is ignored."""
    if not isinstance(value, str):
        return None
    try:
        month, day, year = (int(part) for part in value.split("/"))
        return date(year, month, day)
    except ValueError:
        return None


def _cut_snippet(hit: Hit, budget: int) -> str:
    kept: list[str] = []
    used = 0
    for sentence in hit.sentences:
        size = len(sentence.encode("utf-8")) + (5 if kept else 0)
        if kept and used + size > budget:
            break
        kept.append(sentence)
        used += size
    return " ... ".join(kept)
