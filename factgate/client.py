"""`factgate.Client`: factgate's HTTP API (/v1) for Python programs (docs/client.md).

The same API the CLI drives (cli/client.py), with the same manners (clients/factgate_http.py): every
submission carries an Idempotency-Key (one of the caller's, or a fresh one), so it is sent again on a 503
and a retry returns the job stored the first time; reads, cancel and delete are asked again on a 503 for
up to a minute. Results are the kind's contract (checks/kinds/: `CitationsResult`, `ClaimResult`,
`AnswerResult`, `QuoteResult`), read tolerantly, so a newer server's extra fields do not break an older
client. Errors are `FactgateError`; a refused submission is `RejectedError` with the server's problems,
each naming its line or item and field.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from checks.contracts import Contract
from checks.gates import figures, misses, parse_gate
from checks.recipes import recipe_for
from checks.states import JobStatus
from clients.factgate_http import SUBMIT_TIMEOUT, TIMEOUT, UNAVAILABLE_BUDGET_S, error_body, patiently
from clients.tls import trust_store

__all__ = ["Client", "FactgateError", "Job", "RejectedError"]

ENDED = frozenset(str(s) for s in JobStatus.ended())
Progress_ = Callable[["Job"], None] | Literal["bar"] | None


class FactgateError(Exception):
    """The server refused or failed a request (`status` its HTTP status; None when it was not reached)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class RejectedError(FactgateError):
    """A submission the server refused (400, 413, 415): `errors` lists each problem with its `line` or
    `index` and `field`, as the API names them; nothing was stored."""

    def __init__(self, message: str, *, status: int, errors: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(message, status=status)
        self.errors = [dict(e) for e in errors]


@dataclass(frozen=True)
class Job:
    """A job as GET /v1/jobs/{id} shows it: its state, progress, warnings and (once ended) summary."""

    id: str
    kind: str
    status: str
    total: int
    completed: int
    failed: int
    skipped: int
    warnings: list[str] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> Job:
        counts = body.get("request_counts") or {}
        summary = body.get("summary")
        return cls(
            id=str(body["id"]),
            kind=str(body.get("kind")),
            status=str(body.get("status")),
            total=int(counts.get("total") or 0),
            completed=int(counts.get("completed") or 0),
            failed=int(counts.get("failed") or 0),
            skipped=int(counts.get("skipped") or 0),
            warnings=[str(w) for w in body.get("warnings") or []],
            summary=dict(summary) if isinstance(summary, Mapping) else None,
            raw=dict(body),
        )

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def finished(self) -> int:
        """Items settled so far (done, failed or skipped)."""
        return self.completed + self.failed + self.skipped

    def typed_summary(self) -> Contract | None:
        """The summary as the kind's contract (`CitationsSummary`, `ClaimsSummary`, ...), once ended."""
        if self.summary is None:
            return None
        model: type[Contract] = recipe_for(self.kind).summary
        return model.read(self.summary)

    def figures(self) -> dict[str, float | None]:
        """The figures a CI gate reads (checks/gates.py), by name."""
        return figures(self.kind, self.summary or {})

    def misses(
        self, *, under: Mapping[str, float] | None = None, over: Mapping[str, float] | None = None
    ) -> list[str]:
        """One line per figure outside its bound (`under={"citation_recall": 0.8}`: below 0.8 misses), as
        `factgate citations --fail-under` prints them; empty when every bound is met. Raises ValueError
        for a name the kind does not have."""
        gates = [parse_gate(f"{k}={v}", "under", self.kind) for k, v in (under or {}).items()]
        gates += [parse_gate(f"{k}={v}", "over", self.kind) for k, v in (over or {}).items()]
        return misses(gates, self.figures())


class Client:
    """One factgate server, one tenant's token. Use as a context manager, or `close()` when done."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float | None = None,
        transport: httpx.BaseTransport | None = None,
        unavailable_budget_s: float = UNAVAILABLE_BUDGET_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self._budget_s = unavailable_budget_s
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "factgate-python"},
            timeout=TIMEOUT if timeout is None else httpx.Timeout(timeout, connect=5.0),
            transport=transport,
            verify=trust_store(),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- plumbing ----------------------------------------------------------------------------------

    def _call(self, send: Callable[[], httpx.Response], what: str, *, again: bool = True) -> httpx.Response:
        try:
            response = patiently(send, budget_s=self._budget_s, sleep=self._sleep) if again else send()
        except httpx.HTTPError as exc:
            reason = str(exc).split("\n", 1)[0] or type(exc).__name__
            raise FactgateError(f"{what} at {self.url} failed: {reason}") from None
        if response.status_code >= 400:
            err = error_body(response)
            message = str(err.get("message") or response.reason_phrase or f"HTTP {response.status_code}")
            if response.status_code in (400, 413, 415):
                errors = err.get("errors")
                raise RejectedError(
                    message, status=response.status_code, errors=errors if isinstance(errors, list) else []
                )
            raise FactgateError(f"{what}: {message}", status=response.status_code)
        return response

    # --- the API -----------------------------------------------------------------------------------

    def submit(
        self,
        kind: str,
        rows: Iterable[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> str:
        """Create a job of `kind` from `rows` (dicts in the kind's shape; for `citations` also RAGAS
        samples or DeepEval test cases) with `options` (`supported_min=0.8`, `input_format="ragas"`...);
        returns its id. Raises RejectedError naming each bad row's item and field."""
        body: dict[str, Any] = {
            "kind": kind,
            "options": {k: v for k, v in options.items() if v is not None},
            "items": [dict(r) for r in rows],
        }
        if metadata is not None:
            body["metadata"] = dict(metadata)
        headers = {"Idempotency-Key": idempotency_key or f"factgate-python-{uuid.uuid4()}"}
        response = self._call(
            lambda: self._http.post("/v1/jobs", json=body, headers=headers, timeout=SUBMIT_TIMEOUT),
            "submitting the job",
        )
        return str(response.json()["id"])

    def job(self, job_id: str) -> Job:
        """The job's state now."""
        return Job.from_api(self._call(lambda: self._http.get(f"/v1/jobs/{job_id}"), f"job {job_id}").json())

    def wait(
        self,
        job_id: str,
        *,
        progress: Progress_ = None,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
    ) -> Job:
        """Poll until the job has ended and return it. `progress` is called with the job after every poll,
        or is "bar" for a progress bar on stderr. Raises FactgateError after `timeout_s` (the job keeps
        running on the server)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if progress == "bar":
            return self._wait_with_bar(job_id, poll_s, deadline)
        while True:
            job = self.job(job_id)
            if callable(progress):
                progress(job)
            if job.ended:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise FactgateError(f"job {job_id} is still {job.status} after {timeout_s} s")
            self._sleep(poll_s)

    def _wait_with_bar(self, job_id: str, poll_s: float, deadline: float | None) -> Job:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=Console(stderr=True)) as bar:
            task = bar.add_task(f"job {job_id}", total=None)

            def show(job: Job) -> None:
                bar.update(
                    task,
                    total=job.total or None,
                    completed=job.finished,
                    description=f"{job.kind} {job.status}",
                )

            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self.wait(job_id, progress=show, poll_s=poll_s, timeout_s=remaining)

    def results(self, job_id: str) -> Iterator[Contract]:
        """Every result line of the job as its kind's contract, in order. A stream that ends before its
        trailer was cut short: FactgateError, never a shorter result."""
        model: type[Contract] = recipe_for(self.job(job_id).kind).result_line
        path = f"/v1/jobs/{job_id}/results"

        def open_stream() -> httpx.Response:
            response = self._http.send(self._http.build_request("GET", path), stream=True)
            if response.status_code >= 400:
                response.read()
                response.close()
            return response

        response = self._call(open_stream, f"results of job {job_id}")
        ended = False
        try:
            for raw in response.iter_lines():
                if not raw.strip():
                    continue
                line = json.loads(raw)
                if isinstance(line, dict) and set(line) == {"_end"}:
                    ended = True
                    break
                yield model.read(line)
        except httpx.HTTPError as exc:
            raise FactgateError(f"reading the results of job {job_id} failed: {exc}") from None
        finally:
            response.close()
        if not ended:
            raise FactgateError(f"the results of job {job_id} ended early; read them again")

    def cancel(self, job_id: str) -> Job:
        """Cancel the job (idempotent): items not yet sent are skipped."""
        body = self._call(lambda: self._http.post(f"/v1/jobs/{job_id}/cancel"), f"cancelling job {job_id}")
        return Job.from_api(body.json())

    def delete(self, job_id: str) -> None:
        """Delete an ended job and its results (a live one is refused: cancel it first)."""
        self._call(lambda: self._http.delete(f"/v1/jobs/{job_id}"), f"deleting job {job_id}")
