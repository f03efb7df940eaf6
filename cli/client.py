"""The CLI's client of factgate's HTTP API (/v1), over httpx.

The same client talks to a remote server (`--server URL`) and to the app running in this process
(embedded mode mounts the Flask app with `httpx.WSGITransport`), so `factgate check` exercises the
exact validation, intake and status code of the API either way. API errors become one-line
`CliError`s that name the line and field of a bad file.

A 503 is answered as clients/factgate_http.py says (shared with the Python client, factgate/): the client
waits as told and asks again for a while, so `factgate check --wait` or `factgate status` rides through a
restart instead of dying on its first poll; only requests safe to repeat are asked again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import httpx
from pydantic import JsonValue

from cli.errors import CliError, InputError
from clients.factgate_http import (
    NDJSON,
    SUBMIT_TIMEOUT,
    TIMEOUT,
    UNAVAILABLE_BUDGET_S,
    ErrorBody,
    JobBody,
    error_body,
    patiently,
)
from clients.tls import trust_store

__all__ = ["NDJSON", "UNAVAILABLE_BUDGET_S", "ApiClient"]


class ApiClient:
    """Thin wrapper: one method per endpoint the CLI uses; raises CliError/InputError."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.BaseTransport | None = None,
        source: str | None = None,
        unavailable_budget_s: float = UNAVAILABLE_BUDGET_S,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._unavailable_budget_s = unavailable_budget_s
        self._sleep = sleep
        #: what `--server` said (shown in errors); the in-process app is "the local factgate"
        self.where = source or self.base_url
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "factgate-cli"},
            timeout=TIMEOUT,
            transport=transport,
            verify=trust_store(),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- plumbing ----------------------------------------------------------------------------------

    def _patiently(self, call: Callable[[], httpx.Response]) -> httpx.Response:
        """`call()` again while it answers 503 (clients/factgate_http.py); the last answer is returned."""
        return patiently(call, budget_s=self._unavailable_budget_s, sleep=self._sleep)

    def _answer(self, call: Callable[[], httpx.Response], *, late: str, doing: str) -> httpx.Response:
        """`call()`'s response; a transport failure as a CliError (`late`: what did not come in time, after
        "did not answer"; `doing`: what failed, before "factgate at …")."""
        try:
            return call()
        except httpx.ConnectError as exc:
            raise CliError(f"cannot reach factgate at {self.where}: {_reason(exc)}") from None
        except httpx.TimeoutException:
            raise CliError(f"factgate at {self.where} did not answer {late}") from None
        except httpx.HTTPError as exc:
            raise CliError(f"{doing} factgate at {self.where} failed: {_reason(exc)}") from None

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        response = self._answer(
            lambda: self._patiently(lambda: self._http.request(method, path, **kw)),
            late=f"in time ({method} {path})",
            doing="talking to",
        )
        if response.status_code >= 400:
            self._raise(response, path)
        return response

    def _raise(
        self, response: httpx.Response, path: str, input_name: str | None = None, items_name: str = "items"
    ) -> None:
        status = response.status_code
        err = error_body(response)
        message = str(err.get("message") or response.reason_phrase or f"HTTP {status}")
        if status == 401:
            raise InputError(
                f"factgate at {self.where} rejected the token ({message}); pass --token or set "
                "FACTGATE_TOKEN (an admin creates one with `factgate tokens create TENANT`)"
            )
        if status == 404 and "/jobs/" in path:
            raise InputError(f"no such job at {self.where}: {message}")
        if status == 404:
            raise CliError(f"{self.where} does not look like a factgate server (404 on {path})")
        if status in (400, 413, 415):
            raise InputError(_input_message(err, message, input_name, items_name))
        if status == 409:
            raise CliError(message)
        raise CliError(f"factgate at {self.where} answered HTTP {status}: {message}")

    # --- endpoints ---------------------------------------------------------------------------------

    def health(self) -> dict[str, JsonValue]:
        """GET /healthz: liveness, with the mode and whether jobs are simulated (no dependency checked)."""
        try:
            response = self._http.get("/healthz")
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach factgate at {self.where}: {_reason(exc)}") from None
        try:
            body: dict[str, JsonValue] = response.json()
        except ValueError:
            raise CliError(f"{self.where} does not look like a factgate server (/healthz)") from None
        return body

    def submit_ndjson(
        self,
        lines: Iterable[bytes] | bytes,
        *,
        kind: str,
        options: Mapping[str, object],
        idempotency_key: str | None = None,
        input_name: str | None = None,
    ) -> JobBody:
        """POST /v1/jobs with an NDJSON body; options go in the query string."""
        params = {"kind": kind, **{k: str(v) for k, v in options.items() if v is not None}}
        headers = {"Content-Type": NDJSON}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key

        def post() -> httpx.Response:
            return self._http.post(
                "/v1/jobs", params=params, content=lines, headers=headers, timeout=SUBMIT_TIMEOUT
            )

        # A streamed body (an iterator) is used up by the first try and cannot be sent again.
        again = bool(idempotency_key) and isinstance(lines, bytes)
        response = self._answer(
            (lambda: self._patiently(post)) if again else post,
            late="the submission in time",
            doing="submitting to",
        )
        if response.status_code >= 400:
            self._raise(response, "/v1/jobs", input_name)
        job: JobBody = response.json()
        return job

    def submit_json(
        self,
        body: Mapping[str, object],
        *,
        idempotency_key: str | None = None,
        input_name: str | None = None,
        items_name: str = "items",
    ) -> JobBody:
        """POST /v1/jobs with a JSON body (`kind`, `options`, `items`); row problems name the items as the
        input file does (`items_name`: `test_cases` for a DeepEval file's `test_cases[2]`)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}

        def post() -> httpx.Response:
            return self._http.post("/v1/jobs", json=dict(body), headers=headers, timeout=SUBMIT_TIMEOUT)

        try:
            response = self._patiently(post) if idempotency_key else post()
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach factgate at {self.where}: {_reason(exc)}") from None
        if response.status_code >= 400:
            self._raise(response, "/v1/jobs", input_name, items_name)
        job: JobBody = response.json()
        return job

    def job(self, job_id: str) -> JobBody:
        body: JobBody = self._send("GET", f"/v1/jobs/{job_id}").json()
        return body

    def cancel(self, job_id: str) -> JobBody:
        body: JobBody = self._send("POST", f"/v1/jobs/{job_id}/cancel").json()
        return body

    def delete(self, job_id: str) -> None:
        """DELETE /v1/jobs/{id}: an ended job (204); a live one is refused with the server's message."""
        self._send("DELETE", f"/v1/jobs/{job_id}")

    def results(self, job_id: str) -> list[dict[str, JsonValue]]:
        """Every result line (NDJSON) of a job, parsed, without the stream's `{"_end": …}` trailer line;
        a stream that stops before its trailer was cut short and is an error, not a shorter result."""
        lines = [json.loads(line) for line in self.iter_result_lines(job_id) if line.strip()]
        if not lines or set(lines[-1]) != {"_end"}:
            raise CliError(
                f"the results of job {job_id} from factgate at {self.where} ended early; try again"
            )
        return lines[:-1]

    def iter_result_lines(self, job_id: str, fmt: str = "ndjson") -> Iterator[str]:
        """Result lines as the server streams them (NDJSON or CSV), for `results -o FILE`."""
        path = f"/v1/jobs/{job_id}/results"

        def open_stream() -> httpx.Response:
            response = self._http.send(
                self._http.build_request("GET", path, params={"format": fmt}), stream=True
            )
            if response.status_code >= 400:  # an error body is short: read it now, free the connection
                response.read()
                response.close()
            return response

        try:
            response = self._patiently(open_stream)
            try:
                if response.status_code >= 400:
                    self._raise(response, path)
                yield from response.iter_lines()
            finally:
                response.close()
        except httpx.HTTPError as exc:
            raise CliError(f"reading results from factgate at {self.where} failed: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.split("\n", 1)[0]


def _input_message(err: ErrorBody, message: str, input_name: str | None, items_name: str = "items") -> str:
    """A bad submission: row problems name the file, then the first problem's line and field and the count;
    anything else (an option, the body's size or type) is the server's message as it is."""
    errors = err.get("errors")
    if not (input_name and isinstance(errors, list) and errors and isinstance(errors[0], dict)):
        return message
    first = str(errors[0].get("message") or message)
    if items_name != "items" and first.startswith("items["):
        first = items_name + first.removeprefix("items")
    where = f"{input_name} " if first.startswith(("line ", "items[")) else f"{input_name}: "
    total = len(errors)
    count = "" if total == 1 else f"{total} problems in all; "
    return f"{where}{first} ({count}nothing was stored)"
