"""Streamed exports of a job: results as NDJSON or CSV, failed and skipped items as NDJSON.

Read in keyset chunks (jobs/keyset.py), each in its own short session: `CHUNK_ITEMS` items ordered by
(position, id) are read, the session is closed (its transaction ends) and only then are the chunk's lines
sent. No transaction or cursor is held while the client reads, so a slow reader neither pins a connection nor
runs into Postgres' `idle_in_transaction_session_timeout` (which used to cut a download short while it
still ended with status 200), and a 1,000,000-item job streams in constant memory.

A stream reads whatever exists: a running job's export holds its finished rows and the pending ones with
status `pending`. A stream opens its sessions itself (`stream_job`): Flask tears the request's app
context down when the view returns, before the first chunk is sent.

Every export ends with a trailer, so a truncated transfer never looks complete:
- NDJSON: a last line `{"_end": {"count": N, "after": <the ?after= given or null>, "last_id": <the last
  line's custom_id or null>}}`, N being the lines above it in this response. A client that lost the
  connection resumes with `?after=<the custom_id of the last line it has>`.
- CSV: a last row whose first cell is `#end` and second the number of data rows above it (spreadsheets
  show it as an ordinary last row; a file without it is incomplete).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from jobs.claims import claim_results_page
from jobs.flows import question_results_page
from jobs.keyset import START, Cursor

__all__ = [
    "CHUNK_ITEMS",
    "CSV_RENDERERS",
    "RESULT_ITERATORS",
    "START",
    "Progress",
    "ndjson_lines",
    "ndjson_trailer",
    "read_chunks",
    "stream_job",
]
from models import Job
from web.csv_exports import CsvTally, answers_csv, quotes_csv
from web.csv_safety import SafeCsv

ResultPage = Callable[[Session, Job, Cursor, int], list[tuple[Cursor, dict[str, Any]]]]
Renderer = Callable[[Iterator[dict[str, Any]]], Iterator[str]]

CHUNK_ITEMS = 1_000
END_KEY = "_end"

# Per kind: one dict per submitted row, a chunk at a time. Kinds without an entry have no results export.
RESULT_ITERATORS: dict[str, ResultPage] = {
    "claims": claim_results_page,
    "answer": question_results_page,  # one line per question with its report
    "quote": question_results_page,
}

CSV_COLUMNS = ("custom_id", "mode", "status", "p", "verdict", "label", "request_id", "error")


@dataclass
class Progress:
    """What a stream has sent so far: records, and the custom_id of the last one (for the trailer)."""

    after: str | None = None
    count: int = 0
    last_id: str | None = None


def read_chunks(
    sessions: sessionmaker[Session],
    job_id: uuid.UUID,
    pages: ResultPage,
    progress: Progress,
    *,
    start: Cursor = START,
    chunk_items: int = CHUNK_ITEMS,
) -> Iterator[dict[str, Any]]:
    """Every record after `start`, read `chunk_items` at a time, each chunk in a session closed before
    its records are yielded (so none is open while the client reads them)."""
    cursor = start
    while True:
        with sessions() as session:
            job = session.get(Job, job_id)
            if job is None:  # deleted since the view's check (or between chunks)
                return
            page = pages(session, job, cursor, chunk_items)
        if not page:
            return
        for record_cursor, record in page:
            cursor = record_cursor
            progress.count += 1
            custom_id = record.get("custom_id")
            progress.last_id = custom_id if isinstance(custom_id, str) else None
            yield record


def _json_line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def ndjson_lines(records: Iterator[dict[str, Any]]) -> Iterator[str]:
    """One compact JSON document per line (the trailer is added by `stream_job`)."""
    for record in records:
        yield _json_line(record)


def ndjson_trailer(progress: Progress) -> str:
    """The last line of an NDJSON export: it is complete, and this is what it held."""
    return _json_line(
        {END_KEY: {"count": progress.count, "after": progress.after, "last_id": progress.last_id}}
    )


def claims_csv(records: Iterator[dict[str, Any]]) -> Iterator[str]:
    """One CSV row per claim per mode, header first, `#end` row last (`claims` results only); cells are
    formula-safe."""
    out = CsvTally(SafeCsv())
    out.header(CSV_COLUMNS)
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
    yield out.end()


def stream_job(
    sessions: sessionmaker[Session],
    job_id: uuid.UUID,
    pages: ResultPage,
    render: Renderer,
    *,
    start: Cursor = START,
    after: str | None = None,
) -> Iterator[str]:
    """Render the records of `pages` read in chunks after `start` (`after` is the `?after=` id it was
    resolved from), then, for NDJSON, the trailer line (CSV renderers end with their own `#end` row)."""
    progress = Progress(after=after)
    yield from render(read_chunks(sessions, job_id, pages, progress, start=start))
    if render is ndjson_lines:
        yield ndjson_trailer(progress)


# CSV per kind (NDJSON exists for every kind in RESULT_ITERATORS).
CSV_RENDERERS: dict[str, Renderer] = {
    "claims": claims_csv,
    "answer": answers_csv,
    "quote": quotes_csv,
}
