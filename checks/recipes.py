"""The pure half of a job kind: its `Recipe` (name, title, stages, rows, options, contracts, CSV columns).

One recipe per kind, one module per recipe in `checks/kinds/`; `RECIPES` holds them by name. Everything
that used to list the kinds by hand (the API's `kind` choices, the OpenAPI enums, intake, the pages' kind
filter, the CLI's `--kind`) reads this registry. The other layers' parts of a kind (planning and reports in
`jobs/kinds/`, handlers in `workers/kinds/`, pages and CSV in `web/kinds/`, terminal output in
`cli/kinds/`) are registered under the same name; `tests/unit/test_recipes.py` checks that every layer has
a part for every recipe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import JsonValue

from checks.ndjson import RowLine
from checks.registry import Registry

# The upstream endpoints a stage's first call may use: each is a rate-limit scope the scheduler dispatches in.
ENDPOINTS = ("decisions", "agent", "search")


class KindOptions(Protocol):
    """Validated options: `as_dict` is what the job row stores (JSON; each kind's parser fixes its keys)."""

    def as_dict(self) -> dict[str, JsonValue]: ...


@dataclass(frozen=True)
class RowLimits:
    """The deployment's row limits (from Settings; checks/ does not read configuration itself), and the
    format the submission names for its rows (`input_format`, for a kind that reads more than one; "auto":
    the kind decides)."""

    max_rows: int
    max_claim_bytes: int
    input_format: str = "auto"


@dataclass(frozen=True)
class StageSpec:
    """One stage of a kind: the `items.stage` name and the endpoint of its items' first call (the scope the
    scheduler dispatches them in; a stage that calls nothing upstream still names one to be paced in)."""

    name: str
    endpoint: str = "decisions"
    # False: its handler sends nothing upstream (the citations answer: it only splits). The dispatcher
    # sends such items several to a task (`stages_sending_nothing`), so a re-run of rows the verdict store
    # answers costs a task per several rows, not per row.
    sends: bool = True


@dataclass(frozen=True)
class Recipe:
    """What a job kind is, independent of storage and transport.

    `stages[0]` is the stage of the items intake creates (one per row, or per row and mode); a kind with more
    than one stage moves each entry item on through the stage machine (jobs/stages.py), which creates the
    later stages' items as children. `rows_from_lines` / `rows_from_items` raise
    `checks.claims.ClaimsValidationError` (or a subclass) whose errors name the line or item and field;
    `parse_options` raises `checks.options.OptionsError` naming the option.
    """

    name: str
    title: str
    order: int  # where the kind is listed (API enums, the pages' filter, the CLI's choices)
    stages: tuple[StageSpec, ...]
    parse_options: Callable[[Mapping[str, Any]], KindOptions]
    rows_from_lines: Callable[[Iterable[RowLine], RowLimits], Sequence[Any]]
    rows_from_items: Callable[[Sequence[object], RowLimits], Sequence[Any]]
    result_line: type[Any]  # the pydantic model of one results line
    summary: type[Any]  # the pydantic model of the job summary
    report: type[Any] | None = None  # the pydantic model of one entry item's report (staged kinds)
    csv_columns: tuple[str, ...] = ()  # the results CSV's header
    # A row's fields: those it must have and all it may have (a CSV body's header is checked against them).
    row_required: tuple[str, ...] = ("id",)
    row_fields: tuple[str, ...] = ("id",)
    # The options `parse_options` accepts (the New job page sends a kind only these) and one sentence for
    # the page's kind hint.
    option_names: frozenset[str] = frozenset()
    description: str = ""
    # JSON Schemas of one row and of the options, and the OpenAPI component names they are published under
    # (kinds sharing a shape share a name). Documentation: the parsers above are the authority.
    row_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    options_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    schema_names: tuple[str, str] = ("", "")  # (row, options); "" = <Title>Row / <Title>Options
    # Why a CSV body cannot hold this kind's rows (nested fields), or None when it can: a CSV body of such a
    # kind is refused at line 1 with this reason (checks/csv_rows.py), and the New job page offers no CSV.
    csv_refusal: str | None = None

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError(f"recipe {self.name!r} has no stage")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"recipe {self.name!r} lists a stage twice: {names}")
        for stage in self.stages:
            if stage.endpoint not in ENDPOINTS:
                raise ValueError(f"recipe {self.name!r}: stage {stage.name!r} endpoint {stage.endpoint!r}")

    @property
    def row_schema_name(self) -> str:
        return self.schema_names[0] or f"{self.name.title()}Row"

    @property
    def options_schema_name(self) -> str:
        return self.schema_names[1] or f"{self.name.title()}Options"

    @property
    def entry_stage(self) -> str:
        return self.stages[0].name

    @property
    def staged(self) -> bool:
        """More than one stage: entry items are advanced by the stage machine and carry a report."""
        return len(self.stages) > 1

    def endpoint_of(self, stage: str) -> str:
        for spec in self.stages:
            if spec.name == stage:
                return spec.endpoint
        raise KeyError(f"recipe {self.name!r} has no stage {stage!r}")


RECIPES: Registry[Recipe] = Registry("checks", "checks.kinds")


def register(recipe: Recipe) -> Recipe:
    """Called by each `checks/kinds/<kind>.py` at import."""
    return RECIPES.register(recipe.name, recipe)


def recipe_for(name: str) -> Recipe:
    return RECIPES.get(name)


def stages_sending_nothing() -> frozenset[str]:
    """The item stages whose handlers never call upstream, in every kind that has a stage of that name (a
    name is shared across kinds, `question`; one kind's sending stage keeps the name out)."""
    sends: dict[str, bool] = {}
    for _, recipe in RECIPES.items():
        for spec in recipe.stages:
            sends[spec.name] = sends.get(spec.name, False) or spec.sends
    return frozenset(name for name, sending in sends.items() if not sending)


def kind_names() -> tuple[str, ...]:
    """Every registered kind, by `order` (claims, answer, quote, then any other)."""
    return tuple(sorted(RECIPES.names(), key=lambda n: (RECIPES.get(n).order, n)))


def stage_endpoint(stage: str) -> str | None:
    """The endpoint of a stage of any kind (stages shared by kinds, like `question`, are told apart by the
    kind; this answers only when all kinds using the name agree)."""
    found = {
        r.endpoint_of(stage) for r in (RECIPES.get(n) for n in RECIPES) if stage in {s.name for s in r.stages}
    }
    return found.pop() if len(found) == 1 else None
