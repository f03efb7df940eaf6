"""Reading request bodies within the size limit: all of a JSON document, or NDJSON and CSV line by line.

The limit is checked twice: against `Content-Length` before anything is read (a client that declares
too much gets a 413 at once), and again while reading, because a chunked body declares nothing and a
declared length is only a claim. NDJSON is read in fixed-size chunks and split here, so a 100,000-row
body never exists as one `bytes` object plus a list of its lines. Readers take anything with `read`,
so a submission's body can pass through its fingerprint (web/fingerprint.py) on the way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from flask import request

from web.errors import ApiError, invalid, too_large

CHUNK_BYTES = 256 * 1024


class Readable(Protocol):
    """A body stream: `request.stream`, or a reader wrapped around it."""

    def read(self, size: int = -1, /) -> bytes: ...


def check_declared_length(limit: int) -> None:
    """413 when the declared Content-Length is over `limit` (nothing is read)."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise too_large(limit)


def iter_body_chunks(stream: Readable, limit: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The body in chunks; 413 as soon as more than `limit` bytes have arrived."""
    seen = 0
    while True:
        chunk = stream.read(chunk_bytes)
        if not chunk:
            return
        seen += len(chunk)
        if seen > limit:
            raise too_large(limit)
        yield chunk


def iter_body_lines(
    stream: Readable, limit: int, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its newline) for every line of the body, blank ones too.

    A trailing newline does not make an extra empty line; `\r\n` endings lose their `\r`. Linear in the
    body's size whatever its line lengths: a line that spans chunks is kept as a list of its pieces and
    joined once, when its newline arrives (joining the tail to every new chunk would copy a long line once
    per chunk).
    """
    number = 0
    pending: list[bytes] = []
    for chunk in iter_body_chunks(stream, limit, chunk_bytes):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            line = b"".join((*pending, piece)) if pending else piece
            pending.clear()
            number += 1
            yield number, line[:-1] if line.endswith(b"\r") else line
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:] if start else chunk)
    if pending:
        tail = b"".join(pending)
        number += 1
        yield number, tail[:-1] if tail.endswith(b"\r") else tail


def read_body(stream: Readable, limit: int, hint: str = "") -> bytes:
    """The whole body (at most `limit` bytes, else 413, with `hint` appended to the message)."""
    try:
        return b"".join(iter_body_chunks(stream, limit))
    except ApiError as exc:
        exc.message += hint
        raise


def drain(stream: Readable, limit: int, seen: int, chunk_bytes: int = CHUNK_BYTES) -> None:
    """Read and drop the rest of a body of which `seen` bytes were read already; 413 past `limit`."""
    while chunk := stream.read(chunk_bytes):
        seen += len(chunk)
        if seen > limit:
            raise too_large(limit)


def read_json_body(
    limit: int, loads: Callable[[str], Any] = json.loads, stream: Readable | None = None, hint: str = ""
) -> Any:
    """The request body (or `stream`) parsed as one JSON document; 400 naming where it stops being JSON.

    The request's declared length is checked only when reading the request itself: a `stream` may be one
    part of a larger request (an uploaded file), whose caller checks what it declares."""
    if stream is None:
        try:
            check_declared_length(limit)
        except ApiError as exc:
            exc.message += hint
            raise
    raw = read_body(request.stream if stream is None else stream, limit, hint)
    if not raw.strip():
        raise invalid("request body is empty; send a JSON object")
    try:
        # RFC 8259: JSON between systems is UTF-8 (json.loads would guess UTF-16/32 from the bytes).
        document = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise invalid(f"request body is not UTF-8 text (byte {exc.start + 1})") from None
    try:
        return loads(document)
    except json.JSONDecodeError as exc:
        raise invalid(
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            line=exc.lineno,
        ) from None
    except RecursionError:
        raise invalid("request body is not acceptable JSON: nested too deeply") from None
    except ValueError as exc:
        # Our own strict parser's rejections (NaN, Infinity) and Python's integer-size limit.
        raise invalid(f"request body is not acceptable JSON: {str(exc)[:200]}") from None
