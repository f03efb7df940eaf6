"""`echo`, the pure part (checks/kinds/): rows of {"id", "text"}, no options but priority, one stage."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, NamedTuple

from checks.claims import ClaimsValidationError
from checks.contracts import Contract, ItemStatusName, StoredContract
from checks.ndjson import RowError, RowLine
from checks.options import OptionsError
from checks.recipes import Recipe, RowLimits, StageSpec, register


class EchoRow(NamedTuple):
    id: str
    text: str


@dataclass(frozen=True)
class EchoOptions:
    priority: str = "batch"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_options(raw: Mapping[str, Any]) -> EchoOptions:
    unknown = sorted(set(raw) - {"priority"})
    if unknown:
        raise OptionsError(unknown[0], "unknown option (allowed: priority)")
    priority = str(raw.get("priority") or "batch")
    if priority not in ("batch", "interactive"):
        raise OptionsError("priority", "must be batch or interactive")
    return EchoOptions(priority)


def _rows(
    objs: Iterable[tuple[int, object]], unit: Literal["line", "item"], limits: RowLimits
) -> list[EchoRow]:
    rows: list[EchoRow] = []
    errors: list[RowError] = []
    for number, obj in objs:
        if len(rows) + len(errors) >= limits.max_rows:
            errors.append(RowError(None, None, f"too many rows, the limit is {limits.max_rows}", unit))
            break
        if not isinstance(obj, dict):
            errors.append(RowError(number, None, "must be a JSON object", unit))
            continue
        for name in ("id", "text"):
            if not isinstance(obj.get(name), str) or not obj[name]:
                errors.append(RowError(number, name, "must be a non-empty string", unit))
                break
        else:
            rows.append(EchoRow(obj["id"], obj["text"]))
    if errors:
        raise ClaimsValidationError(errors)
    return rows


def _decoded(lines: Iterable[RowLine]) -> Iterator[tuple[int, object]]:
    """(line number, object) of each row: NDJSON text decoded, a CSV body's records (already objects)
    as they are; blank lines and the lines that start no CSV record (None) are skipped."""
    for number, line in enumerate(lines, 1):
        if isinstance(line, dict):
            yield number, line
        elif line is not None and line.strip():
            yield number, json.loads(line)


def rows_from_lines(lines: Iterable[RowLine], limits: RowLimits) -> list[EchoRow]:
    return _rows(_decoded(lines), "line", limits)


def rows_from_items(items: Sequence[object], limits: RowLimits) -> list[EchoRow]:
    return _rows(enumerate(items, 1), "item", limits)


class EchoResult(Contract):
    custom_id: str
    status: ItemStatusName
    text: str
    echoed: str | None = None


class EchoSummary(StoredContract):
    kind: Literal["echo"] = "echo"
    rows: int
    echoed: int
    request_counts: dict[str, int] | None = None


RECIPE = register(
    Recipe(
        name="echo",
        title="Echo",
        order=99,
        stages=(StageSpec("echo", "decisions"),),
        parse_options=parse_options,
        rows_from_lines=rows_from_lines,
        rows_from_items=rows_from_items,
        result_line=EchoResult,
        summary=EchoSummary,
        csv_columns=("custom_id", "status", "echoed"),
        row_required=("id", "text"),
        row_fields=("id", "text"),
        option_names=frozenset({"priority"}),
        description="echo each text back",
    )
)
