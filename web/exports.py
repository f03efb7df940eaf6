"""Streamed exports of a job: results as NDJSON or CSV, failed and skipped items as NDJSON.

Generators over server-side cursors (`yield_per`), so a 200,000-item job streams in constant memory.
A stream owns its database session (`stream_job`): Flask tears the request's app context down when
the view returns, before the first chunk is sent, so the request's session would be closed under the
cursor. The stream's session closes when the generator finishes or the server closes it (client gone).
They stream whatever exists: a running job's export holds its finished rows and the pending ones with
status `pending`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from jobs.claims import iter_claim_results
from jobs.flows import iter_question_results
from models import Job
from web.csv_exports import answers_csv, quotes_csv
from web.csv_safety import SafeCsv

ResultIterator = Callable[[Session, Job], Iterator[dict[str, Any]]]
Renderer = Callable[[Iterator[dict[str, Any]]], Iterator[str]]

# Per kind: one dict per submitted row. Kinds without an entry have no results export yet.
RESULT_ITERATORS: dict[str, ResultIterator] = {
    "claims": iter_claim_results,
    "answer": iter_question_results,  # one line per question with its report
    "quote": iter_question_results,
}

CSV_COLUMNS = ("custom_id", "mode", "status", "p", "verdict", "label", "request_id", "error")


def ndjson_lines(records: Iterator[dict[str, Any]]) -> Iterator[str]:
    """One compact JSON document per line."""
    for record in records:
        yield json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def claims_csv(records: Iterator[dict[str, Any]]) -> Iterator[str]:
    """One CSV row per claim per mode, header first (`claims` results only); cells are formula-safe."""
    out = SafeCsv()
    out.row(CSV_COLUMNS)
    yield out.take()
    for record in records:
        label = record.get("label")
        for mode, res in record.get("results", {}).items():
            p = res.get("p")
            out.row(
                (
                    record.get("custom_id", ""),
                    mode,
                    res.get("status", ""),
                    "" if p is None else repr(float(p)),
                    res.get("verdict") or "",
                    "" if label is None else str(bool(label)).lower(),
                    res.get("request_id") or "",
                    res.get("error") or "",
                )
            )
        yield out.take()


def stream_job(
    sessions: sessionmaker[Session], job_id: uuid.UUID, records: ResultIterator, render: Renderer
) -> Iterator[str]:
    """Render `records(session, job)` with a session opened on the first chunk and closed after the last."""
    with sessions() as session:
        job = session.get(Job, job_id)
        if job is None:  # deleted between the view's check and the first chunk
            return
        yield from render(records(session, job))


# CSV per kind (NDJSON exists for every kind in RESULT_ITERATORS).
CSV_RENDERERS: dict[str, Renderer] = {
    "claims": claims_csv,
    "answer": answers_csv,
    "quote": quotes_csv,
}
