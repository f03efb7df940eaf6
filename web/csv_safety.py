"""CSV cells that a spreadsheet cannot run: the OWASP rule for CSV (formula) injection.

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is read by Excel, LibreOffice and
Google Sheets as a formula — and a claim id, a question or a quoted web page is text chosen by someone
else. Such a cell gets a leading apostrophe, which spreadsheets show as text and never evaluate. Plain
numbers (`-0.5`) are left alone: they are values, not formulas, and our numeric columns stay numbers.
The NDJSON download is the lossless export; the CSV is for reading.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip() == text


def formula_safe(cell: object) -> object:
    """The cell as written: text that a spreadsheet would evaluate gets a leading apostrophe."""
    if isinstance(cell, str) and cell.startswith(TRIGGERS) and not _is_number(cell):
        return "'" + cell
    return cell


class SafeCsv:
    """A CSV writer over an in-memory buffer whose rows pass `formula_safe`; `take()` returns what was
    written since the last call (for streaming a download row by row)."""

    def __init__(self) -> None:
        self._buf = io.StringIO()
        self._writer = csv.writer(self._buf, lineterminator="\r\n")

    def row(self, cells: Iterable[object]) -> None:
        self._writer.writerow([formula_safe(c) for c in cells])

    def take(self) -> str:
        text = self._buf.getvalue()
        self._buf.seek(0)
        self._buf.truncate()
        return text
