"""One httpx client for the Perplexity Decisions, Agent and Search APIs.

Every call: serialise the body once, ask the rate limiter for a slot (`before_attempt`),
POST, and either return a validated answer or decide — through `clients.retry` — whether to
wait and try again. Each POST becomes an `AttemptRecord`; the call returns (or raises) with a
`CallRecord` holding all of them. Connections are kept alive, in one pool per thread that uses
the instance; it is safe to share between the threads of one worker.

Upstream text enters here and in the validators, and both pass it through `clients.sanitize`:
the validators clean the answer's fields, this module each attempt's `x-request-id` and error
message. What was cleaned is named in the record's `sanitized`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from importlib import metadata
from typing import Any, TypedDict, TypeVar

import httpx

from clients.errors import API_KEY_ENV, CallInterrupted, MissingApiKeyError, UpstreamError
from clients.records import AttemptRecord, CallRecord
from clients.redaction import one_line, redact
from clients.results import AgentAnswer, Decision, SearchResponse
from clients.retry import RetryPolicy, retryable_exception, retryable_status
from clients.sanitize import ERROR, REQUEST_ID, clean, storable_chars
from clients.tls import trust_store
from clients.validation import (
    MalformedResponseError,
    validate_agent,
    validate_decision,
    validate_partial_decision,
    validate_search,
)
from clients.wire_ack import acking_transport, await_arrival, forget_written

DEFAULT_BASE_URL = "https://api.perplexity.ai"
BASE_URL_ENV = "PERPLEXITY_API_BASE"


def _package_version() -> str:
    """The installed distribution's version, so the User-Agent always names the code that sent it."""
    try:
        return metadata.version("factgate")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


DEFAULT_USER_AGENT = f"factgate/{_package_version()} (httpx {httpx.__version__})"
AGENT_TIMEOUT_S = 120.0  # an Agent call searches and writes; 30 s is too short for it

DECISIONS, AGENT, SEARCH = "decisions", "agent", "search"
PATHS = {DECISIONS: "/v1/decisions", AGENT: "/v1/agent", SEARCH: "/search"}

logger = logging.getLogger("factgate.clients")

Result = TypeVar("Result", Decision, AgentAnswer, SearchResponse)
Validator = Callable[[object, Mapping[str, Any]], Result]
TimeoutArg = float | httpx.Timeout

_HTML = re.compile(r"(?is)^\s*(<!doctype|<html)")
_TITLE = re.compile(r"(?is)<title[^>]*>(.*?)</title>")
_TAG = re.compile(r"(?s)<[^>]+>")


def _check_key(api_key: str | None) -> str:
    key = (api_key or "").strip()
    if not key:
        raise MissingApiKeyError
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        # Said without the value: a header error from httpx would print it.
        raise ValueError(f"{API_KEY_ENV} contains spaces or non-ASCII characters; check how it was set")
    return key


def error_message(response: httpx.Response) -> str:
    """The most useful text of a failed response: `error.message`, a 422 `detail`, or the raw body."""
    text = response.text
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"].strip():
            return str(error["message"])
        if isinstance(error, str) and error.strip():
            return error
        detail = data.get("detail")
        if isinstance(detail, str) and detail.strip():
            return detail
        if isinstance(detail, list) and detail:
            return "; ".join(_detail_line(item) for item in detail)
    if _HTML.match(text):  # a gateway's 504 page: its title says more than its markup
        title = _TITLE.search(text)
        text = title.group(1) if title else _TAG.sub(" ", text)
    if text.strip():
        return text
    return response.reason_phrase or "empty body"


def _detail_line(item: object) -> str:
    """One FastAPI validation error as `loc.path: msg`."""
    if not isinstance(item, dict):
        return str(item)
    loc = item.get("loc")
    where = ".".join(str(part) for part in loc) if isinstance(loc, list) else ""
    message = str(item.get("msg", item))
    return f"{where}: {message}" if where else message


def _grounded(endpoint: str, body: Mapping[str, Any]) -> bool:
    if endpoint == DECISIONS:
        return body.get("mode") == "web_grounding"
    if endpoint == AGENT:
        tools = body.get("tools")
        return isinstance(tools, list) and any(
            isinstance(t, dict) and t.get("type") == "web_search" for t in tools
        )
    return True  # every Search call is a search


def _requested_model(body: Mapping[str, Any]) -> str | None:
    for name in ("model", "preset"):
        value = body.get(name)
        if isinstance(value, str) and value:
            return value
    return None


WireGate = Callable[[str], Callable[[], object] | None]


class _GateStopped(Exception):  # noqa: N818 - internal carrier, never seen outside `_call`
    """The wire gate raised inside httpcore's trace hook; carries its exception out of httpx untouched."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Wire:
    """One attempt's trip onto the wire, followed through httpcore's `trace` request extension.

    Why here and not before `post`: what happens between a limiter's grant and the first byte on the wire
    (taking a pooled connection, opening one, TLS, building the request, a thread that is not scheduled)
    takes a variable time. httpcore calls the hook in the sending thread just before it writes the request
    headers (the connection is up by then) and again once the body is written, so the gate runs as late
    as anything can, and the limiter learns when the request actually left.
    """

    def __init__(
        self,
        gate: WireGate,
        endpoint: str,
        clock: Callable[[], float],
        arrival: Callable[[], object] | None = None,
        holds: bool = False,
    ) -> None:
        self._gate = gate
        self._arrival = arrival
        self._holds = holds  # the transport holds the request's bytes until its body is complete
        self.renewed = 0  # passes taken again (stale ones replaced before the write)
        self._endpoint = endpoint
        self._clock = clock
        self._left: Callable[[], object] | None = None
        # Seconds spent in the gate: a wait for the limiter, not upstream latency (the record says which).
        self.held_s = 0.0

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event.endswith(".send_request_headers.started"):
            self.done()  # never two open passes for one attempt
            forget_written()
            self._pass_gate()
        elif event.endswith(".send_request_body.complete"):
            self._renew_if_stale()
            if self._left is not None and self._arrival is not None:
                # Reported once the peer has the whole request (clients/wire_ack.py): written is not yet
                # arrived when a queue (a slow link) sits between this socket and the upstream.
                try:
                    self._arrival()
                except Exception:
                    logger.debug(
                        "could not tell when the request arrived; the write time stands", exc_info=True
                    )
            self.done()

    def _renew_if_stale(self) -> None:
        """Pass the gate again when the pass went stale before the request was written (a process stopped
        or stalled past the gate's in-flight bound, `RateLimiter.pass_fresh`). Only with a stream that holds
        the request until now (clients/wire_ack.py, the client's own transport: `_holds`): then no byte of
        it has left, and the old pass is reported as gone, which only makes the gate stricter for a while."""
        fresh = getattr(self._left, "fresh", None)
        if not self._holds or fresh is None or fresh():
            return
        logger.warning(
            "%s: the wire gate's pass went stale before the request was written (a stall); passing again",
            self._endpoint,
        )
        self.done()
        self._pass_gate()
        self.renewed += 1

    def _pass_gate(self) -> None:
        """Wait at the gate for this attempt's pass; the wait counts as held (queue), not latency."""
        entered = self._clock()
        try:
            self._left = self._gate(self._endpoint)
        except Exception as exc:
            raise _GateStopped(exc) from exc
        finally:
            self.held_s += max(0.0, self._clock() - entered)

    def done(self) -> None:
        """Report the request as gone (once). Also run when the attempt ends otherwise — a write that
        failed half-way may have reached the upstream, so it counts. A failure to report never fails a
        request that was sent: its entry is then counted until the gate's in-flight bound."""
        left, self._left = self._left, None
        if left is None:
            return
        try:
            left()
        except Exception:
            logger.warning(
                "could not record when a request left; the gate counts it a while longer", exc_info=True
            )


class PerplexityClient:
    """Decisions, Agent and Search with retries, typed errors, validation and call records.

    `before_attempt(endpoint)` runs before every POST (the global limiter blocks there);
    `before_send(endpoint)` runs just before each POST's first byte is written, once the connection is
    up (it may wait: the limiter's wire gate), and returns a callback run once the last byte is written —
    only with transports that report httpcore's `trace` (httpx's own; not the in-process WSGI one);
    with httpx's own transport (`transport` None) the report waits until the peer has acknowledged the
    whole request (`arrival`, clients/wire_ack.py), so a request queued behind a slow link is not reported
    as gone before it arrived; a given transport reports at the write unless `arrival` is given too;
    `on_throttled(endpoint, wait_s)` runs on every 429 with the wait the policy chose, so the
    limiter can pause every worker. `sleep`, `clock` (monotonic), `wall_clock` (Unix time, for
    HTTP-date `Retry-After`) and `random` are injectable so tests never sleep.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        *,
        timeout: TimeoutArg = 30.0,
        agent_timeout: TimeoutArg = AGENT_TIMEOUT_S,
        max_retries: int = 3,
        retry_base_s: float = 1.0,
        transport: httpx.BaseTransport | None = None,
        before_attempt: Callable[[str], object] | None = None,
        before_send: WireGate | None = None,
        on_throttled: Callable[[str, float], object] | None = None,
        arrival: Callable[[], object] | None = None,
        sleep: Callable[[float], object] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        random: Callable[[], float] = random.random,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> None:
        key = _check_key(api_key)
        base = (base_url or DEFAULT_BASE_URL).strip().rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ValueError(f"{BASE_URL_ENV} must be an http(s) URL, got {base_url!r}")
        self.base_url = base
        self.policy = RetryPolicy(max_retries=max_retries, base_delay_s=retry_base_s)
        self._key = key
        self._agent_timeout = agent_timeout
        self._before_attempt = before_attempt
        self._before_send = before_send
        self._on_throttled = on_throttled
        # Without a given transport, httpx's own one (with the arrival wait when there is a gate) is made
        # per thread: see `_transport`.
        own_transport = transport is None
        if own_transport and before_send is not None:
            arrival = arrival or await_arrival
        self._arrival = arrival
        self._sleep = sleep
        self._clock = clock
        self._wall_clock = wall_clock
        self._random = random
        headers = {
            "Authorization": f"Bearer {key}",
            "User-Agent": user_agent,
            "Accept": "application/json",
            "Content-Type": "application/json",
        }

        own_wire = own_transport and before_send is not None

        def http_client() -> httpx.Client:
            return httpx.Client(
                base_url=base,
                headers=headers,
                timeout=timeout,
                transport=acking_transport(verify=trust_store()) if own_wire else transport,
                follow_redirects=False,
                verify=trust_store(),
            )

        self._http_client = http_client
        self._http = http_client()
        # Each endpoint's URL merged with the base once: merging a relative path parses it again on every
        # request (2 % of a worker's CPU at the ceiling, bench/ceiling.py).
        self._urls = {
            endpoint: self._http.build_request("POST", path).url for endpoint, path in PATHS.items()
        }
        # Each endpoint's transport (a proxy the environment names for it included), its request headers
        # (ours and httpx's defaults) and the default timeout, settled once for `_post`. A given transport
        # is shared by every thread; httpx's own is made once per thread (`_transport`).
        self._shared = None if own_transport else self._endpoint_transports(self._http)
        # httpx's own transport here holds a request's bytes until its body is complete (clients/wire_ack.py),
        # so a stale gate pass can still be replaced before anything is written (`_Wire._renew_if_stale`).
        self._holds = own_transport and before_send is not None
        self._local = threading.local()
        self._per_thread: list[tuple[weakref.ref[threading.Thread], httpx.Client]] = []
        self._per_thread_lock = threading.Lock()
        self._headers = self._http.headers
        self._timeouts = self._http.timeout.as_dict()

    def _endpoint_transports(self, http: httpx.Client) -> dict[str, httpx.BaseTransport]:
        return {
            endpoint: http._transport_for_url(url)  # private: what Client.send picks per request
            for endpoint, url in self._urls.items()
        }

    def _transport(self, endpoint: str) -> httpx.BaseTransport:
        """The transport this thread sends `endpoint`'s POSTs through.

        Why one pool per thread: httpcore's pool looks over every connection it keeps twice per request
        (is it closed, expired, idle — the last a `poll` of its socket), under one lock. Shared by a
        worker's 16 threads it kept up to 16 connections, so each request paid about 14 `poll` calls and a
        quadratic count of idle checks, and the threads queued for the lock. A thread's own pool holds the
        one connection that thread uses; the number of connections is the same (one per busy thread)."""
        if self._shared is not None:
            return self._shared[endpoint]
        transports: dict[str, httpx.BaseTransport] | None = getattr(self._local, "transports", None)
        if transports is None:
            http = self._http_client()
            with self._per_thread_lock:
                if self._http.is_closed:
                    http.close()
                    raise RuntimeError("Cannot send a request, as the client has been closed.")
                # Pools of threads that ended are closed here, so short-lived threads leak nothing.
                for ref, old in [(r, c) for r, c in self._per_thread if not _alive(r())]:
                    old.close()
                    self._per_thread.remove((ref, old))
                self._per_thread.append((weakref.ref(threading.current_thread()), http))
            transports = self._local.transports = self._endpoint_transports(http)
        return transports[endpoint]

    @classmethod
    def from_env(cls, **kwargs: Any) -> PerplexityClient:
        """Build from `PERPLEXITY_API_KEY` and `PERPLEXITY_API_BASE`; keyword arguments win."""
        kwargs.setdefault("api_key", os.environ.get(API_KEY_ENV))
        kwargs.setdefault("base_url", (os.environ.get(BASE_URL_ENV) or "").strip() or DEFAULT_BASE_URL)
        return cls(**kwargs)

    def __repr__(self) -> str:
        return f"PerplexityClient(base_url={self.base_url!r}, max_retries={self.policy.max_retries})"

    def close(self) -> None:
        with self._per_thread_lock:
            self._http.close()
            for _ref, http in self._per_thread:
                http.close()
            self._per_thread.clear()

    def __enter__(self) -> PerplexityClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- the three APIs -----------------------------------------------------------------------

    def decide(
        self, body: Mapping[str, Any], *, timeout: TimeoutArg | None = None, partial: bool = False
    ) -> Decision:
        """`POST /v1/decisions`; the body is sent as given (model, state, questions, mode). With `partial`
        (a packed request) an answer may leave questions out; the caller asks their items again."""
        return self._call(
            DECISIONS, body, validate_partial_decision if partial else validate_decision, timeout
        )

    def agent(self, body: Mapping[str, Any], *, timeout: TimeoutArg | None = None) -> AgentAnswer:
        """`POST /v1/agent`; an answer without message text or search results is an error."""
        return self._call(
            AGENT, body, validate_agent, timeout if timeout is not None else self._agent_timeout
        )

    def search(self, body: Mapping[str, Any], *, timeout: TimeoutArg | None = None) -> SearchResponse:
        """`POST /search`."""
        return self._call(SEARCH, body, validate_search, timeout)

    # --- one call, every attempt --------------------------------------------------------------

    def _call(
        self,
        endpoint: str,
        body: Mapping[str, Any],
        validate: Validator[Result],
        timeout: TimeoutArg | None,
    ) -> Result:
        # Serialised once: a body that cannot be JSON is our bug, raised before any POST.
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        requested_model = _requested_model(body)
        grounded = _grounded(endpoint, body)
        attempts: list[AttemptRecord] = []
        cleaned: list[str] = []  # attempt fields `clients.sanitize` changed, as "attempt[N].<field>"
        started = self._clock()

        def record(
            answer_cleaned: Sequence[str] = (),
            *,
            model: str | None = None,
            input_tokens: int | None = None,
            output_tokens: int | None = None,
            search_results: int = 0,
        ) -> CallRecord:
            return CallRecord(
                endpoint=endpoint,
                model=model or requested_model,
                attempts=list(attempts),
                latency_s=self._clock() - started,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                search_results=search_results,
                grounded=grounded,
                sanitized=[*answer_cleaned, *cleaned],
            )

        def surface(text: str) -> str:
            message, changed = self._surface(text)
            if changed:
                cleaned.append(f"attempt[{len(attempts) + 1}].error")
            return message

        def failure(
            status: int | None, message: str, request_id: str | None, retryable: bool
        ) -> UpstreamError:
            """The call's error, its record holding every attempt so far."""
            return UpstreamError(
                endpoint=endpoint,
                status=status,
                message=message,
                request_id=request_id,
                retryable=retryable,
                record=record(),
            )

        def request_id_of(response: httpx.Response) -> str | None:
            raw = response.headers.get("x-request-id") or None
            if raw is None:
                return None
            request_id = clean(raw, REQUEST_ID)
            if request_id != raw:
                cleaned.append(f"attempt[{len(attempts) + 1}].request_id")
            return request_id or None

        while True:
            queued = self._clock()
            if self._before_attempt is not None:
                try:
                    self._before_attempt(endpoint)
                except Exception as stop:
                    if not attempts:
                        raise  # nothing was sent: the caller sees the cause itself
                    raise CallInterrupted(record(), stop) from stop
            sent = self._clock()
            queue_wait = sent - queued
            status: int | None = None
            request_id: str | None = None
            retry_after: str | None = None
            wire = (
                None
                if self._before_send is None
                else _Wire(self._before_send, endpoint, self._clock, self._arrival, self._holds)
            )
            try:
                try:
                    response = self._post(endpoint, content, timeout, None if wire is None else wire.trace)
                finally:
                    if wire is not None:
                        wire.done()
            except _GateStopped as stopped:
                # Nothing of this attempt was written: like `before_attempt` refusing.
                if not attempts:
                    raise stopped.cause from None
                raise CallInterrupted(record(), stopped.cause) from stopped.cause
            except httpx.HTTPError as error:
                latency = self._clock() - sent - held(wire)
                queue_wait += held(wire)
                detail = str(error)
                message = surface(f"{type(error).__name__}: {detail}" if detail else type(error).__name__)
                retryable = retryable_exception(error)
            else:
                latency = self._clock() - sent - held(wire)
                queue_wait += held(wire)
                status = response.status_code
                request_id = request_id_of(response)
                retry_after = response.headers.get("retry-after")
                if status == 200:
                    try:
                        result = validate(_json(response), body)
                    except MalformedResponseError as problem:
                        message = surface(f"malformed response: {problem}")
                        attempts.append(
                            AttemptRecord(status, request_id, latency, message, queue_wait_s=queue_wait)
                        )
                        self._log(endpoint, attempts)
                        raise failure(status, message, request_id, retryable=False) from None
                    attempts.append(AttemptRecord(status, request_id, latency, queue_wait_s=queue_wait))
                    self._log(endpoint, attempts)
                    return replace(result, record=record(result.sanitized, **_usage(result)))
                message = surface(error_message(response))
                retryable = retryable_status(status)

            wait = None
            if retryable:  # computed even after the last attempt: a task may back off by it
                wait = self.policy.wait_s(len(attempts), retry_after, self._wall_clock(), self._random())
            attempts.append(AttemptRecord(status, request_id, latency, message, wait, queue_wait))
            self._log(endpoint, attempts)
            if status == 429 and wait is not None and self._on_throttled is not None:
                self._on_throttled(endpoint, wait)
            if wait is None or not self.policy.can_retry(len(attempts)):
                raise failure(status, message, request_id, retryable)
            self._sleep(wait)

    def _post(
        self, endpoint: str, content: bytes, timeout: TimeoutArg | None, trace: Callable[..., None] | None
    ) -> httpx.Response:
        """One POST, built and handed to the endpoint's transport directly, its body read and closed.

        Why not `httpx.Client.post`: per request it merges URL, headers, cookies and query again, runs the
        auth and redirect generators, extracts cookies into a jar and wraps the stream to time it. This
        client needs none of that — a fixed URL, a bearer header set once, no redirects followed
        (`follow_redirects=False`), no cookies kept (an API key, not a session, authenticates us) — and that
        machinery was about 140 µs of CPU a request on the 2-core CI machine (a loopback loop: 490–533 µs
        a request through `Client.post`, 354–393 µs here). The transport raises the same httpx exceptions.
        """
        if self._http.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")  # as httpx says it
        extensions: dict[str, object] = {
            "timeout": self._timeouts if timeout is None else httpx.Timeout(timeout).as_dict()
        }
        if trace is not None:
            extensions["trace"] = trace
        request = httpx.Request(
            "POST", self._urls[endpoint], headers=self._headers, content=content, extensions=extensions
        )
        response = self._transport(endpoint).handle_request(request)
        response.request = request
        try:
            response.read()
        finally:
            response.close()
        return response

    def _surface(self, text: str) -> tuple[str, bool]:
        """Everything we show passes through here: storable, one line, no key.

        Cleaning comes before redaction, so a key an upstream echoes back with a NUL inside it is
        whole again when `redact` looks for it. The flag says whether cleaning changed the line
        (control characters or lone surrogates; whitespace is collapsed by `one_line` anyway).
        """
        plain = one_line(redact(text, self._key))
        message = clean(one_line(redact(storable_chars(text, multiline=False), self._key)), ERROR)
        return message, message != plain

    def _log(self, endpoint: str, attempts: list[AttemptRecord]) -> None:
        last = attempts[-1]
        logger.debug(
            "%s attempt %d/%d: status=%s request_id=%s latency=%.3fs%s",
            endpoint,
            len(attempts),
            self.policy.max_attempts,
            last.status if last.status is not None else "none",
            last.request_id or "-",
            last.latency_s,
            f" error={last.error}" if last.error else "",
        )


def _alive(thread: threading.Thread | None) -> bool:
    return thread is not None and thread.is_alive()


def held(wire: _Wire | None) -> float:
    """Seconds an attempt waited in the wire gate (0 without one)."""
    return 0.0 if wire is None else wire.held_s


def _json(response: httpx.Response) -> object:
    try:
        return response.json()
    except UnicodeDecodeError:
        # Invalid UTF-8 inside a JSON string: each bad byte becomes a lone surrogate, which the
        # validators' cleaning turns into U+FFFD and names in `sanitized`.
        try:
            return json.loads(response.content.decode("utf-8", "surrogateescape"))
        except ValueError:
            raise MalformedResponseError("body is not JSON") from None
    except ValueError:
        raise MalformedResponseError("body is not JSON") from None


class _Usage(TypedDict, total=False):
    """What the call record keeps from a validated answer (CallRecord's fields of the same names)."""

    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    search_results: int


def _usage(result: Decision | AgentAnswer | SearchResponse) -> _Usage:
    """What the call record keeps from a validated answer."""
    if isinstance(result, SearchResponse):
        return {"search_results": len(result.results)}
    found = result.search_results if isinstance(result, Decision) else result.results
    return {
        "model": result.model,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "search_results": len(found),
    }
