"""The simulator's Flask app: the Perplexity Decisions, Agent and Search endpoints, offline.

Order of checks per request, gateway first as upstream: route (404 empty, 405 empty), bearer key (401),
body size (413), rate limit (429), fault draw and latency, then body validation (400 / 422) and the
engine. The body is validated before the draw, since a Decisions request's latency grows with its
questions, but a refusal is answered in its old place, after the fault and the latency. `x-request-id` is
on every response except 401, 404 and the 504 HTML page. The app works under any WSGI server and
in-process through `httpx.WSGITransport` (how the embedded demo uses it).
"""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from flask import Flask, Response, request
from waitress.channel import ClientDisconnected
from werkzeug.exceptions import MethodNotAllowed

from simulator import faults as fault_kit
from simulator.config import SimConfig
from simulator.envelopes import SimEngine, agent_envelope, decisions_envelope, search_envelope
from simulator.faults import Draw, FaultInjector, TestHeaderError
from simulator.limits import Clock, RateLimiter
from simulator.stats import Stats
from simulator.wire import (
    MAX_BODY_BYTES,
    SEARCH_DEFAULT_RESULTS,
    SearchValidationError,
    WireError,
    dumps,
    error_body,
    validate_agent,
    validate_decisions,
    validate_search,
)

EXTENSION = "factgate_simulator"
DROP_FLAG = "factgate.simulator.drop"
JSON = "application/json"
READ_CHUNK = 1024 * 1024
HTML_504 = (
    b"<html>\r\n<head><title>504 Gateway Time-out</title></head>\r\n<body>\r\n"
    b"<center><h1>504 Gateway Time-out</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
# (status, error type, message) of the 5xx faults; 429 is the limiter's own answer.
SERVER_ERRORS = {
    "500": (500, "internal_server_error", "Internal server error"),
    "502": (502, "bad_gateway", "Bad gateway"),
    "503": (503, "service_unavailable", "Service temporarily unavailable, please retry"),
}
# route path -> (stats name, limiter endpoint)
ROUTES = {
    "/v1/decisions": ("decisions", "decisions"),
    "/v1/agent": ("agent", "agent"),
    "/v1/responses": ("responses", "agent"),
    "/search": ("search", "search"),
}

log = logging.getLogger(__name__)
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass
class SimulatorState:
    """Everything one app instance shares across its request threads (in `app.extensions`)."""

    config: SimConfig
    engine: SimEngine
    limiter: RateLimiter
    faults: FaultInjector
    stats: Stats = field(default_factory=Stats)
    stopping: threading.Event = field(default_factory=threading.Event)
    sleep: Callable[[float], None] | None = None

    def pause(self, seconds: float) -> None:
        """Sleep for latency or a stalled fault; returns at once when the server is stopping."""
        if seconds <= 0:
            return
        if self.sleep is not None:
            self.sleep(seconds)
        else:
            self.stopping.wait(seconds)


class DroppedConnection(httpx.RemoteProtocolError):
    """Raised to an in-process httpx client (WSGITransport), which has no socket to close.

    It is the error httpx raises when a real server hangs up without answering, so retry code written for
    the network sees the same transport error in-process.
    """


class _DropMiddleware:
    """Holds back `start_response` until the app has answered, so a `drop` fault can send nothing at all.

    Under waitress, raising its `ClientDisconnected` before any byte is written makes the channel close the
    socket without a response (logged at INFO); elsewhere `DroppedConnection` is raised to the caller.
    """

    def __init__(self, inner: WSGIApp) -> None:
        self.inner = inner

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        held: list[tuple[Any, ...]] = []

        def hold(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., None]:
            held.append((status, headers, exc_info))
            return _no_write

        body = self.inner(environ, hold)
        if environ.get(DROP_FLAG):
            close = getattr(body, "close", None)
            if close is not None:
                close()
            if "waitress.client_disconnected" in environ:
                raise ClientDisconnected("simulated dropped connection")
            raise DroppedConnection("Server disconnected without sending a response.")
        for status, headers, exc_info in held:
            start_response(status, headers, exc_info)
        return body


class _InstantPath:
    """The answer to a request that nothing can delay or break, without Flask in between.

    With no fault rate, no latency and no rate limit on its endpoint, a request that carries no X-Sim-*
    header can only be answered (or refused as a client error), so the checks that remain — route, key,
    body size, validation — are made here on the WSGI environ and the engine's answer is written as is:
    the same status, body and `x-request-id` as through the Flask app, and counted in the same stats.
    Flask's request and response objects cost more than the answer itself, where an unlimited, instant
    upstream should cost next to nothing (measured: docs/profiles/README.md, "An instant simulator skips
    Flask").
    Anything else (other routes and methods, a test header) goes to the app.
    """

    def __init__(self, state: SimulatorState, inner: WSGIApp) -> None:
        self.state = state
        self.inner = inner
        config = state.config
        instant = config.fault_rate == 0 and config.latency_s == 0
        self.routes = {
            path: route for path, route in ROUTES.items() if instant and not state.limiter.limit_for(route[1])
        }
        self._faults = state.faults
        self.test_headers = (
            tuple("HTTP_" + name.upper().replace("-", "_") for name in fault_kit.TEST_HEADERS)
            if config.allow_test_headers
            else ()
        )

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        route = self.routes.get(environ.get("PATH_INFO", ""))
        if (
            route is None
            or self.state.faults is not self._faults  # a test swapped in other faults: the app draws them
            or environ.get("REQUEST_METHOD") != "POST"
            or not environ.get("CONTENT_LENGTH")
            or any(name in environ for name in self.test_headers)
        ):
            return self.inner(environ, start_response)
        name, endpoint = route
        status, body = self._answer(environ, endpoint)
        self.state.stats.record(name, status)
        headers = [("Content-Type", JSON), ("Content-Length", str(len(body)))]
        if status != 401:
            headers.append(("x-request-id", _request_id()))
        start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
        return [body]

    def _answer(self, environ: dict[str, Any], endpoint: str) -> tuple[int, bytes]:
        scheme, _, token = str(environ.get("HTTP_AUTHORIZATION", "")).partition(" ")
        keys = self.state.config.api_keys
        if (
            scheme.lower() != "bearer"
            or not token.strip()
            or (keys is not None and token.strip() not in keys)
        ):
            return 401, error_body(
                "Invalid or missing API key", "authentication_error", code="invalid_api_key"
            )
        length = int(environ["CONTENT_LENGTH"])
        if length > MAX_BODY_BYTES:
            return 413, error_body("Request body too large (limit 32 MiB)", "request_too_large")
        raw = environ["wsgi.input"].read(length)
        try:
            return 200, dumps(_answer(self.state, endpoint, raw))
        except WireError as error:
            return error.status, error.body()
        except SearchValidationError as error:
            return 422, error.body()
        except Exception:
            log.exception("simulator engine failed on %s", endpoint)
            return 500, error_body("Internal server error", "internal_server_error")


_REASONS = {200: "OK", 400: "BAD REQUEST", 401: "UNAUTHORIZED", 413: "REQUEST ENTITY TOO LARGE",
            422: "UNPROCESSABLE ENTITY", 500: "INTERNAL SERVER ERROR"}  # fmt: skip


def _no_write(data: bytes) -> None:  # pragma: no cover - Flask never uses the legacy write callable
    raise RuntimeError("write() is not supported")


def create_app(
    config: SimConfig | None = None,
    engine: SimEngine | None = None,
    *,
    clock: Clock | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Flask:
    """Build the simulator app. `clock` drives the rate limiter and `sleep` replaces real waiting (tests)."""
    config = config or SimConfig()
    if engine is None:
        # Imported here: only a simulator without an injected engine (the CLI, the demo) loads the corpus.
        from simulator.engine import Engine  # noqa: PLC0415

        engine = Engine(config)
    limits = {"decisions": config.decisions_rps, "search": config.search_rps, "agent": config.agent_rps}
    state = SimulatorState(
        config=config,
        engine=engine,
        limiter=RateLimiter(limits) if clock is None else RateLimiter(limits, clock),
        faults=FaultInjector(config),
        sleep=sleep,
    )
    app = Flask("simulator")
    app.extensions[EXTENSION] = state
    app.wsgi_app = _InstantPath(state, _DropMiddleware(app.wsgi_app))  # type: ignore[method-assign]

    for path, (name, endpoint) in ROUTES.items():
        app.add_url_rule(
            path,
            endpoint=name,
            view_func=_make_view(state, name, endpoint),
            methods=["POST"],
            provide_automatic_options=False,
        )
    app.add_url_rule(
        "/stats",
        endpoint="stats",
        view_func=lambda: _json(200, dumps(state.stats.snapshot())),
        methods=["GET"],
        provide_automatic_options=False,
    )

    @app.errorhandler(404)
    def not_found(_error: Exception) -> Response:
        state.stats.record("unknown", 404)
        return Response(b"", 404)

    @app.errorhandler(405)
    def wrong_method(error: MethodNotAllowed) -> Response:
        state.stats.record(ROUTES.get(request.path, ("stats", ""))[0], 405)
        headers = {"x-request-id": _request_id(), "Allow": ", ".join(sorted(error.valid_methods or []))}
        return Response(b"", 405, headers=headers)

    return app


def simulator_state(app: Flask) -> SimulatorState:
    """The shared state of an app made by `create_app` (stats, stop event, limiter)."""
    state: SimulatorState = app.extensions[EXTENSION]
    return state


def _request_id() -> str:
    return str(uuid.uuid4())


def _make_view(state: SimulatorState, name: str, endpoint: str) -> Callable[[], Response]:
    def view() -> Response:
        response = _handle(state, name, endpoint)
        state.stats.record(name, "dropped" if request.environ.get(DROP_FLAG) else response.status_code)
        return response

    view.__name__ = f"{name}_view"
    return view


def _json(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> Response:
    response = Response(body, status, content_type=JSON)
    response.headers["x-request-id"] = _request_id()
    if headers:
        response.headers.update(headers)
    return response


def _bearer_ok(state: SimulatorState) -> str | None:
    """The caller's key, or None when it is missing or not accepted."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    keys = state.config.api_keys
    if keys is not None and token not in keys:
        return None
    return token


def _read_body() -> bytes | None:
    """The request body, or None when it is larger than the API accepts (checked before reading)."""
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        return None
    stream = request.stream
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(min(READ_CHUNK, MAX_BODY_BYTES + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
    return b"".join(chunks)


def _handle(state: SimulatorState, name: str, endpoint: str) -> Response:
    api_key = _bearer_ok(state)
    if api_key is None:
        # The gateway answers 401 before the request gets an id.
        return Response(
            error_body("Invalid or missing API key", "authentication_error", code="invalid_api_key"),
            401,
            content_type=JSON,
        )
    raw = _read_body()
    if raw is None:
        return _json(413, error_body("Request body too large (limit 32 MiB)", "request_too_large"))
    if not state.limiter.try_acquire(api_key, endpoint):
        retry_after = "1"
        if state.config.allow_test_headers:
            retry_after = request.headers.get(fault_kit.RETRY_AFTER_HEADER, "1")
        return _too_many(state, endpoint, retry_after)
    # Validated before the draw, whose latency grows with the questions; a refusal is still answered
    # after faults and latency, as upstream does.
    parsed = _Parsed.of(endpoint, raw)
    try:
        draw = state.faults.draw(_test_headers(), questions=parsed.questions)
    except TestHeaderError as error:
        return _json(400, error_body(str(error), "invalid_request_error", param=error.header))
    if draw.fault is not None:
        state.stats.record_fault(draw.fault)
    state.pause(draw.latency_s)
    early = _replacing_fault(state, endpoint, draw)
    if early is not None:
        return early
    if draw.fault == "slow":
        state.pause(state.faults.slow_s)
    try:
        payload = _respond(state, endpoint, parsed.valid())
    except WireError as error:
        return _json(error.status, error.body())
    except SearchValidationError as error:
        return _json(422, error.body())
    except Exception:
        log.exception("simulator engine failed on %s", name)
        return _json(500, error_body("Internal server error", "internal_server_error"))
    response = _json(200, _encode(endpoint, payload, draw.fault))
    if draw.fault == "request_id_long":
        response.headers["x-request-id"] = fault_kit.long_request_id()
    return response


def _test_headers() -> dict[str, str]:
    """The X-Sim-* headers present on this request (werkzeug's Headers is no Mapping)."""
    present = ((name, request.headers.get(name)) for name in fault_kit.TEST_HEADERS)
    return {name: value for name, value in present if value is not None}


def _too_many(state: SimulatorState, endpoint: str, retry_after: str) -> Response:
    limit = state.limiter.limit_for(endpoint)
    message = (
        f"Rate limit exceeded: at most {limit:g} {endpoint} requests per second per API key"
        if limit
        else "Rate limit exceeded"
    )
    return _json(429, error_body(message, "rate_limit_exceeded"), {"Retry-After": retry_after})


def _replacing_fault(state: SimulatorState, endpoint: str, draw: Draw) -> Response | None:
    fault = draw.fault
    if fault is None or fault not in fault_kit.REPLACING_FAULTS:
        return None
    if fault == "429":
        return _too_many(state, endpoint, draw.retry_after)
    if fault == "504_html":
        state.pause(state.faults.html_504_delay_s)
        return Response(HTML_504, 504, content_type="text/html")
    if fault == "drop":
        request.environ[DROP_FLAG] = True
        return Response(b"", 200)
    if fault == "error_nul":
        return _json(400, fault_kit.nul_error(endpoint))
    status, error_type, message = SERVER_ERRORS[fault]
    return _json(status, error_body(message, error_type))


@dataclass(frozen=True)
class _Parsed:
    """A request body as validated: the body, or the refusal (or unexpected error) it met."""

    endpoint: str
    body: dict[str, Any] | None
    problem: Exception | None

    @classmethod
    def of(cls, endpoint: str, raw: bytes) -> _Parsed:
        try:
            return cls(endpoint, _validate(endpoint, raw), None)
        except Exception as error:  # answered later, in the place a refusal has always been answered
            return cls(endpoint, None, error)

    @property
    def questions(self) -> int:
        """How many questions a valid Decisions body asks (1 for anything else): latency grows with it."""
        if self.endpoint != "decisions" or self.body is None:
            return 1
        return len(self.body["questions"])

    def valid(self) -> dict[str, Any]:
        if self.body is None:
            raise self.problem if self.problem is not None else ValueError("no request body")
        return self.body


def _validate(endpoint: str, raw: bytes) -> dict[str, Any]:
    if endpoint == "decisions":
        return validate_decisions(raw)
    if endpoint == "agent":
        return validate_agent(raw)
    return validate_search(raw)


def _respond(state: SimulatorState, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    if endpoint == "decisions":
        return decisions_envelope(body["model"], state.engine.decide(body))
    if endpoint == "agent":
        return agent_envelope(body, state.engine.agent(body))
    max_results = body.get("max_results") or SEARCH_DEFAULT_RESULTS
    return search_envelope(state.engine.search(body), max_results)


def _answer(state: SimulatorState, endpoint: str, raw: bytes) -> dict[str, Any]:
    return _respond(state, endpoint, _validate(endpoint, raw))


def _encode(endpoint: str, payload: dict[str, Any], fault: str | None) -> bytes:
    if fault == "bad_probability":
        return dumps(fault_kit.break_shape(endpoint, copy.deepcopy(payload)))
    if fault in fault_kit.HOSTILE_BODY_FAULTS:
        return fault_kit.hostile(endpoint, copy.deepcopy(payload), fault)
    body = dumps(payload)
    if fault == "malformed_json":
        return fault_kit.malformed(body)
    if fault == "truncated_json":
        return fault_kit.truncated(body)
    return body
