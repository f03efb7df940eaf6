"""Errors the HTTP server writes itself, before Flask runs, in the API's JSON error shape.

gunicorn refuses some requests on its own (a request line over its limit is a 414, too many or too large
headers a 431, a malformed request a 400) by writing a raw HTTP response through `gunicorn.util.write_error`
— an HTML page. `install_json_errors` replaces that one function, process-wide, with `write_json_error`, so
a client gets `{"error": {"type", "message"}}` with the same status whatever layer refused it. The message is
fixed per status: gunicorn's own text can echo the offending request line back.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from web.errors import (
    HEADERS_TOO_LARGE,
    INVALID_REQUEST,
    SERVER_ERROR,
    URI_TOO_LONG,
)

_TYPES = {414: URI_TOO_LONG, 431: HEADERS_TOO_LARGE}
_MESSAGES = {
    400: "malformed HTTP request",
    403: "request refused",
    414: "the request line (method and URL) is too long; send long inputs in the body",
    417: "expectation not supported",
    431: "request headers too large",
    500: "internal error; the server log has the details",
    501: "not implemented",
}


def json_error_response(status: int, reason: str) -> bytes:
    """A complete HTTP/1.1 response carrying the API's JSON error shape (connection closed after it)."""
    type_ = _TYPES.get(status, INVALID_REQUEST if status < 500 else SERVER_ERROR)
    body = json.dumps({"error": {"type": type_, "message": _MESSAGES.get(status, reason.lower())}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    ).encode("latin-1")
    return head + body


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's `util.write_error`, answering in JSON (`mesg`, which may echo the request, is dropped)."""
    from gunicorn import util  # noqa: PLC0415 - only inside a gunicorn process

    util.write_nonblock(sock, json_error_response(status_int, reason))


def install_json_errors() -> None:
    """Make gunicorn write its own errors as JSON (call in the master, before the workers fork)."""
    from gunicorn import util  # noqa: PLC0415 - only inside a gunicorn process

    patched: Any = write_json_error
    util.write_error = patched
