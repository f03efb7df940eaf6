"""Reading NDJSON uploads line by line, shared by every row kind (claims, questions).

Lines are numbered from 1 as given; blank lines are skipped but keep their number; a UTF-8 byte-order
mark on line 1 is ignored. Each line is decoded and handed to the kind's checker, which collects errors
(all or nothing) and decides when the row limit stops reading, so an oversized upload is not parsed to
its end.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Protocol


class RowSink(Protocol):
    """What a kind's validator offers to the line reader."""

    def fail(self, line: int | None, field: str | None, message: str) -> None: ...

    def over_limit(self, line: int) -> bool: ...

    def check(self, line: int, obj: object) -> None: ...


def feed_ndjson(lines: Iterable[str | bytes], sink: RowSink) -> None:
    """Decode every line and pass it to `sink`, reporting undecodable lines by number."""
    decode = json.JSONDecoder().decode
    for number, raw in enumerate(lines, 1):
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
