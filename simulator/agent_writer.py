"""The simulator's stand-in for the Agent API: answers assembled from corpus sentences, with citations.

This is NOT a language model and not a fact checker. It searches the bundled corpus (every date: the agent
searches the web, so it sees past the knowledge cutoff), picks the sentences that best cover the question,
and writes them as plain prose with `[n]` markers pointing at numbered search results. To exercise the
answer gate the way real answers do, the citations are imperfect on purpose and deterministically so:

* most sentences cite the result they came from (so the cited snippet states them),
* some carry no marker at all (uncited),
* some cite a different result that only shares the topic (loosely cited: weak or unsupported support).

Which sentence gets which treatment is a hash of the seed, the prompt and the sentence position, so one
question always yields the same answer. An investigation prompt (one that quotes a sentence of the answer
it also contains, asking for a replacement) gets one to three correctly cited sentences from a fresh search
for that sentence.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from simulator.index import CorpusIndex, Hit, split_sentences
from simulator.judge import compare, features, topic_coverage

__all__ = ["AgentWriter", "WrittenAnswer", "flagged_sentence"]

MAX_RESULTS = 5
SNIPPET_SENTENCES = 4
MIN_ANSWER_SENTENCES = 3
MAX_ANSWER_SENTENCES = 6
CORRECT_SHARE = 55  # percent of sentences cited to their own result
UNCITED_SHARE = 20  # percent with no marker; the rest cite another result
MIN_REWRITE_COVERAGE = 0.4  # a rewrite sentence must share this much with the flagged sentence
NEAR_DUPLICATE = 0.75
MIN_RELEVANCE = 0.3  # answer sentences cover at least this share of the question's topic...
RELATIVE_RELEVANCE = 0.6  # ...and at least this share of what the best sentence covers
NO_SOURCES = "No search result answers this question."

_MARKER = re.compile(r"\s*\[\d+\]")
_QUOTED = re.compile(r"[\"“]([^\"”]{20,})[\"”]")


@dataclass(frozen=True)
class WrittenAnswer:
    """The answer text, its numbered search results, and everything the writer read (for token counts)."""

    text: str
    results: list[dict[str, object]]
    read: str


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip("\"“”'‘’ ")


def flagged_sentence(prompt: str) -> str | None:
    """The sentence an investigation prompt asks to replace, or None for an ordinary question.

    An investigation carries the earlier answer and, quoted once more, the sentence in question. So the
    test is wording-free: a sentence that occurs twice once citation markers are removed. A quoted span
    in a prompt that talks about replacing a sentence is the fallback.
    """
    plain = _normalise(_MARKER.sub("", prompt))
    repeated = [
        s
        for s in (_normalise(piece) for piece in split_sentences(_MARKER.sub("", prompt)))
        if len(s) >= 20 and plain.count(s) >= 2
    ]
    if repeated:
        return max(repeated, key=lambda s: (plain.rfind(s), len(s)))
    lower = prompt.lower()
    quoted = _QUOTED.findall(prompt)
    if quoted and "sentence" in lower and re.search(r"replace|rewrite|instead|take its place", lower):
        return _normalise(quoted[-1])
    return None


class AgentWriter:
    """Writes cited answers from the corpus index. Stateless apart from the index: safe across threads."""

    def __init__(self, index: CorpusIndex, seed: int = 0) -> None:
        self._index = index
        self._seed = seed

    def write(self, prompt: str, instructions: str = "") -> WrittenAnswer:
        flagged = flagged_sentence(prompt)
        written = self._rewrite(prompt, flagged) if flagged else self._answer(prompt)
        return WrittenAnswer(written.text, written.results, f"{instructions}\n{prompt}\n{written.read}")

    # -- ordinary questions -------------------------------------------------------------------------

    def _answer(self, prompt: str) -> WrittenAnswer:
        hits = self._index.search(prompt, MAX_RESULTS, max_sentences=SNIPPET_SENTENCES)
        results = _results(hits)
        if not hits:
            return WrittenAnswer(NO_SOURCES, [], "")
        pool = sorted(
            (
                (topic_coverage(prompt, sentence), result_id, position, sentence)
                for result_id, hit in enumerate(hits, start=1)
                for position, sentence in enumerate(hit.sentences)
            ),
            key=lambda item: (-item[0], item[1], item[2]),
        )
        wanted = MIN_ANSWER_SENTENCES + self._hash(prompt) % (MAX_ANSWER_SENTENCES - MIN_ANSWER_SENTENCES + 1)
        floor = max(MIN_RELEVANCE, RELATIVE_RELEVANCE * pool[0][0]) if pool else 0.0
        asked_values = _values(prompt)
        chosen: list[tuple[int, int, str]] = []
        for coverage, result_id, position, sentence in pool:
            if len(chosen) == wanted or (coverage < floor and chosen):
                break
            if asked_values and not asked_values & _values(sentence) and chosen:
                continue  # a question about 2024 or Python 3.12 is not answered by 2025 or 3.14
            if not _duplicates(sentence, [c[2] for c in chosen]):
                chosen.append((result_id, position, sentence))
        chosen.sort()
        rendered: list[str] = []
        for number, (result_id, _, sentence) in enumerate(chosen):
            roll = self._hash(f"{prompt}|{number}") % 100
            if number == 0 or roll < CORRECT_SHARE:
                cite: int | None = result_id
            elif roll < CORRECT_SHARE + UNCITED_SHARE:
                cite = None
            else:
                cite = _loose_citation(sentence, result_id, hits)
            rendered.append(_with_marker(sentence, cite))
        half = (len(rendered) + 1) // 2 if len(rendered) >= 4 else len(rendered)
        paragraphs = [" ".join(rendered[:half]), " ".join(rendered[half:])]
        text = "\n\n".join(p for p in paragraphs if p)
        return WrittenAnswer(text, results, "\n".join(hit.snippet for hit in hits))

    # -- investigations -----------------------------------------------------------------------------

    def _rewrite(self, prompt: str, flagged: str) -> WrittenAnswer:
        hits = self._index.search(flagged, MAX_RESULTS, max_sentences=SNIPPET_SENTENCES)
        if not hits:
            return WrittenAnswer(NO_SOURCES, [], "")
        target = features(flagged)
        already_said = _normalise(_MARKER.sub("", prompt)).replace(flagged, "")
        pool = sorted(
            (
                (compare(target, features(sentence)).coverage, result_id, position, sentence)
                for result_id, hit in enumerate(hits, start=1)
                for position, sentence in enumerate(hit.sentences)
            ),
            key=lambda item: (-item[0], item[1], item[2]),
        )
        fresh = [item for item in pool if _normalise(item[3]) not in already_said] or pool
        wanted = 1 + self._hash(f"rewrite|{flagged}") % 3
        floor = max(MIN_REWRITE_COVERAGE, RELATIVE_RELEVANCE * fresh[0][0])
        chosen: list[tuple[int, int, str]] = []
        for coverage, result_id, position, sentence in fresh:
            if len(chosen) == wanted or (coverage < floor and chosen):
                break
            if not _duplicates(sentence, [c[2] for c in chosen]):
                chosen.append((result_id, position, sentence))
        text = " ".join(_with_marker(sentence, result_id) for result_id, _, sentence in chosen)
        return WrittenAnswer(text, _results(hits), "\n".join(hit.snippet for hit in hits))

    def _hash(self, text: str) -> int:
        return int.from_bytes(hashlib.blake2b(f"{self._seed}|{text}".encode(), digest_size=8).digest(), "big")


def _results(hits: list[Hit]) -> list[dict[str, object]]:
    return [
        {
            "id": number,
            "url": hit.document.url,
            "title": hit.document.title,
            "snippet": hit.snippet,
            "date": hit.document.date,
        }
        for number, hit in enumerate(hits, start=1)
    ]


def _values(text: str) -> frozenset[str]:
    """Numbers and dates in a text (the judge's value tokens: "#3.12", "y:2024", "m:october")."""
    return frozenset(w for w in features(text).words if w[:1] == "#" or w[:2] in ("y:", "m:", "d:"))


def _duplicates(sentence: str, chosen: list[str]) -> bool:
    mine = features(sentence)
    return any(
        compare(mine, features(other)).coverage >= NEAR_DUPLICATE
        or compare(features(other), mine).coverage >= NEAR_DUPLICATE
        for other in chosen
    )


def _loose_citation(sentence: str, own: int, hits: list[Hit]) -> int | None:
    """The other result closest to the sentence: on its topic, as a hurried writer cites, but not its
    source."""
    mine = features(sentence)
    others = [n for n in range(1, len(hits) + 1) if n != own]
    if not others:
        return None
    return max(others, key=lambda n: (compare(mine, features(hits[n - 1].snippet)).coverage, -n))


def _with_marker(sentence: str, cite: int | None) -> str:
    """Perplexity-style marker before the final punctuation ("... 1990[2]."); none for an uncited one."""
    if cite is None:
        return sentence
    if sentence[-1:] in ".!?":
        return f"{sentence[:-1]}[{cite}]{sentence[-1]}"
    return f"{sentence}[{cite}]"
