"""The Redis Lua scripts, kept as `.lua` files beside the modules that run them and read once per process.

A script in its own file is read, diffed and linted as Lua; the module that runs it names it by its file
(`workers/<name>.lua`). `register_script` hashes the text and runs it by EVALSHA, loading it again on
NOSCRIPT (a Redis restarted or flushed), so the text is all a module keeps.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def lua(name: str) -> str:
    """The text of `workers/<name>.lua`."""
    return files("workers").joinpath(f"{name}.lua").read_text(encoding="utf-8")
