"""What an item handler decided; the task applies it through jobs/ in one transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobs.records import CallRow


@dataclass(frozen=True)
class Done:
    output: dict[str, Any]
    calls: list[CallRow] = field(default_factory=list)


@dataclass(frozen=True)
class Failed:
    error: str
    calls: list[CallRow] = field(default_factory=list)
    output: dict[str, Any] | None = None


@dataclass(frozen=True)
class Transient:
    """Upstream was unavailable even after the client's retries: try the item again later."""

    error: str
    calls: list[CallRow] = field(default_factory=list)


@dataclass(frozen=True)
class Skipped:
    reason: str


Outcome = Done | Failed | Transient | Skipped
