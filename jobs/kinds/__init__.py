"""The application-layer part of every job kind, registered by name (see checks/registry.py).

A `JobKind` says how a kind's rows become items, how its job summary and result lines are built from the
database, and — for a kind with more than one stage — its `StageMachine`: how an entry item's children are
planned and how its report is built once they settle (jobs/stages.py runs it). Everything in jobs/ that
used to branch on the kind (finalize, the stage machine, the results export) asks this registry instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from checks.contracts import Contract
from checks.registry import Registry
from jobs.intake import UnitSpec
from models import Item, Job

Units = Callable[[Sequence[Any], Any], tuple[list[UnitSpec], list[str]]]


@dataclass(frozen=True)
class StageMachine:
    """What a staged kind plugs into jobs/stages.py (pure functions over stored items)."""

    # The next stage's children of an entry item whose children so far are all settled; [] = report now.
    plan: Callable[[Job, Item, Sequence[Item]], list[UnitSpec]]
    # The entry item's report (a dict with at least checks.contracts.ReportHead's fields).
    build_report: Callable[..., dict[str, Any]]
    # The job summary from every entry item's (report status, report summary).
    summarize_reports: Callable[[Iterable[tuple[str | None, Mapping[str, Any] | None]]], Contract]
    # One results line from (custom_id, question, item status, stored report or None).
    result_line: Callable[[str, str, str, Mapping[str, Any] | None], Contract]


def _always_ready(session: Session, job: Job) -> bool:
    return True


@dataclass(frozen=True)
class JobKind:
    """A kind's state-changing half. `ready` is asked once every item is settled: may the job finalize?"""

    name: str
    units: Units  # (validated rows, parsed options) → (items to create, intake warnings)
    summarize: Callable[[Session, Job], Contract]
    results: Callable[[Session, Job], Iterator[Contract]]
    machine: StageMachine | None = None
    ready: Callable[[Session, Job], bool] = _always_ready


KINDS: Registry[JobKind] = Registry("jobs", "jobs.kinds")


def register(kind: JobKind) -> JobKind:
    return KINDS.register(kind.name, kind)


def job_kind(name: str) -> JobKind:
    return KINDS.get(name)
