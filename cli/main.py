"""The `factgate` console script: one click group, each command in a module of its own."""

from __future__ import annotations

import os

import click

from cli.errors import FactgateGroup
from config.logging import configure_logging


@click.group(cls=FactgateGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="factgate", prog_name="factgate")
def main() -> None:
    """factgate: check claims, answers and quotes with the Perplexity Decisions API, in batches.

    Without DATABASE_URL and REDIS_URL everything runs in this process (SQLite under ./instance);
    without PERPLEXITY_API_KEY the bundled simulator answers. `factgate check FILE` is the quick start.
    """
    # Structured, redacted log lines on stderr; quiet (warnings) unless FACTGATE_LOG_LEVEL says otherwise.
    # `serve`, `worker` and `beat` reconfigure at their own level.
    configure_logging(level=os.environ.get("FACTGATE_LOG_LEVEL") or "WARNING")


def _register() -> None:
    """Attach the commands. Imports are local so `factgate --help` stays fast."""
    from cli import check_cmd, db_cmd, jobs_cmd, server_cmd, simulator_cmd, tenants_cmd
    from cli.kinds import require_all

    require_all()  # every job kind prints in the terminal, or the CLI says which one does not

    main.add_command(check_cmd.check)
    main.add_command(check_cmd.ask)
    main.add_command(check_cmd.quote)
    main.add_command(jobs_cmd.submit)
    main.add_command(jobs_cmd.status)
    main.add_command(jobs_cmd.results)
    main.add_command(jobs_cmd.cancel)
    main.add_command(server_cmd.serve)
    main.add_command(server_cmd.worker)
    main.add_command(server_cmd.beat)
    main.add_command(simulator_cmd.simulator)
    main.add_command(db_cmd.db)
    main.add_command(db_cmd.tokens)
    main.add_command(tenants_cmd.tenants)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
