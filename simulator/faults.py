"""Fault injection and the latency model.

Each request draws, in arrival order, from two `random.Random` streams seeded from `SimConfig.seed` (one
for faults, one for latency, so changing the latency model does not move the fault sequence), each guarded
by a lock: the same seed and the same request order give the same faults and delays.

A fault fires with probability `fault_rate`; its kind is drawn uniformly from `SimConfig.faults`:

| kind              | symptom                                                                            |
|-------------------|------------------------------------------------------------------------------------|
| `429`             | 429 JSON error with `Retry-After` (as if rate limited)                             |
| `500` `502` `503` | that status with a JSON error body and `x-request-id`                              |
| `504_html`        | after `html_504_delay_s`, a 504 HTML gateway page, no `x-request-id`               |
| `malformed_json`  | 200, `application/json`, a body that is not JSON                                   |
| `truncated_json`  | 200, `application/json`, the first half of the real body                           |
| `bad_probability` | 200; Decisions: the first answer's probability becomes 1.7; Search and Agent have  |
|                   | no probabilities, so their first result loses its `url` (the other shape error)    |
| `slow`            | the real answer after `slow_s` seconds (longer than a client timeout)              |
| `drop`            | the connection closes without any response (the client sees a transport error)    |

Hostile kinds: answers that parse and pass the shape checks but carry text Postgres cannot store as it
is. They are for drills of the client's cleaning (`clients.sanitize`) and are not in the default `faults`:

| kind              | symptom                                                                            |
|-------------------|------------------------------------------------------------------------------------|
| `model_long`      | 200 whose `model` is 100,000 characters (Search has no model: its `id` is)         |
| `model_nul`       | 200 whose `model` holds a `\u0000` (Search: its `id` does)                         |
| `error_nul`       | 400 `invalid_request_error` whose `error.message` holds a `\u0000` (not retryable) |
| `result_nul`      | 200 whose search results' `title` and `snippet` hold a `\u0000`: grounded          |
|                   | Decisions `search_results`, Agent results, Search results (ungrounded: unchanged)  |
| `request_id_long` | the real 200 answer with an `x-request-id` of 6,000 characters                     |
| `surrogate`       | 200 in ASCII JSON whose text fields hold the lone surrogate escape `\ud800`:       |
|                   | `model` (Search: `id`), results' `title` and `snippet`, the Agent message text     |

Latency grows with the questions of a Decisions request: with a latency model (`latency_s` > 0), each
question beyond the first adds `latency_per_question_s` to the draw (integrators measured about 65 ms a
question on the real API: 128 questions took 8.9 s). Tests that run at `latency_s` 0 stay instant.

Test-only request headers, honoured when `allow_test_headers` (see `TEST_HEADERS`):
`X-Sim-Fault: <kind>|none` forces (or suppresses) a fault for that request without drawing;
`X-Sim-Latency: <seconds>` replaces the latency draw, its per-question part included;
`X-Sim-Retry-After: <value>` is sent verbatim as the `Retry-After` of that request's 429 (to exercise
HTTP-date or fractional values).
"""

from __future__ import annotations

import json
import math
import random
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from simulator.config import SimConfig
from simulator.wire import dumps, error_body

HOSTILE_FAULTS = ("model_long", "model_nul", "error_nul", "result_nul", "request_id_long", "surrogate")
# Hostile kinds `hostile` applies to a body (error_nul replaces the answer; request_id_long is a header).
HOSTILE_BODY_FAULTS = frozenset({"model_long", "model_nul", "result_nul", "surrogate"})
FAULT_KINDS = (
    "429",
    "500",
    "502",
    "503",
    "504_html",
    "malformed_json",
    "truncated_json",
    "bad_probability",
    "slow",
    "drop",
    *HOSTILE_FAULTS,
)
# Answered instead of the request (nothing reaches the engine).
REPLACING_FAULTS = frozenset({"429", "500", "502", "503", "504_html", "drop", "error_nul"})
# Applied to a successful answer's body.
BODY_FAULTS = frozenset({"malformed_json", "truncated_json", "bad_probability"}) | HOSTILE_BODY_FAULTS
LATENCY_MODELS = ("fixed", "normal", "lognormal")
BAD_PROBABILITY = 1.7
LONG_MODEL_CHARS = 100_000
LONG_REQUEST_ID_CHARS = 6_000
NUL = "\u0000"
LONE_SURROGATE = "\ud800"
# The body field a Decisions, Agent or Search request sends its text in (named as `param` of `error_nul`).
TEXT_PARAM = {"decisions": "state", "agent": "input", "search": "query"}

FAULT_HEADER = "X-Sim-Fault"
LATENCY_HEADER = "X-Sim-Latency"
RETRY_AFTER_HEADER = "X-Sim-Retry-After"
TEST_HEADERS = (FAULT_HEADER, LATENCY_HEADER, RETRY_AFTER_HEADER)
NO_FAULT = "none"


class TestHeaderError(ValueError):
    """A test-only header with a value the simulator cannot honour (answered as a 400)."""

    def __init__(self, header: str, message: str) -> None:
        super().__init__(message)
        self.header = header


@dataclass(frozen=True)
class LatencyModel:
    """Per-request delay: `fixed` (always the mean), `normal` (clipped at 0) or `lognormal`.

    For `lognormal`, `mean_s` and `sd_s` are the mean and standard deviation of the delay itself, not of
    its logarithm, so switching models keeps the average load the same.
    """

    kind: str = "fixed"
    mean_s: float = 0.0
    sd_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in LATENCY_MODELS:
            raise ValueError(f"latency model must be one of {', '.join(LATENCY_MODELS)}, not {self.kind!r}")
        if self.mean_s < 0 or self.sd_s < 0 or not math.isfinite(self.mean_s + self.sd_s):
            raise ValueError("latency mean and sd must be finite and >= 0")

    def sample(self, rng: random.Random) -> float:
        if self.mean_s == 0 or self.kind == "fixed" or self.sd_s == 0:
            return self.mean_s
        if self.kind == "normal":
            return max(0.0, rng.normalvariate(self.mean_s, self.sd_s))
        sigma2 = math.log1p((self.sd_s / self.mean_s) ** 2)
        return rng.lognormvariate(math.log(self.mean_s) - sigma2 / 2, math.sqrt(sigma2))


@dataclass(frozen=True)
class Draw:
    """What one request suffers: a fault kind (or None) and a delay before it is handled."""

    fault: str | None
    latency_s: float
    retry_after: str = "1"


class FaultInjector:
    """Draws faults and delays from seeded, lock-guarded random streams."""

    def __init__(self, config: SimConfig) -> None:
        unknown = sorted(set(config.faults) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)}")
        if not 0.0 <= config.fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be within [0, 1], not {config.fault_rate}")
        if config.slow_s < 0 or config.html_504_delay_s < 0:
            raise ValueError("slow_s and html_504_delay_s must be >= 0")
        if not (math.isfinite(config.latency_per_question_s) and config.latency_per_question_s >= 0):
            raise ValueError("latency_per_question_s must be finite and >= 0")
        self.fault_rate = config.fault_rate
        self.kinds = tuple(config.faults)
        self.latency = LatencyModel(config.latency, config.latency_s, config.latency_sd)
        self.per_question_s = config.latency_per_question_s if config.latency_s > 0 else 0.0
        self.slow_s = config.slow_s
        self.html_504_delay_s = config.html_504_delay_s
        self.honour_headers = config.allow_test_headers
        # Reproducible simulation, not security: a seeded PRNG is the point.
        self._fault_rng = random.Random(config.seed)  # noqa: S311
        self._latency_rng = random.Random(config.seed + 1)  # noqa: S311
        self._fault_lock = threading.Lock()
        self._latency_lock = threading.Lock()

    def draw(self, headers: Mapping[str, str] | None = None, *, questions: int = 1) -> Draw:
        """One request's fate; `questions` is how many a Decisions request asks (1 for other endpoints).
        Raises TestHeaderError for an unusable test header."""
        forced_fault, forced_latency, retry_after = self._read_headers(headers or {})
        if forced_fault is None:
            fault = self._draw_fault()
        else:
            fault = None if forced_fault == NO_FAULT else forced_fault
        if forced_latency is None:
            latency = self._draw_latency() + self.per_question_s * max(0, questions - 1)
        else:
            latency = forced_latency
        return Draw(fault=fault, latency_s=latency, retry_after=retry_after)

    def _draw_fault(self) -> str | None:
        if self.fault_rate <= 0 or not self.kinds:
            return None
        with self._fault_lock:
            if self._fault_rng.random() >= self.fault_rate:
                return None
            return self._fault_rng.choice(self.kinds)

    def _draw_latency(self) -> float:
        if self.latency.mean_s == 0:
            return 0.0
        with self._latency_lock:
            return self.latency.sample(self._latency_rng)

    def _read_headers(self, headers: Mapping[str, str]) -> tuple[str | None, float | None, str]:
        if not self.honour_headers:
            return None, None, "1"
        fault = headers.get(FAULT_HEADER)
        if fault is not None:
            fault = fault.strip().lower()
            if fault not in FAULT_KINDS and fault != NO_FAULT:
                raise TestHeaderError(
                    FAULT_HEADER, f"{FAULT_HEADER} must be one of {', '.join(FAULT_KINDS)} or {NO_FAULT}"
                )
        latency: float | None = None
        raw_latency = headers.get(LATENCY_HEADER)
        if raw_latency is not None:
            try:
                latency = float(raw_latency)
            except ValueError:
                latency = -1.0
            if not (math.isfinite(latency) and latency >= 0):
                raise TestHeaderError(LATENCY_HEADER, f"{LATENCY_HEADER} must be a number of seconds >= 0")
        retry_after = headers.get(RETRY_AFTER_HEADER, "1")
        return fault, latency, retry_after


def break_shape(endpoint: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The `bad_probability` fault: a 200 body that parses but must fail the client's shape checks."""
    if endpoint == "decisions":
        for answer in payload.get("answers", {}).values():
            if answer.get("type") == "noul":
                answer["noul"] = BAD_PROBABILITY
            else:
                probabilities = answer.setdefault("probabilities", {})
                probabilities[next(iter(probabilities), "0")] = BAD_PROBABILITY
            break
        return payload
    results = _results_of(endpoint, payload)
    if results:
        results[0].pop("url", None)
    else:
        results.append({"title": "untitled", "snippet": ""})
        if endpoint != "search":
            results[0]["id"] = 1
    return payload


def _results_of(endpoint: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    if endpoint == "search":
        results: list[dict[str, Any]] = payload.setdefault("results", [])
        return results
    for item in payload.get("output", []):
        if item.get("type") == "search_results":
            found: list[dict[str, Any]] = item.setdefault("results", [])
            return found
    return []


def malformed(body: bytes) -> bytes:
    """The `malformed_json` fault: a plausible server bug (a stray trailing comma), never valid JSON."""
    stripped = body.rstrip()
    if stripped.endswith((b"}", b"]")):
        return stripped[:-1] + b"," + stripped[-1:]
    return b"{" + stripped


def truncated(body: bytes) -> bytes:
    """The `truncated_json` fault: the first half of the body, as if the connection stopped mid-answer."""
    return body[: max(1, len(body) // 2)]


def hostile(endpoint: str, payload: dict[str, Any], fault: str) -> bytes:
    """A body fault that keeps the shape valid but carries text Postgres refuses (see the table above).

    `surrogate` is serialised as ASCII JSON, the only way a lone surrogate can travel: as the escape
    `\\ud800` (a UTF-8 body cannot hold one). The others keep the gateway's byte layout.
    """
    if fault == "model_long":
        _set_model(endpoint, payload, lambda model: _pad(model, LONG_MODEL_CHARS))
    elif fault == "model_nul":
        _set_model(endpoint, payload, _with(NUL))
    elif fault == "result_nul":
        for result in _every_result(endpoint, payload):
            for name in ("title", "snippet"):
                result[name] = _with(NUL)(str(result.get(name) or name))
    elif fault == "surrogate":
        mark = _with(LONE_SURROGATE)
        _set_model(endpoint, payload, mark)
        for result in _every_result(endpoint, payload):
            for name in ("title", "snippet"):
                result[name] = mark(str(result.get(name) or name))
        for part in _message_parts(endpoint, payload):
            part["text"] = mark(str(part.get("text", "")))
        return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    else:
        raise ValueError(f"{fault!r} is not a hostile body fault")
    return dumps(payload)


def nul_error(endpoint: str) -> bytes:
    """The `error_nul` fault's 400 body: a request error whose message quotes a NUL back."""
    param = TEXT_PARAM.get(endpoint, "input")
    message = f"{param} contains an unsupported character at position 7: '{NUL}'"
    return error_body(message, "invalid_request_error", param=param)


def long_request_id() -> str:
    """The `request_id_long` fault's header: a plausible id, repeated to 6,000 characters."""
    return _pad(f"req-{uuid.uuid4().hex}", LONG_REQUEST_ID_CHARS)


def _pad(text: str, length: int) -> str:
    return (text * (length // max(1, len(text)) + 1))[:length]


def _with(char: str) -> Callable[[str], str]:
    """Insert `char` in the middle of a text, where a simple strip of the ends would not find it."""
    return lambda text: f"{text[: len(text) // 2]}{char}{text[len(text) // 2 :]}"


def _set_model(endpoint: str, payload: dict[str, Any], change: Callable[[str], str]) -> None:
    field = "id" if endpoint == "search" else "model"
    payload[field] = change(str(payload.get(field) or field))


def _every_result(endpoint: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    if endpoint == "decisions":
        found: list[dict[str, Any]] = payload.get("search_results") or []
        return found
    if endpoint == "search":
        return _results_of(endpoint, payload)
    return [
        r
        for item in payload.get("output", [])
        if item.get("type") == "search_results"
        for r in item["results"]
    ]


def _message_parts(endpoint: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    if endpoint != "agent":
        return []
    return [
        part
        for item in payload.get("output", [])
        if item.get("type") == "message"
        for part in item.get("content", [])
        if part.get("type") == "output_text"
    ]
