"""Storing and reading a job's source lists (checks/claim_sources.py; `source_lists`, migration 0012).

A grounded claim item's sources are written once per (job, digest) when the item settles, in the statement
or transaction that writes its output (jobs/items.py), so an output's reference never names a list that is
not there. Readers load the lists a page of items names in one query, keyed by the job they already read
for the tenant, and put each back where its reference sits.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, cast

from pydantic import JsonValue
from sqlalchemy import Connection, Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from checks.claim_sources import SplitSources, join_sources, refs_of, split_sources
from models import SourceList, Stage

_SOURCES = cast(Table, SourceList.__table__)
# Prebuilt, as the settle statements are (jobs/items.py): a list already stored for the job is left as it is.
_INSERT = {
    "postgresql": postgresql.insert(_SOURCES).on_conflict_do_nothing(),
    "sqlite": sqlite.insert(_SOURCES).on_conflict_do_nothing(),
}
# The same as Postgres text, for the one-statement settle on psycopg (a data-modifying CTE).
INSERT_CTE_SQL = (
    "src AS (INSERT INTO source_lists (job_id, digest, sources) "
    "VALUES (%(src_job)s, %(src_digest)s, %(src_sources)s) ON CONFLICT DO NOTHING)"
)


def sources_apart(stage: str, output: Mapping[str, Any]) -> SplitSources | None:
    """A claim item's output with its sources to store apart; None for other stages (their outputs'
    `sources`, if any, are read by their own kinds as they are) and for outputs without sources."""
    return split_sources(output) if stage == Stage.CLAIM else None


def store_sources(session: Session | Connection, job_id: uuid.UUID, split: SplitSources) -> None:
    """Store the list under its digest for the job, unless it is there already."""
    dialect = session.dialect if isinstance(session, Connection) else session.get_bind().dialect
    session.execute(
        _INSERT[dialect.name],
        {"job_id": job_id, "digest": uuid.UUID(hex=split.ref), "sources": split.sources},
    )


class SourceLists:
    """The source lists of one job that a reader has met, loaded a page of items at a time and kept for the
    next pages (at most `MAX_KEPT` lists: past that the cache starts over, so memory stays bounded)."""

    MAX_KEPT = 4_096

    def __init__(self, session: Session | Connection, job_id: uuid.UUID) -> None:
        self._session = session
        self._job_id = job_id
        self._lists: dict[str, list[Any]] = {}

    def load(self, outputs: Iterable[Mapping[str, Any] | None]) -> None:
        """Fetch, in one query, the lists these outputs name that are not loaded yet."""
        refs = refs_of(outputs)
        missing = refs - self._lists.keys()
        if not missing:
            return
        if len(self._lists) + len(missing) > self.MAX_KEPT:
            self._lists.clear()
            missing = refs
        rows = self._session.execute(
            select(SourceList.digest, SourceList.sources).where(
                SourceList.job_id == self._job_id,
                SourceList.digest.in_(sorted(uuid.UUID(hex=r) for r in missing)),
            )
        )
        for digest, sources in rows:
            self._lists[digest.hex] = sources

    def join(self, output: dict[str, JsonValue]) -> dict[str, JsonValue]:
        """`output` as it was written, its sources back in place (load it first)."""
        return join_sources(output, self._lists)

    def joined(self, output: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
        """One output, loaded and joined: for readers of a single item."""
        if output is None:
            return None
        self.load((output,))
        return self.join(output)
