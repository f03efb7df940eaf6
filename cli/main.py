"""The `factgate` console script: one click group, each command in a module of its own."""

from __future__ import annotations

import importlib
import os
import sys

import click

from cli.errors import FactgateGroup
from config.logging import configure_logging

# Each command's module is imported when the command runs (or `--help` lists them all): `factgate status`
# then loads what status needs, not Flask and the simulator for `factgate simulator` or every job kind's
# parsers. The table is the one place the commands are named.
COMMANDS: dict[str, str] = {
    "check": "cli.check_cmd:check",
    "ask": "cli.check_cmd:ask",
    "quote": "cli.check_cmd:quote",
    "citations": "cli.citations_cmd:citations",
    "submit": "cli.jobs_cmd:submit",
    "status": "cli.jobs_cmd:status",
    "results": "cli.jobs_cmd:results",
    "cancel": "cli.jobs_cmd:cancel",
    "jobs": "cli.jobs_cmd:jobs",
    "serve": "cli.server_cmd:serve",
    "worker": "cli.server_cmd:worker",
    "beat": "cli.server_cmd:beat",
    "simulator": "cli.simulator_cmd:simulator",
    "db": "cli.db_cmd:db",
    "tokens": "cli.db_cmd:tokens",
    "tenants": "cli.tenants_cmd:tenants",
}


class LazyGroup(FactgateGroup):
    """A group whose commands are imported by name when first asked for (click's documented lazy-loading
    pattern). The commands that print or read job kinds check, once loaded, that every kind has its CLI
    part (`cli.kinds.require_all`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module_name), attr)
        if "cli.kinds" in sys.modules:  # the command prints or reads job kinds: all must have their part
            from cli.kinds import require_all

            require_all()
        if not isinstance(command, click.Command):  # pragma: no cover - a wrong table entry
            raise TypeError(f"{target} is not a click command")
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="factgate", prog_name="factgate")
def main() -> None:
    """factgate: check claims, answers and quotes with the Perplexity Decisions API, in batches.

    Without DATABASE_URL and REDIS_URL everything runs in this process (SQLite under ./instance);
    without PERPLEXITY_API_KEY the bundled simulator answers. `factgate check FILE` is the quick start.
    """
    # Structured, redacted log lines on stderr; quiet (warnings) unless FACTGATE_LOG_LEVEL says otherwise.
    # `serve`, `worker` and `beat` reconfigure at their own level.
    configure_logging(level=os.environ.get("FACTGATE_LOG_LEVEL") or "WARNING")


if __name__ == "__main__":  # pragma: no cover
    main()
