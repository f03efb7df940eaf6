"""The quote finder's pure core (docs/spec.md §4): split search snippets into sentences, build the rank and
compare requests, read their answers, choose the quote, and keep a run record of everything that happened.

Why the two-step shape: a `choice` ranks one result's sentences against each other, so its probabilities
sum to about 1 inside one request and can't be compared across results. The compare request asks the same
yes/no question of every result's best sentence in one state, which puts them on one scale. Our code, not
the model, applies the cutoffs. Nothing here does I/O: jobs/ sends the requests through clients/ and
stores what this module returns.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from checks.quote_json import (
    CandidateJson,
    ClosestBy,
    CompareAttemptJson,
    OutcomeJson,
    RankAttemptJson,
    RunJson,
    SourceResultJson,
)
from checks.request_bodies import DecisionsRequest, SearchRequest

__all__ = [
    "BEST_INSTRUCTIONS",
    "BEST_QUESTION",
    "COMPARE_CRITERIA",
    "COMPARE_MIN",
    "HAS_ANSWER_CRITERIA",
    "HAS_ANSWER_INSTRUCTIONS",
    "HAS_ANSWER_QUESTION",
    "MAX_COMPARE_REQUESTS",
    "MAX_DECISIONS_REQUESTS",
    "MAX_RANK_REQUESTS",
    "MAX_SENTENCES",
    "MAX_SENTENCE_CHARS",
    "MIN_SENTENCES",
    "MIN_SENTENCE_CHARS",
    "QUOTE_MIN",
    "SEARCH_MAX_RESULTS",
    "SEARCH_MAX_TOKENS_PER_PAGE",
    "Candidate",
    "ClosestBy",
    "CompareAttempt",
    "QuoteAnswerError",
    "QuoteOutcome",
    "QuoteRunRecord",
    "RankAttempt",
    "SourceResult",
    "compare_pool",
    "compare_question_name",
    "compare_request",
    "parse_compare_answers",
    "parse_rank_answers",
    "prepare_results",
    "rank_request",
    "search_request",
    "select_quote",
    "split_snippet",
]

# ---- Numbers of the contract --------------------------------------------------------------------------

SEARCH_MAX_RESULTS: Final = 5
SEARCH_MAX_TOKENS_PER_PAGE: Final = 2048

MIN_SENTENCE_CHARS: Final = 25  # shorter pieces are stray headings and labels
MAX_SENTENCE_CHARS: Final = 400  # longer pieces are run-on text no reader would quote
MAX_SENTENCES: Final = 255  # a Decisions `choice` takes at most 255 options
MIN_SENTENCES: Final = 1  # a result with fewer usable sentences gets no rank request

COMPARE_MIN: Final = 0.3  # has_answer at or above this sends the result's candidate to the compare step
QUOTE_MIN: Final = 0.6  # the top compared candidate is quoted only at or above this

MAX_RANK_REQUESTS: Final = SEARCH_MAX_RESULTS  # one per result
MAX_COMPARE_REQUESTS: Final = 1
MAX_DECISIONS_REQUESTS: Final = MAX_RANK_REQUESTS + MAX_COMPARE_REQUESTS  # 6 per question

# ---- Question texts -----------------------------------------------------------------------------------
# These are the texts the recorded outcomes in docs/spec.md §7 were measured with; changing a
# word changes the probabilities, so treat them as part of the contract.

BEST_QUESTION: Final = "best"
HAS_ANSWER_QUESTION: Final = "has_answer"

BEST_INSTRUCTIONS: Final = (
    "Which numbered sentence most directly answers the question? "
    "Prefer a sentence that states the answer itself over one that only mentions the topic."
)
HAS_ANSWER_INSTRUCTIONS: Final = "Does at least one of the numbered sentences answer the question?"
HAS_ANSWER_CRITERIA: Final[Mapping[str, str]] = {
    "true": (
        "At least one sentence states the answer or directly implies it, "
        "so a reader could quote that sentence as the answer."
    ),
    "false": (
        "The sentences discuss the topic but none states the answer, "
        "or answering would need outside knowledge."
    ),
}
COMPARE_CRITERIA: Final[Mapping[str, str]] = {
    "true": (
        "The sentence contains the answer itself and can be quoted as the answer without adding anything."
    ),
    "false": "The sentence is about the topic but does not contain the answer, or only hints at it.",
}


class QuoteAnswerError(ValueError):
    """A Decisions answer that does not fit the request it answers (missing question, stray option...)."""


# ---- Sentences ----------------------------------------------------------------------------------------

# The Search API separates the page sections it extracted with "..."; a section never continues a sentence.
_SECTION_BREAK = re.compile(r"\.\.\.|\n")
# Markdown line markers (headings, bullets, quotes) count only when whitespace follows, so a line that opens
# with "**bold**" keeps its asterisks.
_LINE_MARKERS = re.compile(r"^\s*(?:[#*>-]+\s+)*")
# A sentence ends at . ! or ? plus any footnote markers such as ^[1]^, when whitespace and then a capital,
# digit, quote mark or opening parenthesis follow. The whitespace stays outside the match and is trimmed.
_SENTENCE_END = re.compile(r"[.!?](?:\^\[[^\]]+\]\^)*(?=\s+[A-Z0-9\"“(])")


def split_snippet(snippet: str) -> list[str]:
    """The snippet's quotable sentences in page order.

    Only edges are touched (whitespace and line markers), so every sentence is a substring of the snippet
    and a printed quote is exactly what the Search API returned. Known limit: an abbreviation followed by
    a capital or a number ("Aug. 25") ends a sentence.
    """
    sentences: list[str] = []
    seen: set[str] = set()
    for line in _SECTION_BREAK.split(snippet):
        body = _LINE_MARKERS.sub("", line, count=1)
        cuts = [match.end() for match in _SENTENCE_END.finditer(body)]
        for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
            piece = body[start:end].strip()
            if not MIN_SENTENCE_CHARS <= len(piece) <= MAX_SENTENCE_CHARS or piece in seen:
                continue
            seen.add(piece)
            sentences.append(piece)
            if len(sentences) == MAX_SENTENCES:
                return sentences
    return sentences


# ---- Search -------------------------------------------------------------------------------------------


def search_request(question: str) -> SearchRequest:
    """The Search API body: five results with up to 2,048 tokens of extracted text each."""
    if not question.strip():
        raise ValueError("question is empty")
    return {
        "query": question,
        "max_results": SEARCH_MAX_RESULTS,
        "max_tokens_per_page": SEARCH_MAX_TOKENS_PER_PAGE,
    }


@dataclass(frozen=True)
class SourceResult:
    """One search result as the quote finder uses it: where it came from, its text and its sentences."""

    index: int  # 1-based position in the search response; the tie-breaker "earlier result"
    title: str
    url: str
    snippet: str
    date: str | None
    sentences: tuple[str, ...]

    @property
    def rankable(self) -> bool:
        return len(self.sentences) >= MIN_SENTENCES

    def as_dict(self) -> SourceResultJson:
        return {
            "index": self.index,
            "title": self.title,
            "url": self.url,
            "date": self.date,
            "snippet": self.snippet,
            "sentence_count": len(self.sentences),
            "sentences": list(self.sentences),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceResult:
        """Rebuild from `as_dict()` output (an item's stored input)."""
        return cls(
            index=int(data["index"]),
            title=str(data["title"]),
            url=str(data["url"]),
            snippet=str(data["snippet"]),
            date=data.get("date"),
            sentences=tuple(str(s) for s in data["sentences"]),
        )


def _text_field(item: Mapping[str, Any], name: str, position: int) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise ValueError(f"search result {position}: {name!r} must be a string, got {value!r}")
    return value


def prepare_results(results: Sequence[Mapping[str, Any]]) -> tuple[SourceResult, ...]:
    """Keep title, url, snippet and date (missing or null → None) of each result and split its snippet."""
    prepared: list[SourceResult] = []
    for position, item in enumerate(results, start=1):
        date = item.get("date")
        if date is not None and not isinstance(date, str):
            raise ValueError(f"search result {position}: 'date' must be a string or null, got {date!r}")
        snippet = _text_field(item, "snippet", position)
        prepared.append(
            SourceResult(
                index=position,
                title=_text_field(item, "title", position),
                url=_text_field(item, "url", position),
                snippet=snippet,
                date=date or None,
                sentences=tuple(split_snippet(snippet)),
            )
        )
    return tuple(prepared)


# ---- Requests -----------------------------------------------------------------------------------------


def rank_request(
    question: str, title: str, url: str, sentences: Sequence[str], model: str
) -> DecisionsRequest:
    """The Decisions body for one result: which numbered sentence answers best, and does any answer.

    The sentences appear twice on purpose: in the state so `has_answer` reads them, and as the choice
    descriptions so each option carries its own text.
    """
    if not MIN_SENTENCES <= len(sentences) <= MAX_SENTENCES:
        raise ValueError(
            f"a rank request needs {MIN_SENTENCES}-{MAX_SENTENCES} sentences, got {len(sentences)}"
        )
    numbered = {str(number): text for number, text in enumerate(sentences, start=1)}
    return {
        "model": model,
        "state": {"question": question, "source": {"title": title, "url": url}, "sentences": numbered},
        "questions": {
            BEST_QUESTION: {"type": "choice", "instructions": BEST_INSTRUCTIONS, "criteria": dict(numbered)},
            HAS_ANSWER_QUESTION: {
                "type": "noul",
                "instructions": HAS_ANSWER_INSTRUCTIONS,
                "criteria": dict(HAS_ANSWER_CRITERIA),
            },
        },
    }


def compare_question_name(number: int) -> str:
    """The compare question for candidate `number` (1-based, in compare-request order)."""
    return f"answers_{number}"


def compare_request(question: str, candidates: Sequence[str], model: str) -> DecisionsRequest:
    """The Decisions body that asks the same yes/no of every candidate sentence in one state."""
    if not 1 <= len(candidates) <= MAX_RANK_REQUESTS:
        raise ValueError(f"a compare request takes 1-{MAX_RANK_REQUESTS} candidates, got {len(candidates)}")
    return {
        "model": model,
        "state": {
            "question": question,
            "candidates": {str(number): text for number, text in enumerate(candidates, start=1)},
        },
        "questions": {
            compare_question_name(number): {
                "type": "noul",
                "instructions": f"Does candidate {number} state the answer to the question?",
                "criteria": dict(COMPARE_CRITERIA),
            }
            for number in range(1, len(candidates) + 1)
        },
    }


# ---- Reading answers ----------------------------------------------------------------------------------


def _probability(value: object, what: str) -> float:
    # bool is an int subclass; NaN fails the range test.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise QuoteAnswerError(f"{what} is not a probability: {value!r}")
    return float(value)


def _answer(answers: Mapping[str, Any], name: str, kind: str) -> Mapping[str, Any]:
    answer = answers.get(name)
    if not isinstance(answer, Mapping):
        raise QuoteAnswerError(f"answer {name!r} is missing")
    if answer.get("type", kind) != kind:
        raise QuoteAnswerError(f"answer {name!r} is {answer.get('type')!r}, expected {kind!r}")
    return answer


@dataclass(frozen=True)
class Candidate:
    """One result's chosen sentence and the numbers behind it. `answers` is set once compared."""

    result_index: int
    title: str
    url: str
    date: str | None
    sentence_number: int
    sentence: str
    p_best: float  # probability of the chosen option; only meaningful against its own result's sentences
    confidence: float
    has_answer: float
    probabilities: Mapping[str, float] = field(default_factory=dict, hash=False)  # every option's p
    request_id: str | None = None
    answers: float | None = None  # the compare probability

    def as_dict(self) -> CandidateJson:
        return {
            "result_index": self.result_index,
            "title": self.title,
            "url": self.url,
            "date": self.date,
            "sentence_number": self.sentence_number,
            "sentence": self.sentence,
            "p_best": self.p_best,
            "confidence": self.confidence,
            "has_answer": self.has_answer,
            "probabilities": dict(self.probabilities),
            "request_id": self.request_id,
            "answers": self.answers,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Candidate:
        """Rebuild from `as_dict()` output (an item's stored output)."""
        answers = data.get("answers")
        return cls(
            result_index=int(data["result_index"]),
            title=str(data["title"]),
            url=str(data["url"]),
            date=data.get("date"),
            sentence_number=int(data["sentence_number"]),
            sentence=str(data["sentence"]),
            p_best=float(data["p_best"]),
            confidence=float(data["confidence"]),
            has_answer=float(data["has_answer"]),
            probabilities={str(k): float(v) for k, v in data.get("probabilities", {}).items()},
            request_id=data.get("request_id"),
            answers=None if answers is None else float(answers),
        )


def parse_rank_answers(
    source: SourceResult, answers: Mapping[str, Any], *, request_id: str | None = None
) -> Candidate:
    """Read the chosen sentence, its probability, the confidence and has_answer from a rank answer."""
    best = _answer(answers, BEST_QUESTION, "choice")
    has_answer = _probability(_answer(answers, HAS_ANSWER_QUESTION, "noul").get("noul"), "has_answer")
    options = {str(number) for number in range(1, len(source.sentences) + 1)}
    choice = best.get("choice")
    if not isinstance(choice, str) or choice not in options:
        raise QuoteAnswerError(f"choice {choice!r} is not one of the {len(options)} sentence numbers")
    raw = best.get("probabilities")
    if not isinstance(raw, Mapping):
        raise QuoteAnswerError("choice answer has no probabilities")
    probabilities: dict[str, float] = {}
    for key, value in raw.items():
        if key not in options:
            raise QuoteAnswerError(f"probability for unknown option {key!r}")
        probabilities[key] = _probability(value, f"probability of option {key}")
    if choice not in probabilities:
        raise QuoteAnswerError(f"no probability for the chosen option {choice!r}")
    number = int(choice)
    return Candidate(
        result_index=source.index,
        title=source.title,
        url=source.url,
        date=source.date,
        sentence_number=number,
        sentence=source.sentences[number - 1],
        p_best=probabilities[choice],
        confidence=_probability(best.get("confidence"), "confidence"),
        has_answer=has_answer,
        probabilities=dict(sorted(probabilities.items(), key=lambda item: int(item[0]))),
        request_id=request_id,
    )


def parse_compare_answers(answers: Mapping[str, Any], count: int) -> tuple[float, ...]:
    """The compare probabilities in candidate order; exactly `count` answers must be present."""
    expected = [compare_question_name(number) for number in range(1, count + 1)]
    extra = sorted(set(answers) - set(expected))
    if extra:
        raise QuoteAnswerError(f"unexpected compare answers {extra} for {count} candidates")
    return tuple(_probability(_answer(answers, name, "noul").get("noul"), name) for name in expected)


# ---- Choosing the quote -------------------------------------------------------------------------------


def _check_cutoff(value: float, name: str) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be within [0, 1], got {value!r}")


def compare_pool(
    candidates: Sequence[Candidate], *, compare_min: float = COMPARE_MIN
) -> tuple[Candidate, ...]:
    """The candidates that go to the compare request, in result order (= compare numbering)."""
    _check_cutoff(compare_min, "compare_min")
    indexes = [c.result_index for c in candidates]
    if len(set(indexes)) != len(indexes):
        raise ValueError(f"one candidate per result, got result indexes {indexes}")
    return tuple(c for c in sorted(candidates, key=lambda c: c.result_index) if c.has_answer >= compare_min)


@dataclass(frozen=True)
class QuoteOutcome:
    """What to print: the quote, or no answer with the closest candidate (below cutoff)."""

    answer: Candidate | None
    closest: Candidate | None  # only when there is no answer
    closest_by: ClosestBy | None  # which probability put `closest` first
    ordering: tuple[Candidate, ...]  # compared candidates, best first; empty without a compare request
    compare_min: float = COMPARE_MIN
    quote_min: float = QUOTE_MIN

    @property
    def quoted(self) -> bool:
        return self.answer is not None

    @property
    def compared(self) -> bool:
        return bool(self.ordering)

    def as_dict(self) -> OutcomeJson:
        return {
            "status": "quoted" if self.quoted else "no_answer",
            "answer": None if self.answer is None else self.answer.as_dict(),
            "closest": None if self.closest is None else self.closest.as_dict(),
            "closest_by": self.closest_by,
            "compared": self.compared,
            "ordering": [c.as_dict() for c in self.ordering],
            "cutoffs": {"compare_min": self.compare_min, "quote_min": self.quote_min},
        }


def select_quote(
    candidates: Sequence[Candidate],
    compare_probabilities: Sequence[float] | None = None,
    *,
    compare_min: float = COMPARE_MIN,
    quote_min: float = QUOTE_MIN,
) -> QuoteOutcome:
    """Apply the cutoffs. `compare_probabilities` follow `compare_pool(candidates)` order, and must be
    given exactly when that pool is non-empty (there is a compare request only then).

    Sorting compares the unrounded values: two candidates that print the same at three decimals can
    still differ.
    """
    _check_cutoff(quote_min, "quote_min")
    pool = compare_pool(candidates, compare_min=compare_min)
    if not pool:
        if compare_probabilities is not None:
            raise ValueError("no candidate reaches compare_min, so there is no compare answer to apply")
        closest = max(candidates, key=lambda c: (c.has_answer, -c.result_index), default=None)
        by: ClosestBy | None = None if closest is None else "has_answer"
        return QuoteOutcome(None, closest, by, (), compare_min, quote_min)
    if compare_probabilities is None or len(compare_probabilities) != len(pool):
        got = None if compare_probabilities is None else len(compare_probabilities)
        raise ValueError(f"{len(pool)} compared candidates need {len(pool)} compare probabilities, got {got}")
    scored = [
        (_probability(p, f"compare probability {n}"), c)
        for n, (c, p) in enumerate(zip(pool, compare_probabilities, strict=True), start=1)
    ]
    scored.sort(key=lambda pair: (-pair[0], -pair[1].has_answer, pair[1].result_index))
    ordering = tuple(replace(c, answers=p) for p, c in scored)
    top = ordering[0]
    if scored[0][0] >= quote_min:
        return QuoteOutcome(top, None, None, ordering, compare_min, quote_min)
    return QuoteOutcome(None, top, "answers", ordering, compare_min, quote_min)


# ---- Run record ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankAttempt:
    """One rank request sent for one result: its candidate, or why there is none."""

    result_index: int
    request_id: str | None
    input_tokens: int | None
    candidate: Candidate | None
    raw_answers: Mapping[str, Any] | None = field(default=None, hash=False)  # kept when unreadable
    error: str | None = None

    def as_dict(self) -> RankAttemptJson:
        data: RankAttemptJson = {
            "result_index": self.result_index,
            "status": "failed" if self.candidate is None else "done",
            "request_id": self.request_id,
            "input_tokens": self.input_tokens,
            "error": self.error,
        }
        if self.candidate is not None:
            c = self.candidate
            data["choice"] = str(c.sentence_number)
            data["sentence"] = c.sentence
            data["p_best"] = c.p_best
            data["confidence"] = c.confidence
            data["has_answer"] = c.has_answer
            data["probabilities"] = dict(c.probabilities)
        if self.raw_answers is not None:
            data["answers"] = copy.deepcopy(dict(self.raw_answers))
        return data


@dataclass(frozen=True)
class CompareAttempt:
    """One compare request: which result each candidate number stands for, and what came back."""

    result_indexes: tuple[int, ...]  # candidate n is result result_indexes[n - 1]
    request_id: str | None
    input_tokens: int | None
    probabilities: tuple[float, ...] | None
    raw_answers: Mapping[str, Any] | None = field(default=None, hash=False)
    error: str | None = None

    def as_dict(self) -> CompareAttemptJson:
        numbered = {str(n): index for n, index in enumerate(self.result_indexes, start=1)}
        data: CompareAttemptJson = {
            "status": "failed" if self.probabilities is None else "done",
            "request_id": self.request_id,
            "input_tokens": self.input_tokens,
            "candidates": numbered,
            "answers": None,
            "error": self.error,
        }
        if self.probabilities is not None:
            data["answers"] = {compare_question_name(n): p for n, p in enumerate(self.probabilities, start=1)}
        elif self.raw_answers is not None:
            data["answers"] = copy.deepcopy(dict(self.raw_answers))
        return data


class QuoteRunRecord:
    """Everything one question's run produced, kept as it happens so that a failure midway still leaves
    every result, sentence, probability and request id recorded.

    Each `record_*` call stores first and raises afterwards when an answer can't be read. The order of
    calls follows the flow: search → one rank per result (any order; failures may be retried) → at most one
    compare → `finish()`. Which results were ranked and compared is checked here, so a run can't exceed
    MAX_DECISIONS_REQUESTS successful requests, compare a pool that later changes, or compare (and quote)
    while a result's rank failed.
    """

    def __init__(
        self,
        question: str,
        model: str,
        *,
        compare_min: float = COMPARE_MIN,
        quote_min: float = QUOTE_MIN,
    ) -> None:
        _check_cutoff(compare_min, "compare_min")
        _check_cutoff(quote_min, "quote_min")
        self.question = question
        self.model = model
        self.compare_min = compare_min
        self.quote_min = quote_min
        self.search_request_id: str | None = None
        self.search_error: str | None = None
        self._results: tuple[SourceResult, ...] | None = None
        self._ranks: list[RankAttempt] = []
        self._compares: list[CompareAttempt] = []
        self._outcome: QuoteOutcome | None = None
        self._errors: list[str] = []

    # -- search

    def record_search(
        self, results: Sequence[Mapping[str, Any]], *, request_id: str | None = None
    ) -> tuple[SourceResult, ...]:
        """Store the search results with their sentences; returns them for the rank step."""
        if self._results is not None:
            raise ValueError("search results are already recorded")
        self.search_request_id = request_id
        self._results = prepare_results(results)
        self.search_error = None
        return self._results

    def record_search_failure(self, error: str, *, request_id: str | None = None) -> None:
        if self._results is not None:
            raise ValueError("search results are already recorded")
        self.search_request_id = request_id
        self.search_error = error

    @property
    def results(self) -> tuple[SourceResult, ...]:
        return () if self._results is None else self._results

    @property
    def rank_targets(self) -> tuple[SourceResult, ...]:
        """The results that get a rank request: those with a usable sentence, at most MAX_RANK_REQUESTS."""
        return tuple(r for r in self.results if r.rankable)[:MAX_RANK_REQUESTS]

    def _target(self, result_index: int) -> SourceResult:
        for result in self.rank_targets:
            if result.index == result_index:
                return result
        raise ValueError(f"result {result_index} gets no rank request")

    def rank_request(self, result_index: int) -> DecisionsRequest:
        result = self._target(result_index)
        return rank_request(self.question, result.title, result.url, result.sentences, self.model)

    # -- rank

    def _check_rank_open(self, result_index: int) -> SourceResult:
        result = self._target(result_index)
        if self._compares:
            raise ValueError("the compare step has started; rank results can't change its pool")
        if any(a.result_index == result_index and a.candidate is not None for a in self._ranks):
            raise ValueError(f"result {result_index} is already ranked")
        return result

    def record_rank(
        self,
        result_index: int,
        answers: Mapping[str, Any],
        *,
        request_id: str | None = None,
        input_tokens: int | None = None,
    ) -> Candidate:
        """Store one rank answer and return its candidate. An unreadable answer is stored raw, then raises."""
        result = self._check_rank_open(result_index)
        try:
            candidate = parse_rank_answers(result, answers, request_id=request_id)
        except QuoteAnswerError as error:
            raw = copy.deepcopy(dict(answers))
            self._ranks.append(RankAttempt(result_index, request_id, input_tokens, None, raw, str(error)))
            raise
        self._ranks.append(RankAttempt(result_index, request_id, input_tokens, candidate))
        return candidate

    def record_rank_failure(
        self,
        result_index: int,
        error: str,
        *,
        request_id: str | None = None,
        input_tokens: int | None = None,
    ) -> None:
        self._check_rank_open(result_index)
        self._ranks.append(RankAttempt(result_index, request_id, input_tokens, None, None, error))

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """One candidate per successfully ranked result, in result order."""
        found = [a.candidate for a in self._ranks if a.candidate is not None]
        return tuple(sorted(found, key=lambda c: c.result_index))

    @property
    def unranked(self) -> tuple[int, ...]:
        """Rank targets with no attempt at all yet."""
        tried = {a.result_index for a in self._ranks}
        return tuple(r.index for r in self.rank_targets if r.index not in tried)

    @property
    def failed_ranks(self) -> tuple[int, ...]:
        """Rank targets tried without a candidate: every attempt failed or was unreadable (a later
        successful retry takes a result off this list)."""
        tried = {a.result_index for a in self._ranks}
        ranked = {c.result_index for c in self.candidates}
        return tuple(r.index for r in self.rank_targets if r.index in tried and r.index not in ranked)

    @property
    def ranks_complete(self) -> bool:
        """Every rank target has its candidate: only then may the compare step run."""
        return self._results is not None and not self.unranked and not self.failed_ranks

    # -- compare

    def _pool(self) -> tuple[Candidate, ...]:
        """The compare pool, once every result is ranked.

        A result whose rank request failed stops the run before the compare step, as the reference recipe
        stops at a failed request: a compare over the other results could quote a sentence that the
        missing result would have beaten, and the recorded outcomes (docs/spec.md §7.3) never include a
        choice made over part of the results. Retrying the failed rank lets the run go on.
        """
        if self._results is None:
            raise ValueError("no search results recorded")
        if self.unranked:
            raise ValueError(f"results {list(self.unranked)} have no rank attempt yet")
        if self.failed_ranks:
            raise ValueError(
                f"results {list(self.failed_ranks)} could not be ranked; "
                "the run stops before the compare step"
            )
        return compare_pool(self.candidates, compare_min=self.compare_min)

    def compare_request(self) -> DecisionsRequest | None:
        """The compare body, or None when no candidate reaches COMPARE_MIN (then call `finish()`)."""
        pool = self._pool()
        if not pool:
            return None
        return compare_request(self.question, [c.sentence for c in pool], self.model)

    def _check_compare_open(self) -> tuple[Candidate, ...]:
        if any(a.probabilities is not None for a in self._compares):
            raise ValueError("the compare answer is already recorded")
        pool = self._pool()
        if not pool:
            raise ValueError("no candidate reaches compare_min; there is no compare request")
        return pool

    def record_compare(
        self,
        answers: Mapping[str, Any],
        *,
        request_id: str | None = None,
        input_tokens: int | None = None,
    ) -> QuoteOutcome:
        """Store the compare answer and decide. An unreadable answer is stored raw, then raises."""
        pool = self._check_compare_open()
        indexes = tuple(c.result_index for c in pool)
        try:
            probabilities = parse_compare_answers(answers, len(pool))
        except QuoteAnswerError as error:
            raw = copy.deepcopy(dict(answers))
            self._compares.append(CompareAttempt(indexes, request_id, input_tokens, None, raw, str(error)))
            raise
        self._compares.append(CompareAttempt(indexes, request_id, input_tokens, probabilities))
        self._outcome = self._select(probabilities)
        return self._outcome

    def record_compare_failure(
        self,
        error: str,
        *,
        request_id: str | None = None,
        input_tokens: int | None = None,
    ) -> None:
        pool = self._check_compare_open()
        indexes = tuple(c.result_index for c in pool)
        self._compares.append(CompareAttempt(indexes, request_id, input_tokens, None, None, error))

    # -- end

    def finish(self) -> QuoteOutcome:
        """The outcome once every step that must run has run (raises while one is missing or failed)."""
        if self._outcome is None:
            if self._pool():
                raise ValueError("the compare request has not been answered")
            self._outcome = self._select(None)
        return self._outcome

    def _select(self, probabilities: Sequence[float] | None) -> QuoteOutcome:
        return select_quote(
            self.candidates, probabilities, compare_min=self.compare_min, quote_min=self.quote_min
        )

    @property
    def outcome(self) -> QuoteOutcome | None:
        return self._outcome

    def record_error(self, error: str) -> None:
        """A failure outside any one request (the run stopped)."""
        self._errors.append(error)

    def request_ids(self) -> list[str]:
        """Every upstream request id, search first, in the order the requests were recorded."""
        ids = [self.search_request_id]
        ids += [a.request_id for a in self._ranks]
        ids += [a.request_id for a in self._compares]
        return [i for i in ids if i]

    def as_dict(self) -> RunJson:
        """A JSON-ready snapshot; valid at any point of the run."""
        attempts: list[RankAttempt | CompareAttempt] = [*self._ranks, *self._compares]
        return {
            "question": self.question,
            "model": self.model,
            "search": {
                "request_id": self.search_request_id,
                "error": self.search_error,
                "results": None if self._results is None else [r.as_dict() for r in self._results],
            },
            "rank": [a.as_dict() for a in self._ranks],
            "compare": [a.as_dict() for a in self._compares],
            "outcome": None if self._outcome is None else self._outcome.as_dict(),
            "errors": list(self._errors),
            "totals": {
                "decisions_requests": len(attempts),
                "failed_requests": sum(1 for a in attempts if a.error is not None),
                "input_tokens": sum(a.input_tokens or 0 for a in attempts),
                "request_ids": self.request_ids(),
            },
        }
