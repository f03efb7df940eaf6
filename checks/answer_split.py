"""Split an Agent API answer into sentences and read each sentence's `[n]` citation markers (docs/spec.md §3).

Every sentence is scored on its own, so the splitter decides what one Decisions request sees. It is built
for the plain prose the answer instructions ask for, and it never drops text: every non-space character
of the input (after `**` is removed) lands in exactly one sentence, in order. The only changes are the
documented ones: `**` removed, whitespace between sentences and paragraphs not kept, and a marker group
written before the final punctuation ("fact [1].") moved after it ("fact. [1]").

Known limit: an abbreviation such as "Dr." followed by a space still ends a sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CLOSING_QUOTES",
    "Sentence",
    "SplitError",
    "plain_claim",
    "split_sentences",
]

CLOSING_QUOTES: Final = "\"'”’)"  # may follow the final punctuation and still belong to the sentence

_CLOSERS: Final = f"[{re.escape(CLOSING_QUOTES)}]"
_MARKER: Final = re.compile(r"\[([0-9]+)\]")
# A maximal run of markers with the whitespace before each. Possessive, and never starting inside a
# whitespace run, so long runs of spaces or markers are scanned once, not once per position.
_MARKER_RUN: Final = re.compile(r"(?<!\s)(?:\s*+\[[0-9]+\])++")
# A blank line: a newline, optional spaces or tabs (or "\r"), another newline.
_BLANK_LINE: Final = re.compile(r"\n[^\S\n]*\n")
# Punctuation right after a marker run that could end a sentence (space, end, or another marker after
# it), so "fact [1]." is moved but "version [1].5" stays as written.
_PUNCTUATION_AFTER_MARKERS: Final = re.compile(rf"\s*+([.!?]++{_CLOSERS}*+)(?=\s|\Z|\[[0-9]+\])")
# A candidate sentence end: punctuation, closing quotes, trailing markers, then space or the end.
_END: Final = re.compile(rf"(?<![.!?])[.!?]++{_CLOSERS}*+(?:\s*+\[[0-9]+\])*(?=\s|\Z)")
_ABBREVIATIONS: Final = ("e.g", "i.e")  # their final "." never ends a sentence


class SplitError(ValueError):
    """Text that belongs to no sentence. Raised instead of silently dropping it."""


@dataclass(frozen=True)
class Sentence:
    """One sentence of an answer.

    `text` is the sentence as written (markers moved after the final punctuation); `claim` is the same
    sentence without markers, which is what the Decisions API scores and what an investigation quotes.
    """

    text: str
    claim: str
    source_ids: tuple[int, ...]  # every [n] in the sentence, in order, repeats kept
    paragraph: int  # 1-based, counting only paragraphs that hold a sentence


def plain_claim(text: str) -> str:
    """The sentence without its `[n]` markers: the claim sent upstream.

    A marker glued to the next word ("a[1]b", "one.[1]Two") leaves one space so the words stay apart;
    otherwise the marker goes together with the space before it ("fact [1] and" -> "fact and").
    """

    def replace(match: re.Match[str]) -> str:
        before = match.string[match.start() - 1] if match.start() > 0 else " "
        after = match.string[match.end()] if match.end() < len(match.string) else ""
        return " " if not before.isspace() and after.isalnum() else ""

    return _MARKER_RUN.sub(replace, text).strip()


def split_sentences(text: str) -> list[Sentence]:
    """Cut an answer into sentences; paragraphs break at blank lines.

    A paragraph made only of markers has no sentence of its own: its markers are trailing markers of the
    sentence before it. If no sentence comes before, there is nothing to attach them to and `SplitError`
    is raised.
    """
    sentences: list[Sentence] = []
    paragraph_number = 0
    for raw in _BLANK_LINE.split(text.replace("**", "")):
        paragraph = _move_markers(raw.strip())
        if not paragraph:
            continue
        if not plain_claim(paragraph):  # only markers
            if not sentences:
                raise SplitError(f"citation markers with no sentence before them: {paragraph[:80]!r}")
            last = sentences[-1]
            sentences[-1] = Sentence(
                text=f"{last.text} {paragraph}",
                claim=last.claim,
                source_ids=last.source_ids + _ids(paragraph),
                paragraph=last.paragraph,
            )
            continue
        paragraph_number += 1
        for piece in _pieces(paragraph):
            sentences.append(Sentence(piece, plain_claim(piece), _ids(piece), paragraph_number))
    return sentences


def _pieces(paragraph: str) -> list[str]:
    """Contiguous slices of the paragraph, one per sentence; only the whitespace between them is lost."""
    pieces: list[str] = []
    start = 0
    for end in _END.finditer(paragraph):
        if _is_abbreviation(paragraph, end.start()):
            continue
        pieces.append(paragraph[start : end.end()].strip())
        start = end.end()
    rest = paragraph[start:].strip()
    if rest:  # text without final punctuation is a sentence too
        pieces.append(rest)
    return pieces


def _is_abbreviation(paragraph: str, dot: int) -> bool:
    """A "." after a single capital initial ("John J. Hopfield") or in "e.g."/"i.e." ends no sentence."""
    if paragraph[dot] != ".":
        return False
    if paragraph[max(0, dot - 3) : dot].lower() in _ABBREVIATIONS:
        return True
    initial = paragraph[dot - 1] if dot > 0 else ""
    return initial.isalpha() and initial.isupper() and (dot == 1 or paragraph[dot - 2].isspace())


def _move_markers(paragraph: str) -> str:
    """Move each marker group written before sentence-ending punctuation to after it: "x [1]." -> "x. [1]"."""
    parts: list[str] = []
    done = 0
    for run in _MARKER_RUN.finditer(paragraph):
        punctuation = _PUNCTUATION_AFTER_MARKERS.match(paragraph, run.end())
        if punctuation is None:
            continue
        parts += [paragraph[done : run.start()], punctuation.group(1), run.group()]
        done = punctuation.end()
    parts.append(paragraph[done:])
    return "".join(parts)


def _ids(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in _MARKER.findall(text))
