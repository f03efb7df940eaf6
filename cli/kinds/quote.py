"""The `quote` kind in the terminal: `factgate quote`, the quote or the closest (cli/render.py)."""

from __future__ import annotations

from cli.kinds import CliKind, register
from cli.render import quote_lines

KIND = register(CliKind("quote", command="quote", render=quote_lines))
