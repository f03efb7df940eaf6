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

from checks.contracts import Contract
from checks.kinds.claims import CSV_COLUMNS, ClaimResult
from models import Job
from web.csv_safety import SafeCsv
from web.kinds import CSV_RENDERERS, RESULT_ITERATORS, Renderer, ResultIterator

__all__ = ["CSV_RENDERERS", "RESULT_ITERATORS", "claims_csv", "ndjson_lines", "stream_job"]


def ndjson_lines(records: Iterator[Contract | dict[str, Any]]) -> Iterator[str]:
    """One compact JSON document per line (a result line's contract, or a plain dict)."""
    for record in records:
        if isinstance(record, Contract):
            # pydantic's serializer: compact and UTF-8 unescaped, the bytes json.dumps gave, and cheaper
            yield record.model_dump_json() + "\n"
        else:
            yield json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def claims_csv(records: Iterator[ClaimResult]) -> Iterator[str]:
    """One CSV row per claim per mode, header first (`claims` results only); cells are formula-safe."""
    out = SafeCsv()
    out.row(CSV_COLUMNS)
    yield out.take()
    for record in records:
        label = record.label
        for mode, res in record.results.items():
            out.row(
                (
                    record.custom_id,
                    mode,
                    res.status,
                    "" if res.p is None else repr(float(res.p)),
                    res.verdict or "",
                    "" if label is None else str(bool(label)).lower(),
                    res.request_id or "",
                    res.error or "",
                )
            )
        yield out.take()


def stream_job(
    sessions: sessionmaker[Session],
    job_id: uuid.UUID,
    records: ResultIterator | Callable[[Session, Job], Iterator[dict[str, Any]]],
    render: Renderer,
) -> Iterator[str]:
    """Render `records(session, job)` with a session opened on the first chunk and closed after the last."""
    with sessions() as session:
        job = session.get(Job, job_id)
        if job is None:  # deleted between the view's check and the first chunk
            return
        yield from render(records(session, job))
