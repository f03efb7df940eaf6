"""`--fail-under`, `--fail-over` and `--junit-xml` of `check`, `citations` and `ask`: a job as a CI step.

The gate reads the finished job's summary (checks/gates.py names each kind's figures) and exits with
`EXIT_GATE` (3), after one line per figure that missed, so a build can tell "the answers got worse" (3)
from "the file is wrong" (2) and "the server is down" (1). A name the kind does not have is a usage error
(2), found before anything is submitted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from checks.gates import Direction, Gate, figures, misses, parse_gate
from cli.errors import EXIT_GATE
from cli.junit import write_junit
from cli.kinds import read_line
from cli.options import output_file
from cli.target import Target
from clients.factgate_http import JobBody

# The two gate options by direction: the word their help uses, and a note the help ends with.
GATES: tuple[tuple[Direction, str, str], ...] = (
    ("over", "above", ""),
    ("under", "below", "; docs/cli.md lists the names"),
)

Values = tuple[str, ...]
Gates = tuple[Gate, ...]


def gate_options(kind: str) -> Callable[[Any], Any]:
    """The three options, for a command whose jobs are of `kind`."""

    def parse(
        direction: Direction,
    ) -> Callable[[click.Context, click.Parameter, tuple[str, ...]], tuple[Gate, ...]]:
        def callback(
            _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
        ) -> tuple[Gate, ...]:
            try:
                return tuple(parse_gate(v, direction, kind) for v in values)
            except ValueError as exc:
                raise click.BadParameter(str(exc)) from None

        return callback

    def decorate(fn: Any) -> Any:
        fn = output_file(
            "--junit-xml",
            "junit_path",
            help="Also write the results as JUnit XML here (one testcase per row) for CI test reporters.",
        )(fn)
        for direction, above_or_below, note in GATES:
            fn = click.option(
                f"--fail-{direction}",
                f"fail_{direction}",
                multiple=True,
                metavar="NAME=X",
                callback=parse(direction),
                help=f"Exit 3 when the job's figure NAME is {above_or_below} X (repeatable{note}).",
            )(fn)
        return fn

    return decorate


def gate_lines(kind: str, job: JobBody, gates: Sequence[Gate]) -> list[str]:
    """What missed (empty: every gate is met, or there is none)."""
    if not gates:
        return []
    summary = job.get("summary")
    return misses(gates, figures(kind, summary if isinstance(summary, dict) else {}))


def write_report(target: Target, kind: str, job: JobBody, path: Path, missed: Sequence[str]) -> None:
    """The job's results as JUnit XML at `path`."""
    lines = (read_line(kind, line) for line in target.client.results(str(job["id"])))
    write_junit(path, kind, job, lines, gate_lines=missed)
    click.echo(f"junit xml: {path}", err=True)


def enforce(missed: Sequence[str], gates: Sequence[Gate]) -> None:
    """Exit 3 after one line per figure that missed; say so when every gate is met."""
    if not gates:
        return
    if not missed:
        click.echo(f"gate met: {', '.join(g.option.removeprefix('--') for g in gates)}", err=True)
        return
    for line in missed:
        click.echo(f"gate failed: {line}", err=True)
    raise click.exceptions.Exit(EXIT_GATE)
