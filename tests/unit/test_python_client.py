"""`factgate.Client` over httpx's MockTransport: idempotent submissions sent again on a 503, refusals with
the server's problems, typed result lines, a cut-short stream, waiting with a progress callback."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from factgate import CitationsResult, Client, FactgateError, Job, RejectedError

JOB = {"id": "j1", "kind": "citations", "status": "running", "request_counts": {"total": 2, "completed": 1}}
LINE = {"custom_id": "a", "status": "done", "outcome": "done", "metrics": {"supported_share": 0.5}}


def _client(handler: Any) -> Client:
    return Client("http://fg.test", "tok", transport=httpx.MockTransport(handler), sleep=lambda _s: None)


def test_a_submission_carries_one_idempotency_key_through_its_retries() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) < 3:
            return httpx.Response(
                503, headers={"Retry-After": "1"}, json={"error": {"message": "db restarting"}}
            )
        return httpx.Response(202, json=JOB)

    with _client(handler) as fg:
        assert fg.submit("citations", [{"user_input": "q"}], input_format="ragas", budget_usd=None) == "j1"
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(seen) == 3 and len(keys) == 1 and next(iter(keys)).startswith("factgate-python-")
    body = json.loads(seen[0].content)
    assert body == {"kind": "citations", "options": {"input_format": "ragas"}, "items": [{"user_input": "q"}]}
    assert seen[0].headers["Authorization"] == "Bearer tok"


def test_a_refused_submission_names_its_problems() -> None:
    error = {"message": "1 problem in the batch", "errors": [{"index": 0, "field": "items[0].response"}]}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": error})

    with _client(handler) as fg, pytest.raises(RejectedError) as info:
        fg.submit("citations", [{}], idempotency_key="k")
    assert info.value.status == 400 and info.value.errors == error["errors"]


def test_results_are_the_kinds_contract_and_a_stream_without_its_trailer_is_an_error() -> None:
    trailer = {"_end": {"count": 1, "after": None, "last_id": "a"}}
    bodies = [[LINE, trailer], [LINE]]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/results"):
            lines = bodies.pop(0)
            return httpx.Response(200, content="".join(json.dumps(x) + "\n" for x in lines))
        return httpx.Response(200, json=JOB)

    with _client(handler) as fg:
        (line,) = list(fg.results("j1"))
        assert isinstance(line, CitationsResult) and line.metrics and line.metrics.supported_share == 0.5
        with pytest.raises(FactgateError, match="ended early"):
            list(fg.results("j1"))


def test_wait_polls_until_the_job_ends_and_reports_each_poll() -> None:
    states = ["running", "finalizing", "completed"]

    def handler(request: httpx.Request) -> httpx.Response:
        status = states.pop(0) if len(states) > 1 else states[0]
        return httpx.Response(
            200, json={**JOB, "status": status, "summary": {"metrics": {"citation_recall": 0.4}}}
        )

    seen: list[Job] = []
    with _client(handler) as fg:
        job = fg.wait("j1", progress=seen.append, poll_s=0)
    assert [j.status for j in seen] == ["running", "finalizing", "completed"] and job.ended
    assert job.misses(under={"citation_recall": 0.5}) == [
        "citation_recall 0.4 is under 0.5 (--fail-under citation_recall=0.5)"
    ]
    with pytest.raises(ValueError, match="unknown metric"):
        job.misses(over={"nope": 1})
