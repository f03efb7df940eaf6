"""The `claims` kind in the terminal: `factgate check`, one table row per claim (cli/render.py)."""

from __future__ import annotations

from checks.kinds.claims import ClaimResult
from cli.kinds import CliKind, register
from cli.render import claims_table


def render(line: ClaimResult) -> list[str]:
    """One claim on its own (the check command prints the whole table with `claims_table`)."""
    return claims_table([line], list(line.results))[1:]


KIND = register(CliKind("claims", command="check", render=render))
