"""`echo`, the CLI part (cli/kinds/): one line per result."""

from __future__ import annotations

from cli.kinds import CliKind, register
from tests.kinds.echo_checks import EchoResult


def render(line: EchoResult) -> list[str]:
    return [f"{line.custom_id}: {line.echoed or line.status}"]


KIND = register(CliKind("echo", command="echo", render=render))
