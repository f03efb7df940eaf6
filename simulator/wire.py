"""Request validation and error bodies, matching the real APIs' wire behaviour (docs/spec.md §1).

Decisions and Agent errors are `{"error": {"code", "message", "param", "type"}}`, serialised with sorted
keys and no spaces, byte-for-byte like the gateway's (the seed recorded the `mode` error exactly). Search
validation errors are FastAPI-style 422 `{"detail": [...]}` items.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

MODELS = frozenset(
    {
        "pplx-decider-v1.1-27b",
        "pplx-decider-latest",
        "pplx-decider-v1.2",
        "pplx-decider-flash-latest",
        "pplx-decider-flash-v1.2",
    }
)
MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_QUESTIONS = 128
MAX_CHOICE_OPTIONS = 255
MAX_SCORE_LEVELS = 10
MAX_INPUT_TOKENS = 262_144
BYTES_PER_TOKEN = 4
GROUNDING_MODE = "web_grounding"
MODE_ERROR = 'mode must be "web_grounding" when provided'
DECISIONS_FIELDS = frozenset({"model", "state", "questions", "mode"})
QUESTION_FIELDS = frozenset({"type", "instructions", "criteria"})
NOUL_CRITERIA = frozenset({"true", "false"})
# Every field the perplexityai SDK's Responses request can carry; anything else is a caller's typo.
AGENT_FIELDS = frozenset(
    {
        "background",
        "effort",
        "input",
        "instructions",
        "language_preference",
        "max_output_tokens",
        "max_steps",
        "model",
        "models",
        "preset",
        "previous_response_id",
        "profile",
        "prompt_cache_key",
        "reasoning",
        "response_format",
        "service_tier",
        "skills",
        "step_budget_reminder",
        "store",
        "stream",
        "temperature",
        "tool_choice",
        "tools",
        "top_p",
    }
)
SEARCH_MAX_RESULTS = 20
SEARCH_DEFAULT_RESULTS = 10
SEARCH_RECENCY = frozenset({"hour", "day", "week", "month", "year"})


def dumps(payload: object) -> bytes:
    """Compact JSON with sorted keys, the gateway's byte layout."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def error_body(message: str, error_type: str, *, param: str | None = None, code: str | None = None) -> bytes:
    return dumps({"error": {"code": code, "message": message, "param": param, "type": error_type}})


class WireError(Exception):
    """A request the API refuses with a JSON error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code

    def body(self) -> bytes:
        return error_body(self.message, self.error_type, param=self.param, code=self.code)


class SearchValidationError(Exception):
    """A Search API request refused with 422 and FastAPI-style `detail` items."""

    def __init__(self, detail: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(detail)} validation error(s)")
        self.detail = detail

    def body(self) -> bytes:
        return dumps({"detail": self.detail})


def _bad(message: str, param: str | None) -> NoReturn:
    raise WireError(400, message, param=param)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"invalid JSON value {name}")


def parse_json(raw: bytes) -> object:
    """Strict JSON (no NaN/Infinity, which the real gateway rejects). Raises ValueError."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except RecursionError as error:
        raise ValueError("JSON nested too deeply") from error


def _is_text_like(value: object) -> bool:
    """Instructions and criteria texts may be a string, a JSON object or an array (the SDK's union)."""
    return isinstance(value, str | dict | list)


# ---------------------------------------------------------------------------------------------- Decisions


def validate_decisions(raw: bytes) -> dict[str, Any]:
    """Return the parsed body of a valid Decisions request, or raise WireError (400)."""
    try:
        body = parse_json(raw)
    except ValueError as error:
        _bad(f"invalid JSON body: {error}", None)
    if not isinstance(body, dict):
        _bad("request body must be a JSON object", None)
    for field in body:
        if field not in DECISIONS_FIELDS:
            _bad(f'unknown field "{field}"', field)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        _bad("model is required", "model")
    if model not in MODELS:
        _bad(f'unknown model "{model}"; valid models: {", ".join(sorted(MODELS))}', "model")
    if "mode" in body and body["mode"] is not None and body["mode"] != GROUNDING_MODE:
        _bad(MODE_ERROR, "mode")
    if "state" not in body or body["state"] is None:
        _bad("state is required", "state")
    if not _is_text_like(body["state"]):
        _bad("state must be a string, a JSON object or an array", "state")
    questions = body.get("questions")
    if not isinstance(questions, dict) or not questions:
        _bad("questions must be an object with 1 to 128 questions", "questions")
    if len(questions) > MAX_QUESTIONS:
        _bad(f"too many questions: {len(questions)} (at most {MAX_QUESTIONS})", "questions")
    for name, question in questions.items():
        _validate_question(name, question)
    if len(raw) >= MAX_INPUT_TOKENS * BYTES_PER_TOKEN:
        tokens = estimate_tokens(body)
        if tokens >= MAX_INPUT_TOKENS:
            _bad(f"input is too long: about {tokens} tokens (limit {MAX_INPUT_TOKENS})", "state")
    return body


def estimate_tokens(body: dict[str, Any]) -> int:
    """About one token per 4 bytes of the state and questions, as the gateway bills."""
    size = len(dumps(body.get("state"))) + len(dumps(body.get("questions")))
    return size // BYTES_PER_TOKEN


def _validate_question(name: str, question: object) -> None:
    param = f"questions.{name}"
    if not name.strip():
        _bad("question names must be non-empty", "questions")
    if not isinstance(question, dict):
        _bad(f"question {name!r} must be an object", param)
    for field in question:
        if field not in QUESTION_FIELDS:
            _bad(f'unknown field "{field}" in question {name!r}', f"{param}.{field}")
    kind = question.get("type")
    instructions = question.get("instructions")
    if instructions is not None and not _is_text_like(instructions):
        _bad(f"question {name!r}: instructions must be a string, object or array", f"{param}.instructions")
    criteria = question.get("criteria")
    if kind == "noul":
        _validate_noul(name, param, instructions, criteria)
    elif kind == "choice":
        _validate_choice(name, param, criteria)
    elif kind == "score":
        _validate_score(name, param, criteria)
    else:
        _bad(f"question {name!r}: type must be one of noul, choice, score", f"{param}.type")


def _validate_noul(name: str, param: str, instructions: object, criteria: object) -> None:
    if criteria is not None:
        if not isinstance(criteria, dict):
            _bad(f"question {name!r}: noul criteria must be an object with true/false", f"{param}.criteria")
        extra = sorted(set(criteria) - NOUL_CRITERIA)
        if extra:
            _bad(f"question {name!r}: noul criteria take only true and false, not {extra}", param)
        for value in criteria.values():
            if value is not None and not _is_text_like(value):
                _bad(f"question {name!r}: criteria must be strings, objects or arrays", f"{param}.criteria")
    if instructions in (None, "") and not criteria:
        _bad(f"question {name!r}: a noul question needs instructions or criteria", param)


def _validate_choice(name: str, param: str, criteria: object) -> None:
    if not isinstance(criteria, dict) or not criteria:
        _bad(f"question {name!r}: choice criteria must map 1 to 255 options to texts", f"{param}.criteria")
    if len(criteria) > MAX_CHOICE_OPTIONS:
        _bad(
            f"question {name!r}: too many choice options: {len(criteria)} (at most {MAX_CHOICE_OPTIONS})",
            f"{param}.criteria",
        )
    for key, value in criteria.items():
        if not key:
            _bad(f"question {name!r}: choice option keys must be non-empty", f"{param}.criteria")
        if value is not None and not _is_text_like(value):
            _bad(f"question {name!r}: option {key!r} must be a string, object or array", f"{param}.criteria")


def _validate_score(name: str, param: str, criteria: object) -> None:
    if not isinstance(criteria, list) or not criteria:
        _bad(f"question {name!r}: score criteria must be a list of 1 to 10 levels", f"{param}.criteria")
    if len(criteria) > MAX_SCORE_LEVELS:
        _bad(
            f"question {name!r}: too many score levels: {len(criteria)} (at most {MAX_SCORE_LEVELS})",
            f"{param}.criteria",
        )
    for level in criteria:
        if not _is_text_like(level):
            _bad(f"question {name!r}: score levels must be strings, objects or arrays", f"{param}.criteria")


# -------------------------------------------------------------------------------------------------- Agent


def validate_agent(raw: bytes) -> dict[str, Any]:
    """Return the parsed body of a valid Agent (Responses) request, or raise WireError (400)."""
    try:
        body = parse_json(raw)
    except ValueError as error:
        _bad(f"invalid JSON body: {error}", None)
    if not isinstance(body, dict):
        _bad("request body must be a JSON object", None)
    for field in body:
        if field not in AGENT_FIELDS:
            _bad(f'unknown field "{field}"', field)
    agent_input = body.get("input")
    if isinstance(agent_input, str):
        if not agent_input.strip():
            _bad("input must not be empty", "input")
    elif isinstance(agent_input, list):
        if not agent_input or not all(isinstance(item, dict) for item in agent_input):
            _bad("input must be a non-empty list of input items", "input")
    else:
        _bad("input is required (a string or a list of input items)", "input")
    for field in ("instructions", "preset", "model", "effort"):
        if body.get(field) is not None and not isinstance(body[field], str):
            _bad(f"{field} must be a string", field)
    if body.get("stream") is True:
        _bad("streaming is not supported by the simulator", "stream")
    tools = body.get("tools")
    tools_ok = tools is None or (
        isinstance(tools, list)
        and all(isinstance(tool, dict) and isinstance(tool.get("type"), str) for tool in tools)
    )
    if not tools_ok:
        _bad('tools must be a list of objects with a "type"', "tools")
    return body


# ------------------------------------------------------------------------------------------------- Search


def _detail(kind: str, field: str | int, message: str, value: object, **ctx: object) -> dict[str, Any]:
    item: dict[str, Any] = {"type": kind, "loc": ["body", field], "msg": message, "input": value}
    if ctx:
        item["ctx"] = ctx
    return item


def _positive_int_detail(body: dict[str, Any], field: str, upper: int | None = None) -> dict[str, Any] | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return _detail("int_type", field, "Input should be a valid integer", value)
    if value < 1:
        return _detail("greater_than_equal", field, "Input should be greater than or equal to 1", value, ge=1)
    if upper is not None and value > upper:
        return _detail(
            "less_than_equal", field, f"Input should be less than or equal to {upper}", value, le=upper
        )
    return None


def _string_list_detail(body: dict[str, Any], field: str) -> dict[str, Any] | None:
    value = body.get(field)
    if value is None or (isinstance(value, list) and all(isinstance(item, str) for item in value)):
        return None
    return _detail("list_type", field, "Input should be a valid list of strings", value)


def validate_search(raw: bytes) -> dict[str, Any]:
    """Return the parsed body of a valid Search request, or raise SearchValidationError (422)."""
    try:
        body = parse_json(raw)
    except ValueError as error:
        raise SearchValidationError(
            [_detail("json_invalid", 0, "JSON decode error", {}, error=str(error))]
        ) from None
    if not isinstance(body, dict):
        not_object: dict[str, Any] = {"type": "model_attributes_type", "loc": ["body"]}
        raise SearchValidationError([{**not_object, "msg": "Input should be an object", "input": body}])
    detail: list[dict[str, Any]] = []
    query = body.get("query")
    if "query" not in body:
        detail.append(_detail("missing", "query", "Field required", None))
    elif isinstance(query, str):
        if not query.strip():
            detail.append(_detail("string_too_short", "query", "Query must not be empty", query))
    elif not (isinstance(query, list) and query and all(isinstance(q, str) and q.strip() for q in query)):
        detail.append(_detail("string_type", "query", "Input should be a string or a list of strings", query))
    for field_problem in (
        _positive_int_detail(body, "max_results", SEARCH_MAX_RESULTS),
        _positive_int_detail(body, "max_tokens_per_page"),
        _positive_int_detail(body, "max_tokens"),
        _string_list_detail(body, "search_domain_filter"),
        _string_list_detail(body, "search_language_filter"),
    ):
        if field_problem is not None:
            detail.append(field_problem)
    recency = body.get("search_recency_filter")
    if recency is not None and recency not in SEARCH_RECENCY:
        detail.append(
            _detail(
                "literal_error",
                "search_recency_filter",
                "Input should be 'hour', 'day', 'week', 'month' or 'year'",
                recency,
            )
        )
    if detail:
        raise SearchValidationError(detail)
    return body
