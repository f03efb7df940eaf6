"""The search query the Decisions gateway builds for `mode: "web_grounding"`, ported for the one shape
factgate sends: a string `state` and one `noul` question with plain instructions.

Why we mirror it: the search only sees the question text and the *start* of the state, 256 bytes of
normalised UTF-8 in all. A claim that does not fit is searched for by whatever text sits in front of it,
and the answer then rests on evidence about the wrong thing. Knowing the query before sending lets us flag
those claims in the job summary (docs/spec.md §1, §2). Shapes we have not ported (criteria, choice and score
questions, object or array state) raise `ValueError` rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = [
    "GO_TRIM_SPACE",
    "MAX_DROPPED_CUT",
    "MAX_QUERY_BYTES",
    "QueryPart",
    "claim_in_query",
    "is_data_url",
    "is_separator",
    "normalize_prefix",
    "search_query",
]

MAX_QUERY_BYTES = 256  # the Search API's per-query limit; question text first, then the state
MAX_DROPPED_CUT = 32  # a word the limit cuts is kept (as a prefix) only when at least this many bytes fit

# Word separators for the gateway: Python's `str.isspace()` plus every control character (category Cc).
# Spelled out rather than computed per call; tests/unit/test_grounding.py checks it against all of Unicode.
_SEPARATORS = "\x00-\x1f\x20\x7f-\x9f\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_WORD = re.compile(f"[^{_SEPARATORS}]+")
_SEPARATOR = re.compile(f"[{_SEPARATORS}]")

# Go's `unicode.IsSpace`, the set `strings.TrimSpace` removes. Narrower than Python's `str.strip()`,
# which also removes \x1c-\x1f: a data: URL behind one of those is *not* skipped by the gateway.
GO_TRIM_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def is_separator(char: str) -> bool:
    """Whether the gateway treats this one character as a word separator (whitespace or control)."""
    return _SEPARATOR.fullmatch(char) is not None


def normalize_prefix(s: str, n: int) -> tuple[str, bool]:
    """Normalise `s` the gateway's way and keep at most `n` UTF-8 bytes of it.

    Runs of whitespace and control characters become one space and the ends are trimmed. Words are taken
    whole while they fit; a word the limit cuts keeps its fitting prefix (never a split code point) only if
    that prefix is at least MAX_DROPPED_CUT bytes, so unspaced scripts keep their start while a cut Latin
    word is dropped. The flag says the gateway stopped early. It mirrors the gateway's byte loop exactly,
    including its quirk of also reporting a cut when only trailing separators were left but there was no
    room for a separator plus one more byte.
    """
    if n <= 0:
        return "", bool(s)
    words: list[str] = []
    used = 0  # UTF-8 bytes in the output so far, separators included
    for match in _WORD.finditer(s):
        # A separator plus at least one byte must fit before another word can start.
        if used and used + 2 > n:
            return " ".join(words), True
        room = n - used - (1 if used else 0)
        word = match.group()
        head = word[: room + 1]  # every code point is >= 1 byte, so this decides whether it fits
        data = head.encode("utf-8")
        if len(head) == len(word) and len(data) <= room:
            words.append(word)
            used += len(data) + (1 if used else 0)
            continue
        # The word does not fit: keep the whole code points that do, if there are enough of them.
        kept = data[:room].decode("utf-8", errors="ignore")
        if len(kept.encode("utf-8")) >= MAX_DROPPED_CUT:
            words.append(kept)
        return " ".join(words), True
    if not used:
        return "", False
    # All words fit. The gateway still stops early on trailing separators when a full output meets one, or
    # when a second one arrives with no room for a separator plus a byte.
    ends_in_separator = _SEPARATOR.fullmatch(s[-1]) is not None
    two_trailing = ends_in_separator and len(s) >= 2 and _SEPARATOR.fullmatch(s[-2]) is not None
    truncated = (ends_in_separator and used >= n) or (two_trailing and used + 2 > n)
    return " ".join(words), truncated


class QueryPart:
    """Normalised text accumulated up to a byte budget.

    After anything is cut the budget shrinks to the current length, so the result stays a prefix of what
    was added: a later, shorter part can never fill the gap a dropped word left.
    """

    def __init__(self, max_bytes: int) -> None:
        self.text = ""
        self._used = 0
        self._max = max_bytes

    def room(self) -> int:
        """Bytes the next part may take, after the separating space."""
        return self._max - self._used - (1 if self._used else 0)

    def add(self, s: str) -> None:
        room = self.room()
        if room <= 0:
            return
        part, truncated = normalize_prefix(s, room)
        if part:
            size = len(part.encode("utf-8"))
            self._used += size + (1 if self._used else 0)
            self.text = f"{self.text} {part}" if self.text else part
        if truncated:
            self._max = self._used


def is_data_url(s: str) -> bool:
    """The gateway skips a part that starts with `data:` after Go's TrimSpace (not Python's strip).

    Only the leading trim decides the prefix (what TrimSpace removes at the end cannot turn a text into
    one starting with "data:"), and a text that does not start with trimmed space is not copied at all:
    intake asks this of every claim of a million-row batch."""
    if s and s[0] not in GO_TRIM_SPACE:
        return s[:5].lower() == "data:"
    return s.lstrip(GO_TRIM_SPACE)[:5].lower() == "data:"


def search_query(state: str, question: Mapping[str, object]) -> str:
    """The web search text the gateway builds for one question: its instructions, then the start of the
    state, MAX_QUERY_BYTES in all; when the state has text the question part gets at most half.

    Raises ValueError for shapes this port does not cover (non-string state, a type other than exactly
    "noul", criteria, non-string instructions) instead of guessing.
    """
    if not isinstance(question, Mapping):
        raise ValueError("search_query needs the question as a mapping")
    instructions = question.get("instructions")
    if not isinstance(state, str):
        raise ValueError("search_query covers a string state only")
    if question.get("type") != "noul" or "criteria" in question:
        raise ValueError("search_query covers a noul question without criteria only")
    if instructions is not None and not isinstance(instructions, str):
        raise ValueError("search_query covers string instructions only")
    state_part = QueryPart(MAX_QUERY_BYTES)
    if not is_data_url(state):
        state_part.add(state)
    question_part = QueryPart(MAX_QUERY_BYTES // 2 if state_part.text else MAX_QUERY_BYTES)
    if instructions and not is_data_url(instructions):
        question_part.add(instructions)
    query = QueryPart(MAX_QUERY_BYTES)
    query.add(question_part.text)
    query.add(state_part.text)
    return query.text


def claim_in_query(claim: str, state: str, question: Mapping[str, object]) -> bool:
    """Whether the complete claim text, normalised the same way, appears in the search query built from
    `state`. A claim the limit cuts mid-way counts as outside even though its start is searched."""
    normalized, _ = normalize_prefix(claim, len(claim.encode("utf-8")))
    return normalized in search_query(state, question)
