"""The web part of every job kind: its CSV renderer and its report page, registered by name.

`RESULT_ITERATORS` and `CSV_RENDERERS` are read-only views over the registries (the result lines come from
the kind's jobs/ part, a keyset page at a time, the CSV from its web/ part), so the API, the pages and the
exports look kinds up the way they always did while no table lists them by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from checks.recipes import kind_names
from checks.registry import Registry
from jobs.kinds import KINDS as JOB_KINDS
from jobs.kinds import ResultPage
from models import Job

Renderer = Callable[[Iterator[Any]], Iterator[str]]
# (session, job, query arguments, interactive) → the report template's context, with its "template".
# None: the kind has no report beyond the job overview.
ReportBuilder = Callable[[Session, Job, Mapping[str, str], bool], Mapping[str, object] | None]


@dataclass(frozen=True)
class WebKind:
    """A kind's pages and downloads. `report` returns the context of its report template (the job page
    and the downloadable report file render the same one; `interactive` is False for the file)."""

    name: str
    csv: Renderer
    report: ReportBuilder


KINDS: Registry[WebKind] = Registry("web", "web.kinds")


def register(kind: WebKind) -> WebKind:
    return KINDS.register(kind.name, kind)


def web_kind(name: str) -> WebKind:
    return KINDS.get(name)


T = TypeVar("T")


class _View(Mapping[str, T], Generic[T]):
    """A kind-name → part mapping computed from a registry on each lookup (kinds register at import)."""

    def __init__(self, get: Callable[[str], T | None], names: Callable[[], tuple[str, ...]]) -> None:
        self._get = get
        self._names = names

    def __getitem__(self, name: str) -> T:
        part = self._get(name)
        if part is None:
            raise KeyError(name)
        return part

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


def _results(name: str) -> ResultPage | None:
    part = JOB_KINDS.find(name)
    return part.results_page if part is not None else None


def _csv(name: str) -> Renderer | None:
    part = KINDS.find(name)
    return part.csv if part is not None else None


# Per kind: its result lines a keyset chunk at a time (web/exports.py reads them in short sessions).
RESULT_ITERATORS: Mapping[str, ResultPage] = _View(_results, JOB_KINDS.names)
CSV_RENDERERS: Mapping[str, Renderer] = _View(_csv, KINDS.names)


def require_all() -> None:
    """At app start-up: every recipe has its jobs/ and web/ parts (else MissingPartError, now)."""
    JOB_KINDS.require(kind_names())
    KINDS.require(kind_names())
