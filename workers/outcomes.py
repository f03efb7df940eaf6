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
    """Upstream (or our own infrastructure) was unavailable even after the client's retries: try the item
    again later — after `retry_in_s` if given, else after a backoff that grows with its tries. A try with
    no `calls` sent nothing upstream and does not count against the item's tries."""

    error: str
    calls: list[CallRow] = field(default_factory=list)
    retry_in_s: float | None = None


@dataclass(frozen=True)
class Skipped:
    reason: str


Outcome = Done | Failed | Transient | Skipped


# --- a pack: several items answered by one request (jobs/packs.py) ---------------------------------------


@dataclass(frozen=True)
class AskAlone:
    """A pack's member whose answers did not come back: it leaves the pack and is asked on its own."""

    error: str


Member = Done | Failed | AskAlone


@dataclass(frozen=True)
class PackAnswered:
    """The pack's request answered: what became of each member, in the pack's order, and the calls."""

    members: list[Member]
    calls: list[CallRow] = field(default_factory=list)


# A pack that was not answered ends as one outcome for every member: failed, tried again later, skipped.
PackOutcome = PackAnswered | Failed | Transient | Skipped
