"""Strict checks of 200 bodies: a body that is not the expected shape is an error, named.

A Decisions answer with a probability of 1.5, a `choice` outside the options sent, or a
missing question would otherwise flow into verdicts and scorecards as if it were real. Each
validator takes the request body too, so it knows which questions and options were asked,
and raises `MalformedResponseError` with the path of the first bad value.

Every string kept from a body passes `clients.sanitize` here, the moment it is read: one
`Sanitizer` per body collects the paths it changed into the result's `sanitized`. Checks that
need text (a URL must not be blank) look at the cleaned value, since that is what is kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from clients import sanitize
from clients.results import AgentAnswer, Answer, Decision, SearchResponse, SearchResult
from clients.sanitize import Sanitizer

QUESTION_TYPES = ("noul", "choice", "score")
MAX_TOKEN_COUNT = 2**31 - 1


class MalformedResponseError(ValueError):
    """A 200 whose body is not the documented shape. The message names what is wrong."""


def _fail(message: str) -> MalformedResponseError:
    return MalformedResponseError(message)


def _type_name(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)


def _key(path: str, name: str) -> str:
    return f"{path}.{name}" if name.isidentifier() else f"{path}[{name!r}]"


def is_number(value: object) -> TypeGuard[int | float]:
    """A finite JSON number. Booleans are not numbers, whatever Python's `bool <: int` says."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _probability(value: object, path: str) -> float:
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(f"{path} is {value!r}, not a finite number")
    if not is_number(value):
        raise _fail(f"{path} is {_type_name(value)} ({value!r}), not a probability")
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise _fail(f"{path} is {value!r}, outside [0, 1]")
    return number


def _token_count(usage: Mapping[str, Any], name: str) -> int:
    value = usage.get(name)
    path = f"usage.{name}"
    if value is None:
        raise _fail(f"{path} is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"{path} is {value!r}, not an integer")
    if value < 0:
        raise _fail(f"{path} is {value}, negative")
    if value > MAX_TOKEN_COUNT:
        # Stored in 32-bit integer columns; no real request comes near (the input limit is 262,144).
        raise _fail(f"{path} is {value}, more than any request can use")
    return value


def _object(data: object, path: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise _fail(f"{path} is {_type_name(data)}, not an object")
    return data


def _search_result(
    item: object, path: str, clean: Sanitizer, kept_as: str, *, needs_id: bool = False
) -> SearchResult:
    """One result read at body `path`; `kept_as` is its path in the returned object (for `sanitized`)."""
    result = _object(item, path)

    def text(name: str, field: sanitize.TextField) -> str | None:
        value = result.get(name)
        if value is not None and not isinstance(value, str):
            raise _fail(f"{path}.{name} is {_type_name(value)}, not a string")
        return clean.optional(value, field, f"{kept_as}.{name}")

    url = result.get("url")
    if url is None:
        raise _fail(f"{path} has no url")
    if not isinstance(url, str) or not sanitize.clean(url, sanitize.URL).strip():
        raise _fail(f"{path}.url is {url!r}, not a non-empty string")
    result_id: int | None = None
    if needs_id:
        raw_id = result.get("id")
        if raw_id is None:
            raise _fail(f"{path} has no id")
        if isinstance(raw_id, bool) or not isinstance(raw_id, int):
            raise _fail(f"{path}.id is {raw_id!r}, not an integer")
        result_id = raw_id
    return SearchResult(
        url=clean.text(url, sanitize.URL, f"{kept_as}.url"),
        title=text("title", sanitize.TITLE) or "",
        snippet=text("snippet", sanitize.SNIPPET) or "",
        date=text("date", sanitize.DATE),
        last_updated=text("last_updated", sanitize.DATE),
        id=result_id,
    )


def _search_results(value: object, path: str, clean: Sanitizer) -> list[SearchResult]:
    """A top-level list of results: the body path is also the path in the returned object."""
    if not isinstance(value, list):
        raise _fail(f"{path} is {_type_name(value)}, not a list")
    return [_search_result(item, f"{path}[{i}]", clean, f"{path}[{i}]") for i, item in enumerate(value)]


def _model(data: Mapping[str, Any], clean: Sanitizer) -> str | None:
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise _fail(f"model is {_type_name(model)}, not a string")
    return clean.optional(model, sanitize.MODEL, "model")


# --- Decisions -------------------------------------------------------------------------------


def _probabilities(answer: Mapping[str, Any], path: str, allowed: list[str] | None) -> dict[str, float]:
    raw = answer.get("probabilities")
    if raw is None:
        raise _fail(f"{path}.probabilities is missing")
    table = _object(raw, f"{path}.probabilities")
    out: dict[str, float] = {}
    for key, value in table.items():
        where = _key(f"{path}.probabilities", key)
        if allowed is not None and key not in allowed:
            raise _fail(f"{where}: {key!r} is not among the options sent")
        out[key] = _probability(value, where)
    return out


def _confidence(answer: Mapping[str, Any], path: str) -> float:
    if "confidence" not in answer:
        raise _fail(f"{path}.confidence is missing")
    return _probability(answer["confidence"], f"{path}.confidence")


def _choice_answer(answer: Mapping[str, Any], question: Mapping[str, Any], path: str) -> Answer:
    criteria = question.get("criteria")
    options = [str(k) for k in criteria] if isinstance(criteria, Mapping) else None
    choice = answer.get("choice")
    if choice is None:
        raise _fail(f"{path}.choice is missing")
    if not isinstance(choice, str):
        raise _fail(f"{path}.choice is {_type_name(choice)}, not an option key")
    if options is not None and choice not in options:
        raise _fail(f"{path}.choice {choice!r} is not among the options sent")
    return Answer(
        type="choice",
        choice=choice,
        probabilities=_probabilities(answer, path, options),
        confidence=_confidence(answer, path),
    )


def _score_answer(
    answer: Mapping[str, Any], question: Mapping[str, Any], path: str, clean: Sanitizer
) -> Answer:
    criteria = question.get("criteria")
    levels = [str(i) for i in range(len(criteria))] if isinstance(criteria, list) and criteria else None
    score = answer.get("score")
    if score is None:
        raise _fail(f"{path}.score is missing")
    if not is_number(score):
        raise _fail(f"{path}.score is {_type_name(score)} ({score!r}), not a number")
    top = len(levels) - 1 if levels else math.inf
    if not 0 <= score <= top:
        raise _fail(f"{path}.score is {score!r}, outside the levels sent (0 to {top})")
    legend = answer.get("legend", {})
    return Answer(
        type="score",
        score=float(score),
        probabilities=_probabilities(answer, path, levels),
        confidence=_confidence(answer, path),
        legend=clean.json(dict(_object(legend, f"{path}.legend")), sanitize.LEGEND, f"{path}.legend"),
    )


def _answer(raw: object, question: Mapping[str, Any], path: str, clean: Sanitizer) -> Answer:
    answer = _object(raw, path)
    asked = question.get("type")
    stated = answer.get("type")
    if stated is not None and not isinstance(stated, str):
        raise _fail(f"{path}.type is {_type_name(stated)}, not a string")
    if isinstance(asked, str) and stated is not None and stated != asked:
        raise _fail(f"{path}.type is {stated!r}, but the question asked for {asked!r}")
    kind = asked if isinstance(asked, str) else stated
    if kind == "noul":
        if "noul" not in answer:
            raise _fail(f"{path}.noul is missing")
        return Answer(type="noul", noul=_probability(answer["noul"], f"{path}.noul"))
    if kind == "choice":
        return _choice_answer(answer, question, path)
    if kind == "score":
        return _score_answer(answer, question, path, clean)
    raise _fail(f"{path} has unknown type {kind!r} (expected one of {', '.join(QUESTION_TYPES)})")


def validate_partial_decision(data: object, request: Mapping[str, Any]) -> Decision:
    """`validate_decision` for a packed request: a question left unanswered is left out of the result
    (its item is asked again on its own), while every answer given is checked as strictly."""
    return validate_decision(data, request, partial=True)


def validate_decision(data: object, request: Mapping[str, Any], *, partial: bool = False) -> Decision:
    """Check a Decisions 200 body against the request that produced it.

    Every requested question must be answered in its type (unless `partial`); answers to questions not
    asked are ignored. A missing `search_results` counts as [] (the seed's client reads it that way).
    """
    body = _object(data, "body")
    clean = Sanitizer()
    model = _model(body, clean)
    if "answers" not in body:
        raise _fail("answers is missing")
    answers = _object(body["answers"], "answers")
    questions = request.get("questions")
    if isinstance(questions, Mapping):
        expected: Mapping[str, Any] = questions
    else:  # nothing to compare against: check what came back on its own terms
        expected = {name: {} for name in answers}
    parsed: dict[str, Answer] = {}
    for name, question in expected.items():
        path = _key("answers", name)
        if name not in answers:
            if partial:
                continue
            raise _fail(f"{path} is missing (the request asked for it)")
        parsed[name] = _answer(answers[name], question if isinstance(question, Mapping) else {}, path, clean)
    if "usage" not in body:
        raise _fail("usage is missing")
    usage = _object(body["usage"], "usage")
    input_tokens = _token_count(usage, "input_tokens")
    output_tokens = _token_count(usage, "output_tokens")
    raw_results = body.get("search_results")
    results = [] if raw_results is None else _search_results(raw_results, "search_results", clean)
    return Decision(
        answers=parsed,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        search_results=results,
        model=model,
        sanitized=clean.changed,
    )


# --- Agent -----------------------------------------------------------------------------------


def _message_text(item: Mapping[str, Any], path: str) -> str:
    content = item.get("content")
    if not isinstance(content, list):
        raise _fail(f"{path}.content is {_type_name(content)}, not a list")
    texts: list[str] = []
    for i, raw_part in enumerate(content):
        part = _object(raw_part, f"{path}.content[{i}]")
        if part.get("type") != "output_text":
            continue
        text = part.get("text")
        if not isinstance(text, str):
            raise _fail(f"{path}.content[{i}].text is {_type_name(text)}, not a string")
        if sanitize.storable_chars(text, multiline=True).strip():  # blank once cleaned: no text
            texts.append(text)
    return "\n\n".join(texts)


def _optional_usage(body: Mapping[str, Any]) -> tuple[int | None, int | None]:
    raw = body.get("usage")
    if raw is None:
        return None, None
    usage = _object(raw, "usage")
    counts = [
        _token_count(usage, name) if name in usage else None for name in ("input_tokens", "output_tokens")
    ]
    return counts[0], counts[1]


def validate_agent(data: object, request: Mapping[str, Any]) -> AgentAnswer:
    """Check an Agent 200 body: message text and at least one search result are required.

    The last message item with text is the answer (earlier ones are interim). Results from
    every `search_results` item are kept in order. `request` is accepted for symmetry with
    the other validators; the Agent response is checked on its own terms.
    """
    del request
    body = _object(data, "body")
    clean = Sanitizer()
    output = body.get("output")
    if not isinstance(output, list):
        raise _fail(f"output is {_type_name(output) if 'output' in body else 'missing'}, not a list")
    text = ""
    results: list[SearchResult] = []
    for i, raw_item in enumerate(output):
        item = _object(raw_item, f"output[{i}]")
        kind = item.get("type")
        if kind == "message":
            text = _message_text(item, f"output[{i}]") or text
        elif kind == "search_results":
            found = item.get("results")
            if not isinstance(found, list):
                raise _fail(f"output[{i}].results is {_type_name(found)}, not a list")
            for j, raw in enumerate(found):  # kept flat: `results[n]` counts across items
                where = f"output[{i}].results[{j}]"
                results.append(_search_result(raw, where, clean, f"results[{len(results)}]", needs_id=True))
    if not text:
        raise _fail("no message text: output has no message with output_text")
    text = clean.text(text, sanitize.ANSWER_TEXT, "text")
    if not results:
        raise _fail("no search results: the model answered without searching")
    input_tokens, output_tokens = _optional_usage(body)
    return AgentAnswer(
        text=text,
        results=results,
        model=_model(body, clean),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        sanitized=clean.changed,
    )


# --- Search ----------------------------------------------------------------------------------


def validate_search(data: object, request: Mapping[str, Any]) -> SearchResponse:
    """Check a Search 200 body: a `results` list whose every item has a URL. [] is valid."""
    del request
    body = _object(data, "body")
    if "results" not in body:
        raise _fail("results is missing")
    clean = Sanitizer()
    raw_id = body.get("id")
    response_id = clean.text(raw_id, sanitize.SEARCH_ID, "id") if isinstance(raw_id, str) else None
    results = _search_results(body["results"], "results", clean)
    return SearchResponse(results=results, id=response_id or None, sanitized=clean.changed)
