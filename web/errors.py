"""One JSON error shape for the whole API, and the handlers that make Flask use it.

Every error under /v1 (and /healthz, /readyz, /openapi.json) looks like
`{"error": {"type", "message", "field"?, "line"?, "index"?, "errors"?: [...], "job_id"?}}` so a client
needs one parser. Messages are written here or by our validators; exception text from libraries is never
echoed (it can carry connection strings), so unexpected errors answer with a fixed message and are logged.

An unreachable dependency is not an unexpected error: while Postgres restarts (or Redis, or the broker, is
away) a request answers 503 `service_unavailable_error` with `Retry-After: RETRY_AFTER_S`, and the log gets
one warning line instead of a traceback (`outage_error`; the pages render the same as HTML). A statement the
database refuses is still a 500: `models.database_unreachable` tells the two apart.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

import kombu.exceptions
import redis.exceptions
from flask import Flask, Response, abort, jsonify, request
from werkzeug.exceptions import HTTPException

from models import database_unreachable

log = logging.getLogger("factgate.web")

# Problem types: a stable, documented vocabulary (web/openapi.py lists them).
INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
NOT_FOUND = "not_found_error"
METHOD_NOT_ALLOWED = "method_not_allowed_error"
CONFLICT = "conflict_error"
# An Idempotency-Key sent again with another submission (the error names the job that holds the key).
IDEMPOTENCY_CONFLICT = "idempotency_conflict"
TOO_LARGE = "request_too_large_error"
UNSUPPORTED_MEDIA = "unsupported_media_type_error"
SERVER_ERROR = "server_error"
UNAVAILABLE = "service_unavailable_error"
QUOTA_EXCEEDED = "quota_exceeded"
URI_TOO_LONG = "uri_too_long_error"
HEADERS_TOO_LARGE = "header_fields_too_large_error"
# DELETE of a job that has not ended (the message says to cancel it first).
JOB_LIVE = "job_live"
# The results of a job past its retention: the job row and summary remain, its items do not.
JOB_PURGED = "job_purged"

ERROR_TYPES = (
    INVALID_REQUEST,
    AUTHENTICATION,
    NOT_FOUND,
    METHOD_NOT_ALLOWED,
    CONFLICT,
    IDEMPOTENCY_CONFLICT,
    TOO_LARGE,
    UNSUPPORTED_MEDIA,
    SERVER_ERROR,
    UNAVAILABLE,
    QUOTA_EXCEEDED,
    URI_TOO_LONG,
    HEADERS_TOO_LARGE,
    JOB_LIVE,
    JOB_PURGED,
)

# Seconds a client is told to wait (`Retry-After`) when a dependency is unreachable: a Postgres restart
# is a few seconds (fast shutdown and start), and a poll every 5 s neither hammers a recovering database
# nor keeps a client waiting long after it is back.
RETRY_AFTER_S = 5

# Connection-level faults of Redis and the broker (as workers/faults.py:INFRA_ERRORS has them); the
# database's are told apart from SQL errors by models.database_unreachable.
_REDIS_OUTAGES: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,  # BusyLoadingError (a restarting Redis) included
    redis.exceptions.TimeoutError,
)

# Paths whose errors are JSON even when raised by Flask itself (routing, size limits).
JSON_PREFIXES = ("/v1", "/healthz", "/readyz", "/openapi.json")


class Problem(TypedDict, total=False):
    """One entry of an error's `errors` list (a bad row: web/intake.py), its keys in the order written:
    `index` or `line`, then `field`, then `message`, which every entry has."""

    index: int
    line: int
    field: str
    message: str


class ApiError(Exception):
    """An error response: raise it anywhere in a view and the handler renders the JSON shape."""

    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        *,
        field: str | None = None,
        line: int | None = None,
        index: int | None = None,
        errors: list[Problem] | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
        job_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.field = field
        self.line = line
        self.index = index
        self.errors = errors
        self.headers = headers or {}
        self.extra = extra or {}
        self.job_id = job_id

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.field is not None:
            err["field"] = self.field
        if self.line is not None:
            err["line"] = self.line
        if self.index is not None:
            err["index"] = self.index
        if self.errors:
            err["errors"] = self.errors
        err.update(self.extra)
        if self.job_id is not None:
            err["job_id"] = self.job_id
        return {"error": err}


def invalid(message: str, **kw: Any) -> ApiError:
    """A 400 for bad input."""
    return ApiError(400, INVALID_REQUEST, message, **kw)


def not_found(message: str = "not found") -> ApiError:
    return ApiError(404, NOT_FOUND, message)


def conflict(message: str) -> ApiError:
    return ApiError(409, CONFLICT, message)


def too_large(limit: int) -> ApiError:
    return ApiError(413, TOO_LARGE, f"request body exceeds the limit of {limit} bytes")


def unauthenticated(message: str) -> ApiError:
    # RFC 6750: a 401 names the scheme the client should use.
    return ApiError(401, AUTHENTICATION, message, headers={"WWW-Authenticate": 'Bearer realm="factgate"'})


def unavailable(message: str) -> ApiError:
    """A 503 that says when to try again (RETRY_AFTER_S): a dependency is unreachable for a moment."""
    return ApiError(503, UNAVAILABLE, message, headers={"Retry-After": str(RETRY_AFTER_S)})


def unreachable_service(exc: BaseException) -> str | None:
    """Which dependency `exc` says is unreachable ("database", "redis", "broker"), or None for any other
    error (a bug, bad data, a statement the database refused: those stay 500s)."""
    if database_unreachable(exc):
        return "database"
    if isinstance(exc, _REDIS_OUTAGES):
        return "redis"
    if isinstance(exc, kombu.exceptions.OperationalError):
        return "broker"
    return None


def outage_error(exc: BaseException) -> ApiError | None:
    """The 503 for an unreachable dependency, logged as one warning line (an outage is expected and already
    visible elsewhere; a traceback per request would bury the log); None when `exc` is not one."""
    service = unreachable_service(exc)
    if service is None:
        return None
    orig = getattr(exc, "orig", None)  # the driver's own error: its first line says what failed
    cause = orig if isinstance(orig, BaseException) else exc
    detail = (str(cause).strip().splitlines() or [""])[0][:200]
    log.warning(
        "%s unreachable on %s %s (%s: %s); answered 503",
        service,
        request.method,
        request.path,
        type(exc).__name__,
        detail,
    )
    what = {"database": "the database", "redis": "Redis", "broker": "the message broker"}[service]
    return unavailable(
        f"{what} is unreachable for the moment (restarting or overloaded); try again in {RETRY_AFTER_S} "
        "seconds"
    )


def render(err: ApiError) -> Response:
    resp = jsonify(err.body())
    resp.status_code = err.status
    for name, value in err.headers.items():
        resp.headers[name] = value
    return resp


_HTTP_TYPES = {
    400: INVALID_REQUEST,
    401: AUTHENTICATION,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    408: INVALID_REQUEST,
    409: CONFLICT,
    413: TOO_LARGE,
    415: UNSUPPORTED_MEDIA,
    503: UNAVAILABLE,
}

# Fixed messages for errors Flask raises itself: Werkzeug's descriptions are HTML-flavoured prose.
_HTTP_MESSAGES = {
    400: "bad request",
    404: "no such endpoint",
    405: "method not allowed on this endpoint",
    408: (
        "the request body arrived too slowly (FACTGATE_BODY_MIN_BYTES_PER_S after FACTGATE_BODY_GRACE_S); "
        "send it again"
    ),
    413: "request body too large",
    415: "unsupported content type",
}


def _wants_json() -> bool:
    return request.path.startswith(JSON_PREFIXES)


# The longest request line gunicorn accepts (web/gunicorn_conf.py); the same bound here holds for servers
# with laxer limits (waitress in embedded mode), so a URL is refused the same way whichever server runs.
MAX_REQUEST_LINE = 8190


def _refuse_long_urls() -> None:
    line = len(request.method) + len(request.full_path) + len(" HTTP/1.1 ")
    if line > MAX_REQUEST_LINE:
        raise ApiError(
            414, URI_TOO_LONG, "the request line (method and URL) is too long; send long inputs in the body"
        )


def _nul_in_url() -> str | None:
    """Where the URL holds a NUL character (`%00`): "path", or the query parameter's name."""
    if "\x00" in request.path:
        return "path"
    for name, value in request.args.items(multi=True):
        if "\x00" in name or "\x00" in value:
            return name.replace("\x00", "") or "query"
    return None


def _refuse_nul() -> None:
    """A NUL character in the path or the query is refused before any view runs: no id, name or date holds
    one, and Postgres refuses it in any text it is sent, so it would otherwise fail in the query, a 500."""
    where = _nul_in_url()
    if where is None:
        return
    message = f"the URL holds a NUL character (%00) in {'the path' if where == 'path' else where}"
    if not _wants_json():
        abort(400, description=message)
    raise invalid(message, field=where)


def register_error_handlers(app: Flask) -> None:
    """JSON for ApiError everywhere, and for Flask's own HTTP errors on API paths."""
    app.before_request(_refuse_long_urls)
    app.before_request(_refuse_nul)

    @app.errorhandler(ApiError)
    def _api_error(err: ApiError) -> Response:
        return render(err)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response | HTTPException:
        if not _wants_json():
            return exc
        code = exc.code or 500
        message = _HTTP_MESSAGES.get(code, exc.name.lower())
        if code == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH")
            if limit:
                message = f"request body exceeds the limit of {limit} bytes"
        err = ApiError(code, _HTTP_TYPES.get(code, INVALID_REQUEST if code < 500 else SERVER_ERROR), message)
        resp = render(err)
        if code == 405 and exc.get_response().headers.get("Allow"):
            resp.headers["Allow"] = exc.get_response().headers["Allow"]
        return resp

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        outage = outage_error(exc)
        if outage is not None:
            return render(outage)
        # Never echo: driver and library messages can contain URLs with credentials.
        log.exception("unhandled error on %s %s", request.method, request.path)
        return render(ApiError(500, SERVER_ERROR, "internal error; the server log has the details"))
