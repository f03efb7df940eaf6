"""Reading NDJSON uploads line by line, shared by every row kind (claims, questions).

Lines are numbered from 1 as given; blank lines are skipped but keep their number; a UTF-8 byte-order
mark on line 1 is ignored. Each line is decoded and handed to the kind's checker, which collects errors
(all or nothing) and decides when the row limit stops reading, so an oversized upload is not parsed to
its end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypedDict, TypeVar

MAX_ERRORS_KEPT = 100  # a batch of 100,000 bad rows should not produce a 100,000-line error body

Unit = Literal["line", "item"]
# One line of an upload as `feed_ndjson` takes it: the raw NDJSON line (bytes or text), or, for a CSV
# upload, the record already read into the object its NDJSON line would hold (None for a line that starts
# no record). CSV records are handed over as objects so that a million-row CSV is not turned into JSON
# text only to be parsed again.
RowLine = str | bytes | dict[str, object] | None


class RowErrorJson(TypedDict):
    line: int | None
    field: str | None
    message: str
    unit: Unit


@dataclass(frozen=True, slots=True)
class RowError:
    """One problem with the batch. `line` is 1-based (a line of NDJSON or an item of a JSON array) and
    None for problems with the batch as a whole; `field` is None when the row as a whole is wrong."""

    line: int | None
    field: str | None
    message: str
    unit: Unit = "line"

    def __str__(self) -> str:
        where = f"{self.unit} {self.line}: " if self.line is not None else ""
        what = f'field "{self.field}": ' if self.field is not None else ""
        return f"{where}{what}{self.message}"

    def as_dict(self) -> RowErrorJson:
        return {"line": self.line, "field": self.field, "message": self.message, "unit": self.unit}


def show_value(value: object) -> str:
    """A value as the caller wrote it, in JSON, short enough for an error line."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


RowT_contra = TypeVar("RowT_contra", contravariant=True)


class Appender(Protocol[RowT_contra]):
    """Where a validator puts valid rows: a list, or a writer that streams them on (jobs/bulk_load.py)."""

    def append(self, row: RowT_contra, /) -> None: ...


RowT = TypeVar("RowT")


class RowCollector(Generic[RowT]):
    """What every row validator keeps: the first errors (and a count of the rest), ids seen, rows looked at,
    the row limit, and the valid rows. `noun` names the rows in the limit message ("claims", "questions");
    `refusal` is the error a refused batch raises (the kind's `checks.claims.ClaimsValidationError`)."""

    def __init__(
        self,
        *,
        max_rows: int,
        unit: Unit,
        noun: str,
        refusal: Callable[[list[RowError], int], Exception],
        rows: Appender[RowT] | None = None,
    ) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        self.max_rows = max_rows
        self.unit: Unit = unit
        self.noun = noun
        self.refusal = refusal
        self.errors: list[RowError] = []
        self.more = 0
        self.seen: dict[str, int] = {}  # id -> the line it first appeared on
        self.count = 0  # rows looked at, valid or not
        self.kept: list[RowT] = []
        # Valid rows go here until the first error; a streamed intake passes a writer instead of a list.
        self.rows: Appender[RowT] = self.kept if rows is None else rows

    def check(self, line: int, obj: object) -> None:
        """Check one row: record its problems, or append it to `rows` while the batch has none."""
        raise NotImplementedError

    def check_items(self, objs: Sequence[object]) -> None:
        """Check already-parsed rows (a JSON array) in order; an array over the limit is refused whole."""
        if len(objs) > self.max_rows:
            self.fail(
                None, None, f"too many {self.noun}: {len(objs):,}, the limit is {self.max_rows:,} per batch"
            )
            return
        for number, obj in enumerate(objs, 1):
            self.count += 1
            self.check(number, obj)

    def result(self) -> list[RowT]:
        """The valid rows, all of them, or `refusal` naming every problem (none at all is one)."""
        if self.count == 0 and not self.errors:
            self.fail(None, None, f"no {self.noun}")
        if self.errors:
            raise self.refusal(self.errors, self.more)
        return self.kept

    def fail(self, line: int | None, field: str | None, message: str) -> None:
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(RowError(line, field, message, self.unit))
        else:
            self.more += 1

    def known_fields(self, line: int, obj: object, allowed: Collection[str]) -> bool:
        """Whether `obj` is a JSON object with only `allowed` keys; every problem is recorded."""
        if not isinstance(obj, dict):
            self.fail(line, None, f"must be a JSON object, got {show_value(obj)}")
            return False
        ok = True
        for key in obj:
            if key not in allowed:
                self.fail(line, str(key), f"unknown field (allowed: {', '.join(allowed)})")
                ok = False
        return ok

    def over_limit(self, line: int) -> bool:
        """Count a row; once past the limit record one error and tell the caller to stop reading."""
        self.count += 1
        if self.count > self.max_rows:
            self.fail(line, None, f"too many {self.noun}: the limit is {self.max_rows:,} per batch")
            return True
        return False

    def text(
        self, line: int, field: str, value: object, *, required: bool, max_bytes: int | None = None
    ) -> str | None:
        """A text field, or None after recording what is wrong with it (absent optional: None, no error)."""
        if value is None:
            if required:
                self.fail(line, field, "is required")
            return None
        if not isinstance(value, str):
            self.fail(line, field, f"must be a string, got {show_value(value)}")
            return None
        if required and not value.strip():
            self.fail(line, field, "must not be empty")
            return None
        if problem := text_problem(value):
            self.fail(line, field, problem)
            return None
        if max_bytes is not None and (size := len(value.encode("utf-8"))) > max_bytes:
            self.fail(line, field, f"is {size:,} bytes, over the limit of {max_bytes:,}")
            return None
        return value

    def new_id(self, line: int, value: object, max_chars: int, field: str = "id") -> str | None:
        """A row id: printable text of at most `max_chars`, not seen before (then it is seen), or None after
        recording what is wrong with it."""
        row_id = self.text(line, field, value, required=True)
        if row_id is None:
            return None
        if not row_id.isprintable():
            self.fail(line, field, UNPRINTABLE_ID)
        elif len(row_id) > max_chars:
            self.fail(line, field, f"is {len(row_id):,} characters, over the limit of {max_chars}")
        elif (first := self.seen.get(row_id)) is not None:
            self.fail(line, field, f"duplicate id {show_value(row_id)} (first on {self.unit} {first})")
        else:
            self.seen[row_id] = line
            return row_id
        return None


class RowSink(Protocol):
    """What a kind's validator offers to the line reader."""

    def fail(self, line: int | None, field: str | None, message: str) -> None: ...

    def over_limit(self, line: int) -> bool: ...

    def check(self, line: int, obj: object) -> None: ...


def feed_ndjson(lines: Iterable[RowLine], sink: RowSink) -> None:
    """Decode every line and pass it to `sink`, reporting undecodable lines by number (an object, a CSV
    record already read, goes to `sink` as it is; None is a blank line)."""
    decode = json.JSONDecoder().decode
    for number, raw in enumerate(lines, 1):
        if raw is None:
            continue
        if isinstance(raw, dict):
            if sink.over_limit(number):
                break
            sink.check(number, raw)
            continue
        if isinstance(raw, bytes):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                if sink.over_limit(number):
                    break
                sink.fail(number, None, f"is not valid UTF-8 (byte {error.start + 1})")
                continue
        else:
            text = raw
        if number == 1 and text.startswith("\ufeff"):
            text = text[1:]
        if not text.strip():
            continue
        if sink.over_limit(number):
            break
        try:
            obj = decode(text)
        except json.JSONDecodeError as error:
            sink.fail(number, None, f"is not valid JSON: {error.msg} at column {error.colno}")
            continue
        except RecursionError:
            sink.fail(number, None, "is not valid JSON here: nested too deeply")
            continue
        sink.check(number, obj)


# Control and format characters (bidi overrides such as U+202E, zero-width joiners) make an id display as
# another one in pages, CSV and terminals, so no row id may hold one, on any intake path.
UNPRINTABLE_ID = "must not contain control or formatting characters (such as bidi overrides)"


def text_problem(value: str) -> str | None:
    """What Postgres or JSON cannot store in a text field: NUL, unpaired surrogates (None: storable)."""
    if "\x00" in value:
        return "must not contain a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (it holds an unpaired surrogate escape)"
    return None
