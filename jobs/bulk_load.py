"""Loading a streamed batch of rows into a job's items with Postgres COPY.

A 1,000,000-row upload must neither be held whole in the web process nor cost a Python object per item.
So the rows go, as they are validated, into the staging table `intake_rows` under the job's id (`COPY …
FROM STDIN`, text format, a few fields per row and no JSON built in Python; migration 0009 says why the
table is lasting and has no foreign key); one `INSERT … SELECT` then makes the items — one per row and mode,
with their input document, position and dedupe key computed by Postgres — and the staged rows are deleted
in the same transaction (`build_items`).

When the items are built depends on the size (web/intake.py:submit_stream). Up to
`FACTGATE_INTAKE_DEFER_ROWS` staged rows, before the 202, in the request's transaction: a small job is
stored whole or not at all, as before. Above it, the job is committed `validating` with its rows staged,
and the `start_job` task builds them (`build_staged`: the job row locked, idempotent, then `queued`), so the
202 does not wait for a million-row INSERT into a table with six indexes. Either way a batch that fails
validation half-way stores nothing: the COPY is in the request's transaction, which the caller rolls back.

Only a request repeated within the job keeps its dedupe key, as in `jobs.intake.create_job`: the staged
claims that occur more than once are grouped (hashed, not sorted) and joined back, and the repeats are
pointed at their first item in SQL. The items are inserted in the order the plan yields them, with no sort:
their `position` is explicit, and every reader orders by it through an index.

Measured on 1,000,000 staged rows (EXPLAIN ANALYZE, machine under load): the former window count sorted
every row by claim and then again by row (two external merge sorts; 21 s for the SELECT); the hashed group
and join do neither (8.5 s). `work_mem` is raised for this transaction alone (`SET LOCAL`), so the grouping
mostly stays in memory.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from enum import StrEnum
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import CursorResult, delete, select, text
from sqlalchemy.orm import Session

from jobs.kinds import job_kind
from models import Job, JobStatus, intake_rows, utcnow

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("factgate.jobs")

COPY_BATCH_ROWS = 5_000
# The memory one sort or hash of the load's statement may take before it spills to disk, for the load's
# transaction only: 1,000,000 staged claims group in ~100 MB (hash_mem_multiplier 2 × this).
LOAD_WORK_MEM = "64MB"
_STAGING = "intake_rows"  # models/jobs.py:intake_rows, migration 0009
_COPY_STAGING = f"COPY {_STAGING} (job_id, row, id, body, label, kind, source, in_query) FROM STDIN"
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_NULL = "\\N"


def _escape(value: str) -> str:
    """COPY text format: backslash, tab, newline and carriage return escaped. Four substring tests first:
    most values hold none of them, and `str.translate` with a table costs ~20× more per value (measured:
    2.4 µs against 0.11 µs for a 60-character claim), twice per row of a million-row batch."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_ESCAPES)
    return value


def _field(value: str | None) -> str:
    """COPY text format: `\\N` for NULL, else the value escaped."""
    return _NULL if value is None else _escape(value)


def _flag(value: bool | None) -> str:
    return _NULL if value is None else ("t" if value else "f")


class StagedRows:
    """A COPY into `intake_rows` under one job's id, open while the body is read: `add` a valid row.

    Rows are buffered and written `COPY_BATCH_ROWS` at a time. Use as a context manager: leaving it with
    an exception aborts the COPY (and the caller rolls the transaction back)."""

    def __init__(self, session: Session, job_id: uuid.UUID) -> None:
        self.count = 0
        self._buffer: list[str] = []
        self._job = f"{job_id}\t"
        dbapi = cast("psycopg.Connection[Any]", session.connection().connection.dbapi_connection)
        self._cursor = dbapi.cursor()
        self._copy_cm = self._cursor.copy(_COPY_STAGING)
        self._copy = self._copy_cm.__enter__()

    def add(
        self,
        row_id: str,
        body: str,
        *,
        label: bool | None = None,
        kind: str | None = None,
        source: str | None = None,
        in_query: bool | None = None,
    ) -> None:
        """Stage one valid row (`body` is the claim or the question); rows are numbered from 0 in order."""
        self._buffer.append(
            f"{self._job}{self.count}\t{_escape(row_id)}\t{_escape(body)}\t{_flag(label)}\t"
            f"{_field(kind)}\t{_field(source)}\t{_flag(in_query)}\n"
        )
        self.count += 1
        if len(self._buffer) >= COPY_BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._copy.write("".join(self._buffer))
            self._buffer.clear()

    def __enter__(self) -> StagedRows:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc is None:
                self._flush()
                self._copy_cm.__exit__(None, None, None)
            else:
                # Abort the COPY with an exception of our own: the caller's may be a frozen dataclass
                # (QuotaExceeded), into which contextlib cannot write a traceback. The caller's propagates.
                abort = RuntimeError("the submission was refused; its COPY is abandoned")
                self._copy_cm.__exit__(RuntimeError, abort, None)
        finally:
            self._cursor.close()


_DEDUPE = (
    "encode(sha256(convert_to(CAST(:model AS text) || chr(31) || m.mode || chr(31) || s.body || chr(31), "
    "'UTF8')), 'hex')"
)


def insert_claim_items(session: Session, job_id: uuid.UUID, *, model: str, modes: Sequence[str]) -> int:
    """One `claim` item per staged row of the job and mode (positions row × modes + mode index); returns
    the count.

    The input document and dedupe key are those `jobs.claims.claim_units` builds (`jobs.intake.dedupe_key`
    of model, mode and claim: sha256 over the parts each followed by U+001F)."""
    values = ", ".join(f"({i}, :mode{i})" for i in range(len(modes)))
    params: dict[str, Any] = {"job": job_id, "model": model, "n": len(modes)}
    params.update({f"mode{i}": mode for i, mode in enumerate(modes)})
    _raise_work_mem(session)
    result = session.execute(
        text(
            # Only module constants and placeholders are interpolated; every value is a bound parameter.
            # A claim repeated in the staging table is repeated in every mode, so one grouping serves all.
            "INSERT INTO items (job_id, stage, position, custom_id, mode, endpoint, input, status, attempts, "  # noqa: S608
            "dedupe_key) "
            "SELECT :job, 'claim', s.row * :n + m.i, s.id, m.mode, 'decisions', "
            "jsonb_build_object('claim', s.body, 'label', s.label, 'kind', s.kind, 'source', s.source, "
            "'in_query', s.in_query), 'pending', 0, "
            f"CASE WHEN r.body IS NOT NULL THEN {_DEDUPE} END "
            f"FROM {_STAGING} s "
            f"LEFT JOIN (SELECT body FROM {_STAGING} WHERE job_id = :job GROUP BY body HAVING count(*) > 1) "
            "AS r ON r.body = s.body "
            f"CROSS JOIN (VALUES {values}) AS m(i, mode) "
            "WHERE s.job_id = :job"
        ),
        params,
    )
    return int(cast("CursorResult[Any]", result).rowcount)


def insert_question_items(
    session: Session, job_id: uuid.UUID, *, kind: str, stage: str, endpoint: str
) -> int:
    """One top-level item per staged question, as `jobs.stages.question_units` builds them."""
    result = session.execute(
        text(
            "INSERT INTO items (job_id, stage, position, custom_id, mode, endpoint, input, status, attempts) "  # noqa: S608
            "SELECT :job, :stage, s.row, s.id, '', :endpoint, "
            "jsonb_build_object('kind', CAST(:kind AS text), 'question', s.body), 'pending', 0 "
            f"FROM {_STAGING} s WHERE s.job_id = :job"
        ),
        {"job": job_id, "stage": stage, "endpoint": endpoint, "kind": kind},
    )
    return int(cast("CursorResult[Any]", result).rowcount)


def _raise_work_mem(session: Session) -> None:
    """`work_mem` for the rest of this transaction only (SET LOCAL ends with it): the load's grouping of
    claims then runs in memory instead of in temporary files."""
    session.execute(text(f"SET LOCAL work_mem = '{LOAD_WORK_MEM}'"))


def link_repeats(session: Session, job_id: uuid.UUID) -> None:
    """Point every repeat of an upstream request at the item of its first position."""
    session.execute(
        text(
            "UPDATE items AS i SET duplicate_of = f.id "
            "FROM (SELECT DISTINCT ON (dedupe_key) dedupe_key, id FROM items "
            "      WHERE job_id = :job AND dedupe_key IS NOT NULL ORDER BY dedupe_key, position) AS f "
            "WHERE i.job_id = :job AND i.dedupe_key = f.dedupe_key AND i.id <> f.id"
        ),
        {"job": job_id},
    )


def drop_staged(session: Session, job_id: uuid.UUID) -> int:
    """Delete the job's staged rows (an index probe when there are none); returns how many went."""
    result = session.execute(delete(intake_rows).where(intake_rows.c.job_id == job_id))
    return int(cast("CursorResult[Any]", result).rowcount)


def build_items(session: Session, job: Job) -> int:
    """The job's items from its staged rows (its kind's `JobKind.build`), then the staged rows deleted, in
    the caller's transaction; returns the item count. The intake calls it for a small job, `build_staged`
    for a large one: the same statements either way, so the items are the same."""
    build = job_kind(job.kind).build
    if build is None:
        raise TypeError(f"kind {job.kind!r} has no streamed loader, so nothing of it is staged")
    items = build(session, job)
    drop_staged(session, job.id)
    return items


class Built(StrEnum):
    """What one `build_staged` call did."""

    BUILT = "built"  # the items were made and the job is queued
    SKIPPED = "skipped"  # the job is not validating (built before, cancelled, gone) or is being built
    # by another call right now: nothing was built; any rows it still had staged were deleted


def build_staged(session: Session, job_id: uuid.UUID) -> Built:
    """Build a `validating` job's items from its staged rows and queue it, in the caller's transaction.

    The job row is locked first (`FOR UPDATE SKIP LOCKED`): a second call while one builds — a redelivered
    message, the sweeper's — skips at once instead of waiting, and one arriving after the commit finds the
    job queued and does nothing. A job cancelled while validating gets no items; its staged rows are deleted
    and finalize ends it (`jobs/finalize.py:maybe_finalize` ends a cancelling job that has no items). If the
    transaction rolls back (a worker killed mid-build), the job is still validating with its rows staged,
    and the sweeper sends `start_job` again (`jobs/sweeper.py:stale_validating`)."""
    job = session.scalars(
        select(Job)
        .where(Job.id == job_id)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    ).first()
    if job is None:
        return Built.SKIPPED
    if job.status != JobStatus.VALIDATING:
        dropped = drop_staged(session, job.id)
        if dropped:
            log.info("job %s is %s: %d staged rows deleted, no items built", job.id, job.status, dropped)
        return Built.SKIPPED
    items = build_items(session, job)
    if items != job.total_items:  # the intake counted the same rows × modes; a mismatch is a bug
        log.error(
            "job %s: %d items built from staged rows, %d counted at intake", job.id, items, job.total_items
        )
    job.status = JobStatus.QUEUED
    job.queued_at = utcnow()
    session.flush()
    return Built.BUILT
