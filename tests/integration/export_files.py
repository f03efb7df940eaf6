"""Reading export files in tests: every export ends with a trailer (web/exports.py), checked here and
removed, so a test sees the records and knows the file was complete."""

from __future__ import annotations

import csv
import io
import json
from typing import Any


def ndjson_records(text: str) -> list[dict[str, Any]]:
    """The records of an NDJSON export, after checking its `{"_end": …}` line counts them."""
    lines = [json.loads(line) for line in text.splitlines() if line]
    assert lines and set(lines[-1]) == {"_end"}, lines[-1:]
    assert lines[-1]["_end"]["count"] == len(lines) - 1
    return lines[:-1]


def csv_records(text: str) -> list[dict[str, str]]:
    """The data rows of a CSV export, after checking its `#end,<N>` row counts them."""
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows, "no trailer row"
    end = rows.pop()
    assert list(end.values())[:2] == ["#end", str(len(rows))], end
    return rows
