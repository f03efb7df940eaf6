"""`factgate simulator`: placeholder until the simulator lands (issue 3)."""

from __future__ import annotations

import click


@click.command()
def simulator() -> None:
    """Run the offline Perplexity API simulator."""
    raise click.ClickException("the simulator is not built yet")
