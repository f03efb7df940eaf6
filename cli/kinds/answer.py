"""The `answer` kind in the terminal: `factgate ask`, the checked answer (cli/render.py:answer_lines)."""

from __future__ import annotations

from cli.kinds import CliKind, register
from cli.render import answer_lines

KIND = register(CliKind("answer", command="ask", render=answer_lines))
