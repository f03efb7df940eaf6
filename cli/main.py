"""The `factgate` console script: one click group, each command in a module of its own."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="factgate")
def main() -> None:
    """factgate: check claims, answers and quotes with the Perplexity Decisions API, in batches."""


def _register() -> None:
    """Attach the commands. Imports are local so `factgate --help` stays fast."""
    from cli import db_cmd, server_cmd, simulator_cmd

    main.add_command(simulator_cmd.simulator)
    main.add_command(db_cmd.db)
    main.add_command(db_cmd.tokens)
    main.add_command(server_cmd.worker)
    main.add_command(server_cmd.beat)
    main.add_command(server_cmd.serve)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
