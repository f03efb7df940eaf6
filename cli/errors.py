"""How the CLI fails: one line on stderr, `error: …`, and an exit code a script can branch on.

- 2: the caller must change something (a bad file, option, token or job id; click usage errors);
- 1: something at run time went wrong (server unreachable, server error, a job that failed);
- 3: the job completed but a figure missed its `--fail-under` / `--fail-over` gate (cli/gate.py);
- 130: interrupted (Ctrl-C).
No tracebacks: an unexpected exception is one line too (FACTGATE_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import IO, Any

import click

from config.logging import redact, secrets_from_env

EXIT_RUNTIME = 1
EXIT_INPUT = 2
EXIT_GATE = 3
EXIT_INTERRUPTED = 130


def one_line(text: str, limit: int = 600) -> str:
    """Whitespace collapsed, secrets removed, long text cut: errors must stay one readable line."""
    collapsed = " ".join(redact(str(text), secrets_from_env()).split())
    return collapsed if len(collapsed) <= limit else collapsed[: limit - 1].rstrip() + "…"


class CliError(click.ClickException):
    """A runtime failure (exit 1) shown as one `error:` line."""

    exit_code = EXIT_RUNTIME

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.message}", err=True)


class InputError(CliError):
    """Something the caller must fix: a bad file, option, token or job id (exit 2)."""

    exit_code = EXIT_INPUT


class FactgateGroup(click.Group):
    """The root group: turns every failure into one line and an exit code (see module doc)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            click.echo(f"error: {one_line(exc.format_message())}{hint}", err=True)
            sys.exit(EXIT_INPUT)
        except click.ClickException as exc:
            if isinstance(exc, CliError):
                exc.show()
            else:
                click.echo(f"error: {one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:  # `factgate results … | head`: the reader left; not an error
            sys.stderr.close()
            sys.exit(0)
        except Exception as exc:
            if os.environ.get("FACTGATE_DEBUG"):
                traceback.print_exc()
            else:
                click.echo(
                    f"error: unexpected {type(exc).__name__}: {one_line(str(exc))} "
                    "(set FACTGATE_DEBUG=1 to see the traceback)",
                    err=True,
                )
            sys.exit(EXIT_RUNTIME)
        sys.exit(rv if isinstance(rv, int) else 0)
