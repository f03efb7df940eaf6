"""Reading CSV uploads (`text/csv`) row by row into the same checks as NDJSON rows.

The first line is a header naming the columns (`id,claim,label` for claims, `id,question` for questions;
order free, names exact after trimming spaces). Each following record becomes the dict an NDJSON line
would have been, so every row rule (id rules, lengths, duplicates) is the kind's own and the messages are
the same. Records are named by the line they start on, counted from 1 with the header as line 1, as a
spreadsheet numbers them; a quoted cell may span lines. Blank lines are skipped but keep their number.

Cells are text. An empty optional cell means "absent"; a flag column (`label`) takes `true` or `false`
(any case) and passes anything else on as text, so the kind's checker names it. Lines arrive as bytes
from the body reader (web/body.py) and are decoded one at a time: a line that is not UTF-8 is named.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from checks.ndjson import RowSink

_FLAG_VALUES = {"true": True, "false": False}


@dataclass(frozen=True)
class CsvColumns:
    """The header a kind accepts: allowed names, the ones it must have, and the true/false columns."""

    allowed: tuple[str, ...]
    required: tuple[str, ...]
    flags: tuple[str, ...] = field(default=())


class _Lines:
    """Decoded lines with their newline (csv needs it to join a quoted cell that spans lines), numbered."""

    def __init__(self, lines: Iterable[bytes], sink: RowSink) -> None:
        self._lines = iter(lines)
        self._sink = sink
        self.number = 0

    def __iter__(self) -> Iterator[str]:
        for raw in self._lines:
            self.number += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                self._sink.fail(self.number, None, f"is not valid UTF-8 (byte {error.start + 1})")
                text = ""  # the line's record still ends here; it is reported, nothing of it is kept
            if self.number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            yield text + "\n"


def _header(cells: list[str], columns: CsvColumns, sink: RowSink) -> list[str] | None:
    """The column names, or None after recording every problem with the header (line 1)."""
    names = [c.strip() for c in cells]
    ok = True
    seen: set[str] = set()
    for name in names:
        if name not in columns.allowed:
            shown = name if len(name) <= 40 else name[:39] + "…"
            allowed = ", ".join(columns.allowed)
            sink.fail(1, None, f'unknown column "{shown}" in the header (allowed: {allowed})')
            ok = False
        elif name in seen:
            sink.fail(1, None, f'column "{name}" appears twice in the header')
            ok = False
        seen.add(name)
    missing = [name for name in columns.required if name not in seen]
    if missing:
        sink.fail(
            1,
            None,
            f"the header must name the column(s) {', '.join(missing)} "
            f"(a first line such as {','.join(columns.required)})",
        )
        ok = False
    return names if ok else None


def feed_csv(lines: Iterable[bytes], sink: RowSink, columns: CsvColumns) -> None:
    """Check the header, then pass each record to `sink` as a dict of its cells, numbered by its first line.

    Stops at the first row past the row limit, like `feed_ndjson`. A header with a problem stops reading:
    no row could be read right against it."""
    source = _Lines(lines, sink)
    reader = csv.reader(source, strict=True)
    names: list[str] | None = None
    while True:
        start = source.number + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            sink.fail(start, None, f"is not valid CSV: {error}")
            if names is None:
                return
            continue
        if names is None:
            names = _header(cells, columns, sink)
            if names is None:
                return
            continue
        if not cells or (len(cells) == 1 and not cells[0].strip()):
            continue  # a blank line
        if sink.over_limit(start):
            break
        if len(cells) > len(names):
            sink.fail(start, None, f"has {len(cells)} cells, the header names {len(names)} columns")
            continue
        row: dict[str, object] = {}
        for name, cell in zip(names, cells, strict=False):
            if name in columns.flags:
                flag = _FLAG_VALUES.get(cell.strip().lower())
                if flag is not None:
                    row[name] = flag
                elif cell.strip():
                    row[name] = cell  # the checker names it ("must be true or false")
            elif cell or name in columns.required:
                row[name] = cell
        for name in columns.required:
            row.setdefault(name, "")  # a short record: its missing cells are empty
        sink.check(start, row)
