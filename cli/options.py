"""Options several commands declare alike: a file the command writes, and how a waiting command is resumed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

REPORT_HELP = "Where to write the HTML report (embedded; default instance/reports/)."


def output_file(*decls: str, help: str) -> Callable[[F], F]:
    """An option naming a file the command writes (a file, not a folder; unset: the command's default)."""
    return click.option(*decls, type=click.Path(dir_okay=False, path_type=Path), default=None, help=help)


def server_options(server_help: str, token_help: str, /) -> Callable[[F], F]:
    """`--server URL` and `--token TOKEN`, with the command's own help for each."""

    def decorate(fn: F) -> F:
        fn = click.option("--token", default=None, metavar="TOKEN", help=token_help)(fn)
        return click.option("--server", default=None, metavar="URL", help=server_help)(fn)

    return decorate


def resume_options(fn: F) -> F:
    """`--resume JOB` and `--report PATH`, of the commands that submit a job and wait for it."""
    report = output_file("--report", "report_path", help=REPORT_HELP)
    resume = click.option(
        "--resume", "resume_id", default=None, metavar="JOB", help="Continue waiting for JOB."
    )
    return resume(report(fn))
