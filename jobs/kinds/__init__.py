"""The application-layer part of every job kind, registered by name (see checks/registry.py).

A `JobKind` says how a kind's rows become items, how its job summary and result lines are built from the
database, and — for a kind with more than one stage — its `StageMachine`: how an entry item's children are
planned and how its report is built once they settle (jobs/stages.py runs it). Everything in jobs/ that
used to branch on the kind (finalize, the stage machine, the results export) asks this registry instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.orm import Session

from checks.contracts import Contract, ItemStatusName
from checks.ndjson import RowLine
from checks.recipes import RowLimits
from checks.registry import Registry
from jobs.intake import UnitSpec
from jobs.keyset import Cursor
from models import Item, Job

Units = Callable[[Sequence[Any], Any], tuple[list[UnitSpec], list[str]]]
# (session, job, after, limit) → the result lines of the rows after the keyset cursor `after`, from at most
# `limit` items, each with the cursor that resumes after it (jobs/keyset.py; web/exports.py reads chunks).
ResultPage = Callable[[Session, Job, Cursor, int], Sequence[tuple[Cursor, Contract]]]


@dataclass(frozen=True)
class Staged:
    """What a streamed load staged: the rows, the items they will make (rows × modes), intake warnings."""

    rows: int
    items: int
    warnings: list[str]


class StreamLoad(Protocol):
    """A kind's streamed intake: the NDJSON `lines` (a CSV body's records arrive as such lines) validated and
    copied into the staging table under the job's id as they are read (Postgres COPY, jobs/bulk_load.py);
    the kind's `JobKind.build` makes the items from them later. `quota` is called with the running item
    count and raises jobs.quotas.QuotaExceeded; row problems raise the recipe's ClaimsValidationError (the
    web layer names their lines)."""

    def __call__(
        self,
        session: Session,
        job: Job,
        options: Any,
        lines: Iterable[RowLine],
        *,
        limits: RowLimits,
        quota: Callable[[int], None],
    ) -> Staged: ...


class BuildReport(Protocol):
    """An entry item's report as JSON, from stored items only; `incomplete`: the job was cancelled before
    every planned step of this entry ran (jobs/stages.py says when)."""

    def __call__(
        self, job: Job, entry: Item, children: Sequence[Item], /, *, incomplete: bool
    ) -> Mapping[str, object]: ...


@dataclass(frozen=True)
class StageMachine:
    """What a staged kind plugs into jobs/stages.py (pure functions over stored items)."""

    # The next stage's children of an entry item whose children so far are all settled; [] = report now.
    plan: Callable[[Job, Item, Sequence[Item]], list[UnitSpec]]
    # The entry item's report as JSON (at least checks.contracts.ReportHead's fields), checked by `report`.
    build_report: BuildReport
    # The job summary from every entry item's (report status, report summary).
    summarize_reports: Callable[[Iterable[tuple[str | None, Mapping[str, Any] | None]]], Contract]
    # One results line from (custom_id, question, item status, stored report or None).
    result_line: Callable[[str, str, ItemStatusName, Mapping[str, Any] | None], Contract]
    # The report's contract: every built report is validated by it when stored (jobs/stages.py).
    report: type[Contract]


def _always_ready(session: Session, job: Job) -> bool:
    return True


@dataclass(frozen=True)
class JobKind:
    """A kind's state-changing half. `ready` is asked once every item is settled: may the job finalize?"""

    name: str
    units: Units  # (validated rows, parsed options) → (items to create, intake warnings)
    summarize: Callable[[Session, Job], Contract]
    results_page: ResultPage
    machine: StageMachine | None = None
    ready: Callable[[Session, Job], bool] = _always_ready
    # Streamed intake of NDJSON and CSV bodies; None: the rows are validated in memory, then inserted
    # (fine for small batches; a kind expecting 1,000,000 rows adds a loader).
    load: StreamLoad | None = None
    # With `load`: the items from the job's staged rows, in the caller's transaction; returns their count
    # (jobs/bulk_load.py:build_items calls it, then deletes the staged rows).
    build: Callable[[Session, Job], int] | None = None


KINDS: Registry[JobKind] = Registry("jobs", "jobs.kinds")


def register(kind: JobKind) -> JobKind:
    return KINDS.register(kind.name, kind)


def job_kind(name: str) -> JobKind:
    return KINDS.get(name)
