"""The CLI part of every job kind: the terminal command that runs one, and how its results print.

`factgate check | ask | quote` wait for a job and print its result lines with the kind's `render`; each
results line of the API is first read into the kind's result-line contract (checks/kinds/), so renderers
read attributes and a line the server shaped differently fails with the field's path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from checks.contracts import Contract
from checks.recipes import kind_names, recipe_for
from checks.registry import Registry


@dataclass(frozen=True)
class CliKind:
    """`command` is the terminal command of the kind; `render` prints one of its result lines."""

    name: str
    command: str
    render: Callable[[Any], list[str]]


KINDS: Registry[CliKind] = Registry("cli", "cli.kinds")


def register(kind: CliKind) -> CliKind:
    return KINDS.register(kind.name, kind)


def cli_kind(name: str) -> CliKind:
    return KINDS.get(name)


def read_line(kind: str, line: Mapping[str, Any]) -> Contract:
    """One results line of the API as the kind's contract; fields this version does not know (a newer
    server's) are ignored, not refused (`Contract.read`)."""
    model: type[Contract] = recipe_for(kind).result_line
    return model.read(line)


def render_line(kind: str, line: Mapping[str, Any]) -> list[str]:
    return cli_kind(kind).render(read_line(kind, line))


def require_all() -> None:
    """At CLI start-up: every recipe has its cli/ part (else MissingPartError, now)."""
    KINDS.require(kind_names())
