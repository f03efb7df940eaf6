"""Input rows of `citations` jobs: a team's own answer with its own sources (docs/spec.md §8).

`{"id", "answer", "sources": [{"id", "text", "title"?, "url"?}], "question"?}`, one per NDJSON line or JSON
array item. Validated all or nothing like every kind (docs/spec.md §2.1's rule): every problem is named by
its line or item and field (`sources[2].text`, 0-based like a JSON path), and a batch with any bad row
stores nothing. A marker naming no source is not a row problem: it is recorded on its sentence.

A CSV body is refused (`CSV_REFUSAL`): a row holds a list of sources, each with several fields, which a
flat CSV record cannot carry without an encoding of our own.

Sources without an `id` are numbered by their position in the list, 1-based ("1", "2", ...), as the seed's
`[1]` markers expect; an id that one of those positions would take is refused by name.

RAGAS samples and DeepEval test cases are read too (checks/citation_formats.py): the first row decides the
body's format unless the `input_format` option names it, and every row is then checked in that format's
field names. Their contexts are the row's sources; an answer of theirs without markers is flagged
`unmarked` (each sentence checked against every source).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, NamedTuple

from checks.citation_contracts import CitationEntry, CitationSource
from checks.citation_formats import FORMATS, TITLES, ForeignFormat, InputFormat, detect, other_format
from checks.citation_markers import MARKER_ID, has_markers
from checks.claims import ClaimsValidationError
from checks.ndjson import (
    Appender,
    RowCollector,
    RowError,
    RowLine,
    Unit,
    feed_ndjson,
    show_value,
)
from checks.questions import MAX_QUESTION_BYTES, MAX_QUESTION_ID_CHARS

__all__ = [
    "ALLOWED_FIELDS",
    "CSV_REFUSAL",
    "MAX_ANSWER_BYTES",
    "MAX_ROW_BYTES",
    "MAX_SOURCES",
    "MAX_SOURCE_BYTES",
    "CitationRow",
    "CitationsValidationError",
    "parse_citation_lines",
    "stream_citation_rows",
    "validate_citation_rows",
]

ALLOWED_FIELDS: Final = ("id", "answer", "sources", "question")
SOURCE_FIELDS: Final = ("id", "text", "title", "url")
MAX_ANSWER_BYTES: Final = 20_000
MAX_SOURCES: Final = 32
MAX_SOURCE_BYTES: Final = 100_000  # a retrieved document, cut into passages (checks/citation_passages.py)
MAX_TITLE_CHARS: Final = 500
MAX_URL_CHARS: Final = 2_000
MAX_ROW_BYTES: Final = 1_048_576
DEFAULT_MAX_ANSWERS: Final = 10_000
CSV_REFUSAL: Final = (
    "a citations row holds a list of sources (each with id, text, title, url), which a CSV record cannot "
    "hold: send NDJSON or JSON rows with the fields id, answer, sources and question"
)
_SOURCE_ID: Final = re.compile(MARKER_ID)
_URL: Final = re.compile(r"https?://[^\s]+", re.IGNORECASE)


class CitationRow(NamedTuple):
    """A valid row: the caller's id, the entry item's input and the format it was read in."""

    id: str
    entry: CitationEntry
    input_format: InputFormat = "factgate"


class CitationsValidationError(ClaimsValidationError):
    """The batch of answers is rejected whole; `errors` name each bad row."""


class _Checker(RowCollector[CitationRow]):
    """Validates answer rows one at a time; `size` is the current row's size in bytes when known."""

    def __init__(
        self,
        *,
        max_rows: int,
        unit: Unit,
        rows: Appender[CitationRow] | None = None,
        input_format: str = "auto",
    ) -> None:
        super().__init__(
            max_rows=max_rows, unit=unit, noun="answers", refusal=CitationsValidationError, rows=rows
        )
        self.size: int | None = None
        # The body's format: named by the option, else decided by its first object row.
        self.format: InputFormat | None = None if input_format == "auto" else _named(input_format)
        self.decided = (
            "the input_format option says so"
            if self.format is not None
            else "one format a body: its first row decides it unless the input_format option names it"
        )

    def sized(self, lines: Iterable[RowLine]) -> Iterator[RowLine]:
        """The lines, noting each one's size before the reader decodes it (the reader checks a line
        before it takes the next)."""
        for raw in lines:
            if isinstance(raw, dict):  # a CSV body's record: this kind takes none (CSV_REFUSAL)
                raise CitationsValidationError([RowError(None, None, CSV_REFUSAL)], 0)
            self.size = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw or b"")
            yield raw

    def _source(self, line: int, at: str, position: int, obj: object) -> CitationSource | None:
        if not self.known_fields(line, obj, SOURCE_FIELDS):
            if not isinstance(obj, dict):
                self.errors[-1:] = []
                self.fail(line, at, f"must be an object with id, text, title, url; got {show_value(obj)}")
            return None
        assert isinstance(obj, dict)
        ok = True
        source_id: str | None = str(position)
        raw_id = obj.get("id")
        if raw_id is not None:
            if isinstance(raw_id, int) and not isinstance(raw_id, bool):
                raw_id = str(raw_id)  # `"id": 2` is what a pipeline numbering its sources writes
            source_id = self.text(line, f"{at}.id", raw_id, required=True)
            if source_id is not None and not _SOURCE_ID.fullmatch(source_id):
                self.fail(
                    line,
                    f"{at}.id",
                    f"{show_value(source_id)} cannot be named by a [marker]: use up to 64 letters, digits "
                    "and _.:#/- starting with a letter or digit",
                )
                source_id = None
            ok = source_id is not None
        text = self.text(line, f"{at}.text", obj.get("text"), required=True, max_bytes=MAX_SOURCE_BYTES)
        title = self.text(line, f"{at}.title", obj.get("title"), required=False)
        if title is not None and len(title) > MAX_TITLE_CHARS:
            self.fail(
                line, f"{at}.title", f"is {len(title):,} characters, over the limit of {MAX_TITLE_CHARS}"
            )
            ok = False
        url = self.text(line, f"{at}.url", obj.get("url"), required=False)
        if url is not None and (len(url) > MAX_URL_CHARS or not _URL.fullmatch(url)):
            self.fail(line, f"{at}.url", f"must be an http(s) URL of at most {MAX_URL_CHARS:,} characters")
            ok = False
        if not ok or text is None or source_id is None:
            return None
        return CitationSource(id=source_id, text=text, title=title or None, url=url or None)

    def _sources(self, line: int, value: object) -> list[CitationSource] | None:
        if value is None:
            self.fail(line, "sources", "is required (a list of {id, text, title, url}; it may be empty)")
            return None
        if not isinstance(value, list):
            self.fail(line, "sources", f"must be a list of sources, got {show_value(value)}")
            return None
        if len(value) > MAX_SOURCES:
            self.fail(line, "sources", f"has {len(value):,} sources, over the limit of {MAX_SOURCES}")
            return None
        sources: list[CitationSource] = []
        ok = True
        first: dict[str, int] = {}
        for index, obj in enumerate(value):
            source = self._source(line, f"sources[{index}]", index + 1, obj)
            if source is None:
                ok = False
                continue
            if (other := first.get(source.id)) is not None:
                named = "" if isinstance(obj, dict) and obj.get("id") is not None else " (its position)"
                self.fail(
                    line,
                    f"sources[{index}].id",
                    f"duplicate source id {show_value(source.id)}{named}, also sources[{other}]: give every "
                    "source its own id",
                )
                ok = False
                continue
            first[source.id] = index
            sources.append(source)
        return sources if ok else None

    def _oversized(self, line: int, obj: dict[str, object]) -> bool:
        size = self.size if self.size is not None else len(json.dumps(obj, ensure_ascii=False).encode())
        if size > MAX_ROW_BYTES:
            self.fail(line, None, f"is {size:,} bytes, over the limit of {MAX_ROW_BYTES:,} per row")
            return True
        return False

    def check(self, line: int, obj: object) -> None:
        if self.format is None and isinstance(obj, dict):
            self.format = detect(obj)
        elif self.format is not None and (other := other_format(obj, self.format)) is not None:
            self.fail(
                line,
                None,
                f"is a {TITLES[other]} row, but this body's rows are {TITLES[self.format]} ({self.decided})",
            )
            return
        if self.format is not None and self.format in FORMATS:
            self._check_foreign(line, obj, FORMATS[self.format])
            return
        errors = len(self.errors) + self.more
        self.known_fields(line, obj, ALLOWED_FIELDS)
        if not isinstance(obj, dict):
            return
        if self._oversized(line, obj):
            return
        row_id = self.new_id(line, obj.get("id"), MAX_QUESTION_ID_CHARS)
        answer = self.text(line, "answer", obj.get("answer"), required=True, max_bytes=MAX_ANSWER_BYTES)
        sources = self._sources(line, obj.get("sources"))
        question = self.text(
            line, "question", obj.get("question"), required=False, max_bytes=MAX_QUESTION_BYTES
        )
        if question is not None and not question.strip():
            question = None
        clean = len(self.errors) + self.more == errors
        if clean and not self.errors and row_id is not None and answer is not None and sources is not None:
            self.rows.append(
                CitationRow(row_id, CitationEntry(answer=answer, question=question, sources=sources))
            )

    def _pick(self, line: int, obj: dict[str, object], names: tuple[str, ...]) -> tuple[str, object]:
        """The field of one role (its current or an older name) and its value; both given is an error."""
        given = [n for n in names if obj.get(n) is not None]
        if len(given) > 1:
            self.fail(line, given[1], f"give {given[0]} or {given[1]}, not both")
        name = given[0] if given else names[0]
        return name, obj.get(name)

    def _contexts(self, line: int, field: str, value: object) -> list[CitationSource] | None:
        """A RAGAS or DeepEval row's contexts (strings) as its sources "1", "2", ..."""
        if value is None:
            self.fail(line, field, "is required: the contexts the answer was written from, a list of strings")
            return None
        if not isinstance(value, list):
            self.fail(line, field, f"must be a list of strings, got {show_value(value)}")
            return None
        if not value:
            self.fail(line, field, "must hold at least one context: the answer is checked against them")
            return None
        if len(value) > MAX_SOURCES:
            self.fail(line, field, f"has {len(value):,} contexts, over the limit of {MAX_SOURCES}")
            return None
        sources: list[CitationSource] = []
        for index, text in enumerate(value):
            checked = self.text(line, f"{field}[{index}]", text, required=True, max_bytes=MAX_SOURCE_BYTES)
            if checked is not None:
                sources.append(CitationSource(id=str(index + 1), text=checked))
        return sources if len(sources) == len(value) else None

    def _check_foreign(self, line: int, obj: object, spec: ForeignFormat) -> None:
        """One RAGAS sample or DeepEval test case, every problem named by its own field."""
        errors = len(self.errors) + self.more
        self.known_fields(line, obj, spec.fields)
        if not isinstance(obj, dict) or self._oversized(line, obj):
            return
        id_field = spec.row_id[0]
        raw_id = obj.get(id_field)
        if isinstance(raw_id, int) and not isinstance(raw_id, bool):
            raw_id = str(raw_id)
        row_id = self.new_id(
            line, f"row-{line}" if raw_id is None else raw_id, MAX_QUESTION_ID_CHARS, id_field
        )
        answer_field, raw_answer = self._pick(line, obj, spec.answer)
        answer = self.text(line, answer_field, raw_answer, required=True, max_bytes=MAX_ANSWER_BYTES)
        question_field, raw_question = self._pick(line, obj, spec.question)
        question = self.text(line, question_field, raw_question, required=False, max_bytes=MAX_QUESTION_BYTES)
        contexts_field, raw_contexts = self._pick(line, obj, spec.contexts)
        sources = self._contexts(line, contexts_field, raw_contexts)
        clean = len(self.errors) + self.more == errors
        if clean and not self.errors and row_id is not None and answer is not None and sources is not None:
            unmarked = not has_markers(answer, [s.id for s in sources])
            entry = CitationEntry(
                answer=answer, question=question or None, sources=sources, unmarked=unmarked
            )
            self.rows.append(CitationRow(row_id, entry, spec.name))


def _named(input_format: str) -> InputFormat:
    if input_format == "ragas":
        return "ragas"
    if input_format == "deepeval":
        return "deepeval"
    if input_format == "factgate":
        return "factgate"
    raise ValueError(f"unknown input format {input_format!r}")


def parse_citation_lines(
    lines: Iterable[RowLine], *, max_rows: int = DEFAULT_MAX_ANSWERS, input_format: str = "auto"
) -> list[CitationRow]:
    """Validate an NDJSON batch of answers, all or nothing (a CSV body's records are refused: see
    CSV_REFUSAL). Raises CitationsValidationError."""
    checker = _Checker(max_rows=max_rows, unit="line", input_format=input_format)
    feed_ndjson(checker.sized(lines), checker)
    return checker.result()


def stream_citation_rows(
    lines: Iterable[RowLine],
    rows: Appender[CitationRow],
    *,
    max_rows: int = DEFAULT_MAX_ANSWERS,
    input_format: str = "auto",
) -> int:
    """Validate an NDJSON batch line by line, handing valid rows to `rows` as they are read (until the
    first problem). Returns the number of rows; raises CitationsValidationError."""
    checker = _Checker(max_rows=max_rows, unit="line", rows=rows, input_format=input_format)
    feed_ndjson(checker.sized(lines), checker)
    checker.result()
    return checker.count


def validate_citation_rows(
    objs: Sequence[object],
    *,
    max_rows: int = DEFAULT_MAX_ANSWERS,
    unit: Unit = "item",
    input_format: str = "auto",
) -> list[CitationRow]:
    """Validate already-parsed rows (a JSON array), all or nothing; errors name `item N` (1-based)."""
    checker = _Checker(max_rows=max_rows, unit=unit, input_format=input_format)
    checker.check_items(objs)
    return checker.result()
