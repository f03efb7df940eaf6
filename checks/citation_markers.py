"""A team's own answer, cut into sentences with the sources each one cites (docs/spec.md §8).

The `citations` kind takes answers our users' pipelines wrote, with `[n]` markers whose `n` is one of the
row's source ids: the seed format `[2]`, runs `[2][5]` and lists `[2, 5]`. Ids are strings (`[doc-7]`), so
a bracket is only a marker when it names a source of the row, or when it is all digits (the numeric ids a
pipeline writes): `[sic]` or `[1.5]` in prose stay text, `[9]` on a row without source 9 is a marker
naming a missing source, recorded on its sentence and never an error for the row.

The answer kind's splitter (`checks/answer_split.py`) does the cutting, unchanged: every marker group is
first rewritten as a run of numeric markers (`[doc-7, doc-2]` → `[3][1]`, the sources' positions; a missing
id gets a number past the last source), the text is split, and the numbers are mapped back. So the rules of
§3.2 hold here word for word (markers before the final punctuation move after it, a markers-only
paragraph joins the sentence before it, nothing is dropped), and a sentence's `text` shows its markers as
one bracket per id (`[doc-7][doc-2]`). Pure; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from checks.answer_split import SplitError, split_sentences

__all__ = [
    "MARKER_ID",
    "CitedSentence",
    "SplitError",
    "cited_sentences",
    "has_markers",
]

# What an id inside a marker may look like: a letter or digit, then letters, digits and `_.:#/-`.
MARKER_ID: Final = r"[A-Za-z0-9][A-Za-z0-9_.:#/\-]{0,63}"
_GROUP: Final = re.compile(rf"\[[^\S\n]*({MARKER_ID}(?:[^\S\n]*,[^\S\n]*{MARKER_ID})*)[^\S\n]*\]")
_NUMBERED: Final = re.compile(r"\[([0-9]+)\]")


@dataclass(frozen=True)
class CitedSentence:
    """One sentence of the answer: as written (markers one bracket per id), without markers (what is
    scored), the sources it cites (in order of first citation, once each), the ids it names that no source
    has, and its paragraph (1-based)."""

    number: int
    text: str
    claim: str
    paragraph: int
    cited: tuple[str, ...]
    missing: tuple[str, ...]


class _Numbering:
    """Source ids ↔ the numbers the splitter sees: a source's position, then missing ids past the end."""

    def __init__(self, source_ids: Sequence[str]) -> None:
        self.number: dict[str, int] = {sid: i for i, sid in enumerate(source_ids, 1)}
        self.known = len(source_ids)
        self.ids: dict[int, str] = {i: sid for sid, i in self.number.items()}

    def of(self, marker_id: str) -> int:
        found = self.number.get(marker_id)
        if found is None:
            found = self.number[marker_id] = len(self.number) + 1
            self.ids[found] = marker_id
        return found

    def rewrite(self, match: re.Match[str]) -> str:
        ids = [part.strip() for part in match.group(1).split(",")]
        if not any(i in self.number and self.number[i] <= self.known for i in ids) and not all(
            i.isdigit() for i in ids
        ):
            return match.group()  # prose in brackets ("[sic]"), not a citation
        return "".join(f"[{self.of(i)}]" for i in ids)


def has_markers(answer: str, source_ids: Sequence[str]) -> bool:
    """Whether any bracket of `answer` is a marker (it names a source of the row, or is all digits), by
    the rule `cited_sentences` reads them with."""
    known = set(source_ids)
    for match in _GROUP.finditer(answer):
        ids = [part.strip() for part in match.group(1).split(",")]
        if any(i in known for i in ids) or all(i.isdigit() for i in ids):
            return True
    return False


def cited_sentences(answer: str, source_ids: Sequence[str]) -> list[CitedSentence]:
    """Split `answer` into sentences and read each one's citations against the row's `source_ids`.

    Raises `SplitError` when markers stand in a paragraph of their own with no sentence before them.
    """
    numbering = _Numbering(source_ids)
    numbered = _GROUP.sub(numbering.rewrite, answer)
    sentences: list[CitedSentence] = []
    for number, sentence in enumerate(split_sentences(numbered), 1):
        ids = [numbering.ids[n] for n in dict.fromkeys(sentence.source_ids)]
        cited = tuple(i for i in ids if numbering.number[i] <= numbering.known)
        missing = tuple(i for i in ids if numbering.number[i] > numbering.known)
        sentences.append(
            CitedSentence(
                number=number,
                text=_NUMBERED.sub(lambda m: f"[{numbering.ids[int(m.group(1))]}]", sentence.text),
                claim=sentence.claim,
                paragraph=sentence.paragraph,
                cited=cited,
                missing=missing,
            )
        )
    return sentences
