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

from sqlalchemy import CursorResult, delete, select, text, update
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
    of model, mode and claim: sha256 over the parts each followed by U+001F). Whether any claim is repeated
    is asked first, grouping a 64-bit hash of each claim rather than its text (`_may_repeat`); most batches
    repeat none, and their items are inserted straight from the staged rows, without the grouping and join
    that find the repeats (`_REPEATS_JOIN`), which only a batch that may hold some pays for."""
    values = ", ".join(f"({i}, :mode{i})" for i in range(len(modes)))
    params: dict[str, object] = {"job": job_id, "model": model, "n": len(modes)}
    params.update({f"mode{i}": mode for i, mode in enumerate(modes)})
    _raise_work_mem(session)
    repeats = _may_repeat(session, job_id)
    result = session.execute(
        text(
            # Only module constants and placeholders are interpolated; every value is a bound parameter.
            # A claim repeated in the staging table is repeated in every mode, so one grouping serves all.
            "INSERT INTO items (job_id, stage, position, custom_id, mode, endpoint, input, status, attempts, "
            "dedupe_key) "
            "SELECT :job, 'claim', s.row * :n + m.i, s.id, m.mode, 'decisions', "
            "jsonb_build_object('claim', s.body, 'label', s.label, 'kind', s.kind, 'source', s.source, "
            "'in_query', s.in_query), 'pending', 0, "
            + (f"CASE WHEN r.body IS NOT NULL THEN {_DEDUPE} END " if repeats else "NULL ")
            + f"FROM {_STAGING} s "
            + (_REPEATS_JOIN if repeats else "")
            + f"CROSS JOIN (VALUES {values}) AS m(i, mode) "
            "WHERE s.job_id = :job"
        ),
        params,
    )
    return int(cast("CursorResult[Any]", result).rowcount)


# The staged claims of the job that occur more than once (hashed, not sorted), joined back to every row.
_REPEATS_JOIN = (
    f"LEFT JOIN (SELECT body FROM {_STAGING} WHERE job_id = :job GROUP BY body HAVING count(*) > 1) "  # noqa: S608
    "AS r ON r.body = s.body "
)


def _may_repeat(session: Session, job_id: uuid.UUID) -> bool:
    """Whether two of the job's staged claims may be equal: two with the same 64-bit hash
    (`hashtextextended`). False means none repeats (equal claims hash alike); True, rarely wrong, sends the
    load through the exact grouping. Grouping 8-byte hashes instead of the claims' text, and joining nothing
    back, is what makes this cheaper than the exact statement it spares."""
    return bool(
        session.scalar(
            text(
                f"SELECT EXISTS (SELECT 1 FROM {_STAGING} WHERE job_id = :job "  # noqa: S608
                "GROUP BY hashtextextended(body, 0) HAVING count(*) > 1)"
            ),
            {"job": job_id},
        )
    )


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


# The namespace of the advisory locks a build holds on its job (the other key is hashtext of the job id):
# `pg_try_advisory_xact_lock(BUILD_LOCK_NS, hashtext(id))`, released when the build's transaction ends.
BUILD_LOCK_NS = 0x46474231  # "FGB1"
STAGED_DROP_BATCH = 10_000


def build_lock_sql(job_id_sql: str) -> str:
    """The SQL that takes the build lock of the job whose id is `job_id_sql` (a column or placeholder),
    true when taken; the sweeper uses it to pass over a job that is being built."""
    return f"pg_try_advisory_xact_lock({BUILD_LOCK_NS}, hashtext(CAST({job_id_sql} AS text)))"


def try_build_lock(session: Session, job_id: uuid.UUID) -> bool:
    """Take the job's build lock for the rest of this transaction, without waiting; True when taken (always
    on SQLite, whose intake never defers a build and whose writers are serialized anyway)."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    return bool(session.scalar(text(f"SELECT {build_lock_sql(':job')}"), {"job": str(job_id)}))


def drop_staged_batch(session: Session, job_id: uuid.UUID, limit: int = STAGED_DROP_BATCH) -> int:
    """Delete up to `limit` of the job's staged rows (the table has no key, so by `ctid` on Postgres);
    returns how many went. For a job that will never be built: its rows go in short transactions."""
    if session.get_bind().dialect.name != "postgresql":
        return drop_staged(session, job_id)
    result = session.execute(
        text(
            f"DELETE FROM {_STAGING} WHERE ctid = ANY(ARRAY("  # noqa: S608 - module constant only
            f"SELECT ctid FROM {_STAGING} WHERE job_id = :job LIMIT :n))"
        ),
        {"job": job_id, "n": limit},
    )
    return int(cast("CursorResult[Any]", result).rowcount)


class Built(StrEnum):
    """What one `build_staged` call did."""

    BUILT = "built"  # the items were made and the job is queued
    SKIPPED = "skipped"  # the job is not validating (built before, cancelled, gone) or is being built
    # by another call right now: nothing was built
    CANCELLED = "cancelled"  # the job was cancelled while its items were being built: they were rolled back


def build_staged(session: Session, job_id: uuid.UUID) -> Built:
    """Build a `validating` job's items from its staged rows and queue it, in the caller's transaction.

    The build takes the job's advisory lock (`try_build_lock`), not its row lock: a second call while one
    builds — a redelivered message, the sweeper's — skips at once instead of waiting, and one arriving after
    the commit finds the job queued and does nothing; and a cancel, which only updates the job row, does not
    wait for a build of 30–40 s (it did when the build held the row `FOR UPDATE`). The job becomes `queued`
    by a conditional UPDATE, the build's last statement: if a cancel moved the job to `cancelling` meanwhile,
    it misses, and the whole transaction — the million items included — is rolled back (`Built.CANCELLED`),
    so a cancelled job never has its items materialised; its staged rows are left to `finish_cancel`, which
    deletes them in batches, and finalize ends it with none. A job already cancelled gets no build at all.
    If the transaction rolls back for any other reason (a worker killed mid-build), the job is still
    validating with its rows staged, and the sweeper sends `start_job` again
    (`jobs/sweeper.py:stale_validating`)."""
    if not try_build_lock(session, job_id):
        return Built.SKIPPED
    status = session.scalar(select(Job.status).where(Job.id == job_id))
    if status != JobStatus.VALIDATING:
        return Built.SKIPPED
    job = session.get(Job, job_id, populate_existing=True)
    assert job is not None
    items = build_items(session, job)
    if items != job.total_items:  # the intake counted the same rows × modes; a mismatch is a bug
        log.error(
            "job %s: %d items built from staged rows, %d counted at intake", job.id, items, job.total_items
        )
    queued = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.VALIDATING)
        .values(status=JobStatus.QUEUED, queued_at=utcnow())
    )
    if not getattr(queued, "rowcount", 0):
        session.rollback()
        log.info("job %s was cancelled while its %d items were built: rolled back", job_id, items)
        return Built.CANCELLED
    session.refresh(job)
    return Built.BUILT
