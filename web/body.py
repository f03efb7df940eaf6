"""Reading request bodies within the size limit: all of a JSON document, or NDJSON and CSV line by line.

The limit is checked twice: against `Content-Length` before anything is read (a client that declares
too much gets a 413 at once), and again while reading, because a chunked body declares nothing and a
declared length is only a claim. NDJSON is read in fixed-size chunks and split here, so a 100,000-row
body never exists as one `bytes` object plus a list of its lines. Readers take anything with `read`,
so a submission's body can pass through its fingerprint (web/fingerprint.py) on the way.

Bodies must also arrive in time (`PacedInput`, installed under the whole app by `PacedBodies`): after
FACTGATE_BODY_GRACE_S, at least FACTGATE_BODY_MIN_BYTES_PER_S on average, or the read stops with a 408. A
check between reads would not do: one read of the server's body stream loops over `recv` until it has what
it asked for, each `recv` waiting as long as it likes, so a client sending a byte now and then held a web
thread for ever. Under gunicorn a watchdog timer shuts the connection's reading side down when the body falls
behind, which ends the blocked `recv` at once; and every send and receive on the connection is bounded by
FACTGATE_SEND_TIMEOUT_S (the socket's timeout), so a client that stops reading its response frees the thread
too. The pages never read a body before the session is checked (web/pages.py:_guard).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast

from flask import request
from werkzeug.exceptions import RequestTimeout

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


# --- the pace of a body ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BodyPace:
    """How fast a body must arrive: all of it by `grace_s` plus one second per `min_bytes_per_s` received."""

    grace_s: float
    min_bytes_per_s: float

    def due(self, started: float, seen: int) -> float:
        """When the next byte is due, `seen` bytes into a body whose reading began at `started`."""
        return started + self.grace_s + seen / self.min_bytes_per_s


class BodyTooSlow(RequestTimeout):
    """408: the body fell behind its pace (the API answers it in its JSON shape, web/errors.py)."""

    description = "the request body arrived too slowly"


class PacedInput:
    """A WSGI input stream that must keep its `BodyPace`, or raises BodyTooSlow.

    Checked before every read; with `sock` (the connection, under gunicorn) a watchdog also shuts the
    connection's reading side when the body falls behind, which ends a read blocked in `recv`, and a
    socket timeout ends one too. Either way the read raises BodyTooSlow. `close` stops the watchdog; it
    must be called when the request is done (`PacedBodies`), so it never touches the connection's next
    request.
    """

    def __init__(
        self,
        stream: Any,
        pace: BodyPace,
        sock: socket.socket | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._pace = pace
        self._sock = sock
        self._clock = clock
        self._started = clock()
        self._seen = 0
        self._late = False
        self._done = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        if sock is not None:
            self._arm(pace.due(self._started, 0) - self._started)

    # The watchdog: re-armed for the new due time while the body keeps pace, else it shuts reading down.
    def _arm(self, delay: float) -> None:
        timer = threading.Timer(max(delay, 0.0), self._watch)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _watch(self) -> None:
        with self._lock:
            if self._done:
                return
            remaining = self._pace.due(self._started, self._seen) - self._clock()
            if remaining > 0:
                self._arm(remaining)
                return
            self._late = True
            if self._sock is not None:
                with contextlib.suppress(OSError):  # the client is gone already
                    self._sock.shutdown(socket.SHUT_RD)

    def _check(self) -> float:
        """When the bytes of the coming read are due; BodyTooSlow if that has passed already."""
        due = self._pace.due(self._started, self._seen)
        if self._late or self._clock() >= due:
            self._late = True
            raise BodyTooSlow
        return due

    def _account(self, data: bytes, due: float) -> bytes:
        self._seen += len(data)
        if self._late or self._clock() > due:
            # Arrived after it was due (or after the watchdog stopped the read: then not the whole body).
            self._late = True
            raise BodyTooSlow
        return data

    def read(self, size: int | None = -1, /) -> bytes:
        due = self._check()
        try:
            data = self._stream.read() if size is None or size < 0 else self._stream.read(size)
        except (TimeoutError, OSError, ValueError) as exc:
            if self._late or isinstance(exc, TimeoutError):
                self._late = True
                raise BodyTooSlow from None
            raise
        except Exception:
            if self._late:  # the server's reader saw the connection end under it
                raise BodyTooSlow from None
            raise
        return self._account(data, due)

    def readline(self, size: int | None = -1, /) -> bytes:
        due = self._check()
        try:
            data = self._stream.readline() if size is None or size < 0 else self._stream.readline(size)
        except Exception:
            if self._late:
                raise BodyTooSlow from None
            raise
        return self._account(data, due)

    def readlines(self, hint: int = -1, /) -> list[bytes]:
        return list(iter(self.readline, b""))

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def close(self) -> None:
        with self._lock:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()


def _has_body(environ: dict[str, Any]) -> bool:
    length = environ.get("CONTENT_LENGTH")
    if length:
        return length.strip() not in ("", "0")
    return "chunked" in str(environ.get("HTTP_TRANSFER_ENCODING", "")).lower()


class PacedBodies:
    """WSGI middleware: every request body is read through a `PacedInput`, and under gunicorn every send and
    receive on the connection is bounded by `send_timeout_s`."""

    def __init__(self, app: Any, pace: BodyPace, send_timeout_s: float) -> None:
        self.app = app
        self.pace = pace
        self.send_timeout_s = send_timeout_s

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        sock = environ.get("gunicorn.socket")
        if not isinstance(sock, socket.socket):
            sock = None
        if sock is not None:
            sock.settimeout(self.send_timeout_s)
        if not _has_body(environ) or "wsgi.input" not in environ:
            return cast("Iterable[bytes]", self.app(environ, start_response))
        paced = PacedInput(environ["wsgi.input"], self.pace, sock)
        environ["wsgi.input"] = paced
        try:
            return cast("Iterable[bytes]", self.app(environ, start_response))
        finally:
            # The body is read (or never will be) once the app has answered: a streamed response reads none.
            paced.close()
