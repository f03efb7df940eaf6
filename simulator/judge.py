"""The simulator's stand-in for the Decisions model: one deterministic word-overlap heuristic.

This is NOT a fact checker. It exists so tests, the demo and load drills get answers that behave like the
real API on the bundled corpus: supported facts score high, facts that a source contradicts score low, and
anything the simulated model cannot see (a recent event without grounding, a claim buried behind filler)
scores low as well, as the reference runs recorded. It knows nothing the corpus does not say.

The heuristic, in full:

* Text becomes features: content words (lowercased, lightly stemmed, stopwords dropped), names (capitalised
  words), dates (years, month names, day numbers next to a month), other numbers, and a negation flag.
  Names, dates and numbers weigh double because they are what a claim is usually about.
* A claim against one source sentence gives *coverage* (the weighted share of the claim's words the
  sentence contains). The sentence *supports* the claim when it holds every name, date and number of the
  claim, at least 80 % of its weight, and the same polarity (both negated or neither). It *contradicts* the
  claim when exactly one kind of detail disagrees (names, dates or numbers: the claim's value is missing and
  the sentence offers another of the same kind) while at least 70 % of everything else agrees, or when the
  polarity differs on an otherwise covering sentence. Two kinds of disagreement at once mean the sentence
  is about something else (another year's prize, another release), not a contradiction.
* "Is the claim true?" compares each sentence of the claim with what the model knows: corpus documents
  dated before the knowledge cutoff (retrieved by the engine), the grounding evidence, and any passages in
  the state. Support anywhere makes a sentence true; otherwise a contradiction makes it false; otherwise it
  is unknown and scores low, scaled by how much of it the best source covers. A contradicted sentence makes
  the whole state false; otherwise the best-backed sentence decides, so neutral text around a claim (an
  office memo) neither helps nor hurts.
* Answer-gate questions read the passages in the state: `supports_n` from the best sentence of passage n
  (partial coverage gives the weak middle band), `contradicts_n` from a contradicting sentence unless the
  same passage also supports the claim, `checkable` from the claim's own shape (questions, opinions and
  transitions are not checkable).
* Quote questions read `{question, sentences}` or `{question, candidates}`: a sentence answers when it
  covers the question's topic and holds the kind of detail the question asks for (a count of the counted
  thing, a measurement with a unit, a date, a name, a colour).
* Question intent comes from the instructions and criteria text (opinion/checkable/statement of fact,
  contradict, answer, support/imply, otherwise truth), with the number in the question's name or text
  ("passage 2", `supports_2`) choosing the passage. Unknown shapes fall back to the truth question;
  nothing raises.

Packed requests. A mapping state whose `claims` is a mapping carries several claims (`{"claims": {"s1": ...,
"s3": ...}, "passages": {...}}`); each question is about the claim its name starts with (`s1_supports_2`) or
that its text names ("claim s1"), and is judged as it would be in a request holding that claim alone: the
claim, the question and the passage it names are all the heuristic reads. A packed rank request (`{"question":
..., "results": {"r1": {"source": ..., "sentences": {...}}, ...}}`) is read the same way: each question is
about the result its name starts with (`r1_best`) and reads that result's sentences alone.

Every probability then gets a jitter of under one hundredth, keyed by the seed and what the question is about
(the model, the question's intent and type, the claim, the state's question and the passages the question
reads), never by the rest of the request: identical requests can differ in the second decimal on the real
API, ours are reproducible, and a question asked alone or in a packed request gets one answer. Grounded
requests key it by the whole request and the question's name instead, since their evidence comes from a
search over every question of the request.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from simulator.index import STOPWORDS, split_sentences

__all__ = [
    "Features",
    "Judge",
    "Match",
    "answer_score",
    "checkable_score",
    "compare",
    "features",
    "packed_claims",
    "packed_results",
    "strings_in",
    "topic_coverage",
]


def _split(words: str) -> list[str]:
    return words.split()


JITTER = 0.016  # total width: probabilities move by at most +/- 0.008

MONTHS = {
    name: number
    for number, name in enumerate(
        _split("january february march april may june july august september october november december"), 1
    )
}
NEGATIONS = frozenset({"not", "no", "never", "none", "neither", "nor", "without", "cannot"})
IRREGULAR = {"won": "win", "wins": "win", "winning": "win", "held": "hold", "took": "take", "taken": "take"}
COLOURS = frozenset(
    _split(
        "red orange yellow green blue purple violet pink brown black white grey gray gold golden silver "
        "crimson scarlet navy indigo turquoise maroon beige sepia"
    )
)
UNITS = frozenset(
    _split(
        "metre meter kilometre kilometer km cm mm centimetre feet foot ft mile inch yard minute second hour "
        "day week month year tonne ton kilogram kg gram pound percent"
    )
)
# How-questions that ask for a measurement, and the words a sentence uses for that attribute.
MEASURES = {
    "deep": "deep depth deepest",
    "tall": "tall height high",
    "high": "high height tall altitude",
    "long": "long length take took last time travel",
    "far": "far distance away",
    "old": "old age",
    "big": "big size large area",
    "large": "large size big area",
    "wide": "wide width",
    "heavy": "heavy weigh weight",
    "much": "much cost price amount total change",
}
# Words that shape a question but are not its topic.
QUESTION_WORDS = frozenset(
    _split(
        "how many much long deep tall high far old big large wide heavy when year date what which who whom "
        "where why did does do was were is are take took color colour kind type number"
    )
)
OPINION_MARKERS = (
    "i think",
    "i believe",
    "in my opinion",
    "arguably",
    "should",
    "best",
    "worst",
    "beautiful",
    "amazing",
    "fascinating",
    "remarkable",
    "exciting",
    "interesting",
)
TRANSITIONS = (
    "in summary",
    "in conclusion",
    "overall",
    "to summarize",
    "to summarise",
    "here is",
    "here's",
    "let me",
    "note that",
    "in short",
)

_WORD = re.compile(r"[^\W_]+(?:[.,'’][^\W_]+)*")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)*")


def _stem(word: str) -> str:
    """A light suffix stripper: enough to match released/release or bones/bone, nothing more."""
    if word in IRREGULAR:
        return IRREGULAR[word]
    if len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    return word


@dataclass(frozen=True, eq=False)
class Features:
    """What the heuristic sees of a text. Values are stored among `words` with a kind prefix."""

    words: frozenset[str]  # content stems, plus "#n" numbers, "y:" years, "m:" months, "d:" days
    names: frozenset[str]  # stems of capitalised words
    negated: bool
    weight: int  # total weight of `words` (names and values count double)
    kinds: frozenset[str]  # value kinds present: "number", "y:", "m:", "d:"
    by_prefix: Mapping[str, tuple[str, ...]]  # words of 5+ letters by their first five, for prefix matches


def _value_kind(word: str) -> str | None:
    if word.startswith("#"):
        return "number"
    if word[:2] in ("y:", "m:", "d:"):
        return word[:2]
    return None


def _is_heavy(word: str, names: frozenset[str]) -> bool:
    return word in names or _value_kind(word) is not None


def _normal_number(raw: str) -> str:
    number = raw.replace(",", "")
    while number.count(".") >= 2 and number.endswith(".0"):  # 3.15.0 is the same release as 3.15
        number = number[:-2]
    return number


@lru_cache(maxsize=16384)
def features(text: str) -> Features:
    """Tokenise, stem and classify. Cached: corpus sentences are compared against many claims."""
    tokens = [t for t in (m.group() for m in _WORD.finditer(text)) if t]
    words: set[str] = set()
    names: set[str] = set()
    negated = False
    for i, raw in enumerate(tokens):
        token = re.sub(r"['’]s$", "", raw)
        lower = token.lower()
        if _NUMBER.fullmatch(token):
            number = _normal_number(token)
            neighbours = {tokens[j].lower() for j in (i - 1, i + 1) if 0 <= j < len(tokens)}
            if re.fullmatch(r"\d{4}", token) and 1000 <= int(token) <= 2100:
                words.add(f"y:{token}")
            elif number.isdigit() and 1 <= int(number) <= 31 and neighbours & MONTHS.keys():
                words.add(f"d:{int(number)}")
            else:
                words.add(f"#{number}")
            continue
        if lower in MONTHS and token[0].isupper():
            beside = [tokens[j] for j in (i - 1, i + 1) if 0 <= j < len(tokens)]
            if lower != "may" or any(_NUMBER.fullmatch(n) for n in beside):
                words.add(f"m:{lower}")
                continue
        if lower in NEGATIONS or lower.endswith(("n't", "n’t")):
            negated = True
            continue
        if lower in STOPWORDS or len(lower) < 2:
            continue
        stem = _stem(lower)
        words.add(stem)
        if token[0].isupper():
            names.add(stem)
    frozen_names = frozenset(names)
    weight = sum(2 if _is_heavy(w, frozen_names) else 1 for w in words)
    kinds = frozenset(k for k in (_value_kind(w) for w in words) if k)
    by_prefix: dict[str, list[str]] = {}
    for word in words:
        if len(word) >= 5 and _value_kind(word) is None:
            by_prefix.setdefault(word[:5], []).append(word)
    buckets = {prefix: tuple(group) for prefix, group in by_prefix.items()}
    return Features(frozenset(words), frozen_names, negated, weight, kinds, buckets)


def _contains(sentence: Features, word: str) -> bool:
    """Exact stem match, or for longer words a shared prefix (discover/discovery, licens/license)."""
    if word in sentence.words:
        return True
    if len(word) < 5 or _value_kind(word):
        return False
    return any(
        other.startswith(word) or word.startswith(other) for other in sentence.by_prefix.get(word[:5], ())
    )


@dataclass(frozen=True)
class Match:
    """One claim against one source sentence."""

    coverage: float  # weighted share of the claim's words found in the sentence
    supports: bool
    contradicts: bool
    agreement: float  # coverage of the claim outside the disagreeing details


def _weight(words: Iterable[str], names: frozenset[str]) -> int:
    return sum(2 if _is_heavy(w, names) else 1 for w in words)


def compare(claim: Features, sentence: Features) -> Match:
    """Support and contradiction of `claim` by one `sentence`, as described in the module docstring."""
    if not claim.words:
        return Match(0.0, False, False, 0.0)
    matched = {w for w in claim.words if _contains(sentence, w)}
    missing = claim.words - matched
    coverage = _weight(matched, claim.names) / claim.weight
    missing_names = {w for w in missing if w in claim.names}
    missing_values = {w for w in missing if _value_kind(w)}
    same_polarity = claim.negated == sentence.negated
    supports = not missing_names and not missing_values and coverage >= 0.8 and same_polarity
    if supports:
        return Match(coverage, True, False, coverage)
    disagreeing: set[str] = set()
    kinds = 0
    extra_names = {n for n in sentence.names if not _contains(claim, n)}
    if missing_names and extra_names:
        kinds += 1
        disagreeing |= missing_names
    dates = {w for w in missing_values if w[:2] in ("y:", "m:", "d:") and w[:2] in sentence.kinds}
    if dates:
        kinds += 1
        disagreeing |= dates
    numbers = {w for w in missing_values if w.startswith("#") and "number" in sentence.kinds}
    if numbers:
        kinds += 1
        disagreeing |= numbers
    rest = claim.words - disagreeing
    rest_weight = _weight(rest, claim.names)
    agreement = _weight(matched, claim.names) / rest_weight if rest_weight else 0.0
    contradicts = kinds == 1 and agreement >= 0.7 and len(matched) >= 2
    if not contradicts and not same_polarity and not missing_names and not missing_values:
        contradicts = coverage >= 0.8  # "never won" against "won": the same statement, negated
    return Match(coverage, False, contradicts, agreement)


def checkable_score(claim: str) -> float:
    """Is the text a verifiable statement? Questions, opinions and transitions are not."""
    text = claim.strip()
    lower = text.lower()
    feats = features(text)
    specific = any(_is_heavy(w, feats.names) for w in feats.words)
    if not text or text.endswith("?"):
        return 0.04
    if any(re.search(rf"\b{re.escape(marker)}\b", lower) for marker in OPINION_MARKERS):
        return 0.22
    if lower.startswith(TRANSITIONS) and not specific:
        return 0.12
    if specific and len(feats.words) >= 3:
        return 0.985
    if len(feats.words) >= 4:
        return 0.82
    return 0.3


def _expected_answer(question: str) -> tuple[str | None, str]:
    """The kind of detail a question asks for, and (for how-many questions) the counted word's stem."""
    lower = question.lower()
    counted = re.search(r"\bhow many ([^\W\d_]+)", lower)
    if counted:
        return "count", _stem(counted.group(1))
    measure = re.search(r"\bhow (" + "|".join(MEASURES) + r")\b", lower)
    if measure:
        return "measure", measure.group(1)
    if re.search(r"\b(?:when|what year|which year|what date|in what year)\b", lower):
        return "date", ""
    if re.search(r"\bwho\b", lower):
        return "name", ""
    if re.search(r"\bwhat colou?r\b", lower):
        return "colour", ""
    return None, ""


_QUESTION_STEMS = frozenset(_stem(w) for w in QUESTION_WORDS)
_UNIT_STEMS = frozenset(_stem(w) for w in UNITS)
_COLOUR_STEMS = frozenset(_stem(w) for w in COLOURS)
_MEASURE_STEMS = {kind: frozenset(_stem(w) for w in words.split()) for kind, words in MEASURES.items()}


def _topic(question: Features) -> frozenset[str]:
    return frozenset(w for w in question.words if w not in _QUESTION_STEMS)


def topic_coverage(question: str, sentence: str) -> float:
    """Weighted share of the question's topic words (its question words left out) found in `sentence`."""
    q = features(question)
    topic = _topic(q)
    if not topic:
        return 0.0
    s = features(sentence)
    return _weight({w for w in topic if _contains(s, w)}, q.names) / _weight(topic, q.names)


def answer_score(question: str, sentence: str) -> float:
    """How well `sentence` states the answer to `question`, in [0, 1].

    Topic coverage (the question's words other than its question words) times whether the sentence holds
    the kind of detail asked for; a sentence on topic without that detail stays below 0.45.
    """
    kind, detail = _expected_answer(question)
    q = features(question)
    s = features(sentence)
    if not _topic(q):
        return 0.05
    coverage = topic_coverage(question, sentence)
    new_values = {w for w in s.words if _value_kind(w) and w not in q.words}
    strength = 0.0
    if kind == "count":
        strength = 1.0 if detail and _contains(s, detail) and new_values else 0.0
    elif kind == "measure":
        numbers = {w for w in new_values if w.startswith("#") or w.startswith("y:")}
        has_unit = not s.words.isdisjoint(_UNIT_STEMS)
        has_attribute = not s.words.isdisjoint(_MEASURE_STEMS[detail])
        if numbers:
            strength = 1.0 if has_unit and has_attribute else 0.7 if has_unit else 0.5
    elif kind == "date":
        strength = 1.0 if any(w[:2] in ("y:", "m:") for w in new_values) else 0.0
    elif kind == "name":
        strength = 1.0 if any(n not in q.words for n in s.names) else 0.0
    elif kind == "colour":
        strength = 0.0 if s.words.isdisjoint(_COLOUR_STEMS) else 1.0
    else:
        strength = 1.0 if coverage >= 0.8 else 0.0
    if strength:
        return min(1.0, 0.08 + 0.9 * coverage**2 * strength)
    return 0.45 * coverage


@dataclass(frozen=True)
class _StateView:
    """The parts of a Decisions `state` the heuristic reads."""

    claim: str
    question: str
    numbered: dict[str, str]  # passages, sentences or candidates by their key
    kind: str  # "passages" | "sentences" | "candidates" | ""
    claims: dict[str, str] = field(default_factory=dict)  # a packed request's claims by their key
    # a packed rank request's results by their key, each its numbered sentences
    results: dict[str, dict[str, str]] = field(default_factory=dict)


def strings_in(value: object) -> list[str]:
    """Every string inside a JSON value, in document order (iterative: deep nesting cannot overflow)."""
    found: list[str] = []
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))
    return found


def packed_claims(state: object) -> dict[str, str] | None:
    """The claims of a packed request by their key (its state is a mapping whose `claims` is a mapping),
    or None for any other state."""
    if not isinstance(state, Mapping):
        return None
    claims = state.get("claims")
    if not isinstance(claims, Mapping):
        return None
    return {str(key): "\n".join(strings_in(value)) for key, value in claims.items()}


def packed_results(state: object) -> dict[str, dict[str, str]] | None:
    """The results of a packed rank request by their key, each its numbered sentences (its state is a
    mapping whose `results` maps keys to results with `sentences`), or None for any other state."""
    if not isinstance(state, Mapping):
        return None
    results = state.get("results")
    if not isinstance(results, Mapping) or not results:
        return None
    found: dict[str, dict[str, str]] = {}
    for key, result in results.items():
        sentences = result.get("sentences") if isinstance(result, Mapping) else None
        if not isinstance(sentences, Mapping):
            return None
        found[str(key)] = {str(k): "\n".join(strings_in(v)) for k, v in sentences.items()}
    return found


_CLAIM_PREFIX = re.compile(r"([^\W_]+)_")
_CLAIM_IN_TEXT = re.compile(r"\bclaim\s+([^\W_]+)", re.I)


def _claim_key(name: str, text: str, claims: Mapping[str, object]) -> str | None:
    """The packed claim a question is about: its name's prefix (`s1_supports_2`), else "claim s1" in its
    text."""
    prefix = _CLAIM_PREFIX.match(name)
    if prefix and prefix.group(1) in claims:
        return prefix.group(1)
    for named in _CLAIM_IN_TEXT.finditer(text):
        if named.group(1) in claims:
            return named.group(1)
    return None


def _own_view(view: _StateView, name: str, text: str) -> _StateView:
    """The state as one question of a packed request sees it: its own claim in place of the whole state.
    A question naming no claim of the pack reads the whole state, as any unknown shape does."""
    if view.results:
        # A packed rank request: the question reads its own result's sentences, as its unpacked one does.
        key = _claim_key(name, text, view.results)
        return view if key is None else replace(view, numbered=view.results[key], kind="sentences")
    if not view.claims:
        return view
    key = _claim_key(name, text, view.claims)
    return view if key is None else replace(view, claim=view.claims[key])


def _view(state: object) -> _StateView:
    if isinstance(state, str):
        return _StateView(state, "", {}, "")
    if not isinstance(state, Mapping):
        return _StateView("\n".join(strings_in(state)), "", {}, "")
    numbered: dict[str, str] = {}
    kind = ""
    for key in ("passages", "sentences", "candidates"):
        block = state.get(key)
        if isinstance(block, Mapping):
            numbered = {str(k): "\n".join(strings_in(v)) for k, v in block.items()}
            kind = key
            break
    claim = state.get("claim")
    question = state.get("question")
    question_text = question if isinstance(question, str) else ""
    if isinstance(claim, str):
        claim_text = claim
    elif question_text:
        claim_text = question_text
    else:
        claim_text = "\n".join(strings_in(state))
    return _StateView(
        claim_text, question_text, numbered, kind, packed_claims(state) or {}, packed_results(state) or {}
    )


def _question_text(question: Mapping[str, object]) -> str:
    parts = strings_in(question.get("instructions")) + strings_in(question.get("criteria"))
    return " ".join(parts)


def _reference(name: str, text: str) -> str | None:
    """The passage/candidate a question is about: `supports_2`, or "passage 2" in its text."""
    match = re.search(r"\b(?:passage|candidate|sentence|source|result|snippet)\s*\[?(\d+)\]?", text, re.I)
    if match:
        return match.group(1)
    match = re.search(r"_([^\W_]+)$", name) or re.search(r"(\d+)$", name)
    return match.group(1) if match else None


def _referenced(name: str, text: str, view: _StateView) -> list[str]:
    """The passages (sentences, candidates) a question names, or all of them when it names none."""
    ref = _reference(name, text)
    if ref is not None and ref in view.numbered:
        return [view.numbered[ref]]
    return list(view.numbered.values())


def _intent(name: str, question: Mapping[str, object], view: _StateView) -> str:
    text = _question_text(question).lower()
    if question.get("type") == "choice":
        return "best" if view.question else "choice"
    if question.get("type") == "score":
        return "score"
    if re.search(r"opinion|checkable|verifiable|could be verified|statement of fact|factual statement", text):
        return "checkable"
    if re.search(r"contradict|cannot be true|can't be true|conflict|refute|inconsistent|rules? out", text):
        return "contradicts"
    if "answer" in text and (view.question or view.kind in ("sentences", "candidates")):
        return "answers"
    if view.numbered and re.search(r"support|impl(?:y|ies)|\bback|confirm|corroborat|evidence for", text):
        return "supports"
    return "truth"


def _subject(model: str, name: str, question: Mapping[str, object], view: _StateView) -> str:
    """The jitter key of an ungrounded question: what it is about, and nothing else of the request.

    The model, the question's type and intent, its claim, the state's question, the texts it reads (the
    passage it names for support, contradiction and answers; none for checkable; every passage for truth,
    choice and score) and its options or levels. Not its name nor the rest of the state, so the question
    asked alone or in a packed request gets one answer (a packed request names its questions `s1_...`
    and may number the same passage otherwise).
    """
    intent = _intent(name, question, view)
    if intent in ("supports", "contradicts", "answers"):
        reads = _referenced(name, _question_text(question), view)
    elif intent == "checkable":
        reads = []
    else:
        reads = list(view.numbered.values())
    options = (
        [question.get("criteria"), question.get("options")]
        if question.get("type") in ("choice", "score")
        else None
    )
    about = [model, str(question.get("type")), intent, view.claim, view.question, reads, options]
    canonical = json.dumps(about, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


def _softmax(scores: Mapping[str, float], temperature: float) -> dict[str, float]:
    top = max(scores.values())
    exps = {k: math.exp((v - top) * temperature) for k, v in scores.items()}
    total = sum(exps.values())
    return {k: v / total for k, v in exps.items()}


def _rounded_distribution(probabilities: Mapping[str, float]) -> dict[str, float]:
    """Four decimals that still sum to 1: the rounding error goes to the largest option."""
    rounded = {k: round(v, 4) for k, v in probabilities.items()}
    top = max(rounded, key=lambda k: rounded[k])
    rounded[top] = round(rounded[top] + 1.0 - sum(rounded.values()), 4)
    return rounded


def _confidence(probabilities: Mapping[str, float]) -> float:
    """One minus the normalised entropy: 1 for a certain choice, 0 for a uniform one."""
    n = len(probabilities)
    if n < 2:
        return 1.0
    entropy = -sum(p * math.log(p) for p in probabilities.values() if p > 0)
    return round(max(0.0, 1.0 - entropy / math.log(n)), 4)


class Judge:
    """Answers Decisions questions from the state, the evidence and the model's pre-cutoff knowledge.

    `knowledge(text)` returns the sentences the simulated model "knows" about a text: the engine fills
    it from corpus documents dated before the knowledge cutoff. The judge itself does no I/O.
    """

    def __init__(self, knowledge: Callable[[str], Sequence[str]], seed: int = 0) -> None:
        self._knowledge = knowledge
        self._seed = seed

    # -- public -------------------------------------------------------------------------------------

    def answer(
        self,
        state: object,
        questions: Mapping[str, object],
        *,
        evidence: Sequence[str] = (),
        model: str = "",
        request_key: str | None = None,
    ) -> dict[str, dict[str, object]]:
        """One answer per question, in the docs/spec.md §1 shapes.

        The jitter is keyed by what each question is about (`model` is part of that); a `request_key`
        (grounded requests) keys it by the request and the question's name instead."""
        view = _view(state)
        answers: dict[str, dict[str, object]] = {}
        for name, raw in questions.items():
            question: Mapping[str, object] = raw if isinstance(raw, Mapping) else {"instructions": str(raw)}
            own = _own_view(view, name, _question_text(question))
            if request_key is None:
                jitter_key = _subject(model, name, question, own)
            else:
                jitter_key = f"{request_key}|{name}"
            qtype = question.get("type")
            if qtype == "choice":
                answers[name] = self._choice(question, own, evidence, jitter_key)
            elif qtype == "score":
                answers[name] = self._score(question, own, evidence, jitter_key)
            else:
                p = self._noul(name, question, own, evidence)
                answers[name] = {"type": "noul", "noul": self._jittered(p, jitter_key)}
        return answers

    def truth(self, claim: str, *, evidence: Sequence[str] = (), passages: Sequence[str] = ()) -> float:
        """Probability that `claim` is true given the model's knowledge, the evidence and the passages."""
        extra = [s for text in (*evidence, *passages) for s in split_sentences(text)]
        parts = split_sentences(claim) or [claim]
        verdicts: list[tuple[bool, float]] = []  # (contradicted, p)
        for part in parts:
            claim_features = features(part)
            if not claim_features.words:
                continue
            sources = [*self._knowledge(part), *extra]
            verdicts.append(self._sentence_truth(claim_features, sources))
        if not verdicts:
            return 0.5
        contradicted = [p for bad, p in verdicts if bad]
        return min(contradicted) if contradicted else max(p for _, p in verdicts)

    # -- question kinds -----------------------------------------------------------------------------

    def _noul(
        self, name: str, question: Mapping[str, object], view: _StateView, evidence: Sequence[str]
    ) -> float:
        intent = _intent(name, question, view)
        text = _question_text(question)
        if intent in ("supports", "contradicts"):
            passages = _referenced(name, text, view)
            if not passages:
                truth = self.truth(view.claim, evidence=evidence)
                return truth if intent == "supports" else 1.0 - truth
            scorer = self._support if intent == "supports" else self._contradiction
            return max(scorer(view.claim, passage) for passage in passages)
        if intent == "answers":
            candidates = _referenced(name, text, view) if view.kind == "candidates" else []
            sentences = candidates or list(view.numbered.values()) or [view.claim]
            return max(answer_score(view.question or view.claim, s) for s in sentences)
        if intent == "checkable":
            return checkable_score(view.claim)
        return self.truth(view.claim, evidence=evidence, passages=list(view.numbered.values()))

    def _choice(
        self, question: Mapping[str, object], view: _StateView, evidence: Sequence[str], key: str
    ) -> dict[str, object]:
        options = _options(question)
        if not options:
            options = dict(view.numbered) or {"yes": "yes", "no": "no"}
        scores: dict[str, float] = {}
        for option, description in options.items():
            text = description or view.numbered.get(option, "") or option
            if view.question:
                scores[option] = answer_score(view.question, text)
            else:
                scores[option] = self._relevance(text, view, evidence)
        temperature = 10.0 if view.question else 6.0
        noisy = {k: v + self._jitter(f"{key}|{k}") * 5 for k, v in scores.items()}
        probabilities = _rounded_distribution(_softmax(noisy, temperature))
        choice = max(probabilities, key=lambda k: (probabilities[k], -list(probabilities).index(k)))
        return {
            "type": "choice",
            "choice": choice,
            "probabilities": probabilities,
            "confidence": _confidence(probabilities),
        }

    def _score(
        self, question: Mapping[str, object], view: _StateView, evidence: Sequence[str], key: str
    ) -> dict[str, object]:
        criteria = question.get("criteria")
        levels = (
            [" ".join(strings_in(level)) or str(level) for level in criteria]
            if isinstance(criteria, list)
            else []
        )
        if not levels:
            levels = ["low", "high"]
        strength = self.truth(view.claim, evidence=evidence, passages=list(view.numbered.values()))
        strength = min(1.0, max(0.0, strength + self._jitter(key)))
        span = max(1, len(levels) - 1)
        logits = {str(i): -((i / span - strength) ** 2) / 0.16 for i in range(len(levels))}
        probabilities = _rounded_distribution(_softmax(logits, 1.0))
        score = max(probabilities, key=lambda k: (probabilities[k], -int(k)))
        return {
            "type": "score",
            "score": int(score),
            "legend": {str(i): level for i, level in enumerate(levels)},
            "probabilities": probabilities,
            "confidence": _confidence(probabilities),
        }

    # -- scoring primitives -------------------------------------------------------------------------

    @staticmethod
    def _sentence_truth(claim: Features, sources: Iterable[str]) -> tuple[bool, float]:
        best_coverage = 0.0
        contradiction: Match | None = None
        for source in sources:
            match = compare(claim, features(source))
            if match.supports:
                return False, 0.95 + 0.04 * match.coverage
            if match.contradicts and (contradiction is None or match.agreement > contradiction.agreement):
                contradiction = match
            best_coverage = max(best_coverage, match.coverage)
        if contradiction is not None:
            return True, 0.02 + 0.03 * (1.0 - contradiction.agreement)
        return False, 0.03 + 0.18 * best_coverage**2

    @staticmethod
    def _support(claim: str, passage: str) -> float:
        claim_features = features(claim)
        best = 0.0
        for sentence in split_sentences(passage):
            match = compare(claim_features, features(sentence))
            if match.supports:
                return 0.86 + 0.12 * match.coverage
            if match.contradicts:
                continue
            best = max(best, match.coverage)
        return 0.05 + 0.7 * best

    @staticmethod
    def _contradiction(claim: str, passage: str) -> float:
        claim_features = features(claim)
        strongest: Match | None = None
        best_coverage = 0.0
        for sentence in split_sentences(passage):
            match = compare(claim_features, features(sentence))
            if match.supports:
                return 0.02  # the passage states the claim; another sentence of it is about something else
            if match.contradicts and (strongest is None or match.agreement > strongest.agreement):
                strongest = match
            best_coverage = max(best_coverage, match.coverage)
        if strongest is not None:
            return 0.62 + 0.33 * strongest.agreement
        return 0.03 + 0.05 * best_coverage

    def _relevance(self, text: str, view: _StateView, evidence: Sequence[str]) -> float:
        """Generic choice: how much of the option's wording the state and evidence speak to."""
        option = features(text)
        if not option.words:
            return 0.0
        context = features(" ".join([view.claim, *view.numbered.values(), *evidence]))
        return compare(option, context).coverage

    # -- jitter -------------------------------------------------------------------------------------

    def _jitter(self, key: str) -> float:
        digest = hashlib.blake2b(f"{self._seed}|{key}".encode(), digest_size=8).digest()
        return (int.from_bytes(digest, "big") / 2**64 - 0.5) * JITTER

    def _jittered(self, p: float, key: str) -> float:
        return round(min(0.999, max(0.001, p + self._jitter(key))), 4)


def _options(question: Mapping[str, object]) -> dict[str, str]:
    """Choice options as key -> description; `criteria` is the API's field, `options` a lenient extra."""
    criteria = question.get("criteria")
    if isinstance(criteria, Mapping):
        return {str(k): " ".join(strings_in(v)) for k, v in criteria.items()}
    options = question.get("options")
    if isinstance(options, list):
        return {str(o) if not isinstance(o, Mapping) else json.dumps(o, sort_keys=True): "" for o in options}
    return {}
