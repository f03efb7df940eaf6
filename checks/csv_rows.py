"""CSV uploads read as the NDJSON rows intake already checks, line numbers kept.

The new-job page accepts CSV (a header line, then one row per record) beside NDJSON and JSON. Rather
than validate CSV rows a second way, each record becomes the JSON object an NDJSON line would hold, and
the kind's NDJSON reader (`checks/claims.py:parse_ndjson_lines`, `checks/questions.py`) checks it. So
that its errors name the right line of the CSV file, one line is produced per physical line read: the
header and the extra lines of a record whose quoted field spans lines come out blank (the reader skips
blank lines but counts them), and each record's object sits on the line it starts on. Line 1 is the
header; the first record is line 2.

What only CSV can get wrong (the header, a record with too many or too few fields, undecodable bytes,
malformed quoting) raises `CsvError` at the first such problem, naming the line and the column. Empty
optional cells are left out (an unlabelled claim); `label` is `true` or `false` in any case, and any
other text is passed on as text for the row checker to refuse by name.

Pure and lazy: it reads `lines` one at a time, so a large upload is never held whole.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Final

from checks.recipes import recipe_for


def csv_columns(kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(required columns, allowed columns) of a kind's CSV header: its recipe's row fields."""
    recipe = recipe_for(kind)
    return recipe.row_required, recipe.row_fields


BOOLEAN_COLUMNS: Final = frozenset({"label"})
_BOOLEANS: Final = {"true": True, "false": False}


class CsvError(ValueError):
    """A CSV upload that cannot be read as rows; `line` is 1-based (the header is line 1)."""

    def __init__(self, line: int, field: str | None, message: str) -> None:
        self.line = line
        self.field = field
        self.message = message
        what = f'column "{field}": ' if field is not None else ""
        super().__init__(f"line {line}: {what}{message}")


def _decoded(lines: Iterable[bytes | str]) -> Iterator[str]:
    """Each line as text ending in a newline (the csv module needs them to join a quoted field that
    spans lines); a UTF-8 byte-order mark on line 1 is dropped."""
    for number, raw in enumerate(lines, 1):
        if isinstance(raw, bytes):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CsvError(number, None, f"is not valid UTF-8 (byte {exc.start + 1})") from None
        else:
            text = raw
        if number == 1 and text.startswith("\ufeff"):
            text = text[1:]
        yield text if text.endswith("\n") else text + "\n"


def _header(cells: list[str], kind: str) -> list[str]:
    """The header's column names, checked against the kind's columns."""
    required, allowed = csv_columns(kind)
    example = ",".join(required)
    names = [c.strip() for c in cells]
    if not any(names):
        raise CsvError(1, None, f"must be the header (for example {example})")
    seen: set[str] = set()
    for name in names:
        if name not in allowed:
            shown = json.dumps(name[:40], ensure_ascii=False)
            raise CsvError(1, None, f"unknown column {shown} (allowed: {', '.join(allowed)})")
        if name in seen:
            raise CsvError(1, name, "appears twice in the header")
        seen.add(name)
    for name in required:
        if name not in seen:
            raise CsvError(1, name, f"is missing from the header (a {kind} CSV needs {example})")
    return names


def _row(header: list[str], cells: list[str], required: tuple[str, ...]) -> dict[str, object]:
    """One record as the NDJSON row object: empty optional cells left out, booleans parsed."""
    row: dict[str, object] = {}
    for name, value in zip(header, cells, strict=True):
        if value == "" and name not in required:
            continue
        if name in BOOLEAN_COLUMNS:
            row[name] = _BOOLEANS.get(value.strip().lower(), value)
        else:
            row[name] = value
    return row


def csv_ndjson_lines(lines: Iterable[bytes | str], kind: str) -> Iterator[bytes]:
    """NDJSON lines (bytes, no newline) for the CSV `lines` of a `kind` upload, one per line read: the
    records of `csv_records` as JSON text (blank for a line that starts no record)."""
    for record in csv_records(lines, kind):
        yield b"" if record is None else json.dumps(record, ensure_ascii=False).encode("utf-8")


def csv_records(lines: Iterable[bytes | str], kind: str) -> Iterator[dict[str, object] | None]:
    """The object each NDJSON line would hold for the CSV `lines` of a `kind` upload, one per line read
    (None for the header, a blank line and the other lines of a record spanning several): the kind's row
    checker takes them as they are (`checks.ndjson.feed_ndjson`), with no JSON text in between.

    Raises CsvError at the first problem only CSV can have; row problems (a missing claim, a bad label)
    are left to the kind's row checker, which then names the same line.
    """
    refusal = recipe_for(kind).csv_refusal
    if refusal is not None:
        raise CsvError(1, None, refusal)
    required, _allowed = csv_columns(kind)
    reader = csv.reader(_decoded(lines), strict=True)
    header: list[str] | None = None
    produced = 0
    consumed = 0
    while True:
        start = consumed + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise CsvError(reader.line_num or start, None, f"is not valid CSV: {exc}") from None
        consumed = reader.line_num
        if header is None:
            header = _header(cells, kind)
            record: dict[str, object] | None = None
        elif not cells or (len(cells) == 1 and not cells[0].strip()):
            record = None  # a blank line: skipped, like a blank NDJSON line
        elif len(cells) != len(header):
            raise CsvError(start, None, f"has {len(cells)} fields; the header has {len(header)}")
        else:
            record = _row(header, cells, required)
        # Blank lines up to where the record starts (the previous record's other lines), then the record.
        while produced < start - 1:
            produced += 1
            yield None
        produced += 1
        yield record
    if header is None:
        raise CsvError(1, None, f"the file is empty; line 1 must be the header ({','.join(required)})")
