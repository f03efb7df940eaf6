"""A registry of one layer's part of every job kind, keyed by the kind's name.

A job kind is split by layer (docs/architecture.md, "Adding a job kind"): its pure recipe in `checks/kinds/`,
its state changes in `jobs/kinds/`, its handlers in `workers/kinds/`, its pages and CSV in `web/kinds/`, its
terminal output in `cli/kinds/`. Each of those folders holds one `Registry`; every module in the folder
registers its kind when imported, and the folder is imported whole on first use (`discover`), so adding a
kind adds modules and edits no table. `require` is how a process says at start-up which layers it needs:
a kind missing a part fails there, loudly, instead of on its first job.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class MissingPartError(LookupError):
    """A kind has no part in some layer (a module was not written, or not registered)."""


class Registry(Generic[T]):
    """One layer's parts, by kind name. `package` is the folder whose modules register into it."""

    def __init__(self, layer: str, package: str) -> None:
        self.layer = layer
        self.package = package
        self._parts: dict[str, T] = {}
        self._loaded = False
        self._lock = threading.RLock()

    def register(self, name: str, part: T) -> T:
        """Add a kind's part; a second part under the same name is a mistake (two modules, one kind)."""
        with self._lock:
            existing = self._parts.get(name)
            if existing is not None and existing is not part:
                raise ValueError(f"{self.layer}: job kind {name!r} is registered twice")
            self._parts[name] = part
        return part

    def unregister(self, name: str) -> None:
        """Drop a kind's part (a test that registered a toy kind cleans up after itself)."""
        with self._lock:
            self._parts.pop(name, None)

    def discover(self) -> None:
        """Import every module of the folder once (each registers its kind)."""
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            pkg = importlib.import_module(self.package)
            for info in pkgutil.iter_modules(pkg.__path__):
                if not info.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{info.name}")
            self._loaded = True

    def get(self, name: str) -> T:
        self.discover()
        try:
            return self._parts[name]
        except KeyError:
            raise MissingPartError(f"{self.layer}: no part for job kind {name!r} ({self.package})") from None

    def find(self, name: str) -> T | None:
        self.discover()
        return self._parts.get(name)

    def names(self) -> tuple[str, ...]:
        self.discover()
        return tuple(self._parts)

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self._parts

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def items(self) -> list[tuple[str, T]]:
        self.discover()
        return list(self._parts.items())

    def require(self, names: Iterable[str]) -> None:
        """Raise MissingPartError naming every kind of `names` this layer has no part for."""
        self.discover()
        missing = [n for n in names if n not in self._parts]
        if missing:
            raise MissingPartError(
                f"{self.layer}: no part for job kind(s) {', '.join(missing)}: add a module to {self.package}/"
            )
