"""What an item handler decided; the task applies it through jobs/ in one transaction.

An item's output is open here: its kind gives it its shape (the stage records of checks/*_contracts.py, a
claim's `workers/claims.py:ClaimOutput`) and jobs/ reads it back by that shape, so an outcome only carries it
to the item's JSON column. `object`, not `Any`: nothing in between may read a key without saying what it
expects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from checks.contracts import StageRecord
from jobs.records import CallRow


@dataclass(frozen=True)
class Done:
    output: dict[str, object]
    calls: list[CallRow] = field(default_factory=list)


@dataclass(frozen=True)
class Failed:
    error: str
    calls: list[CallRow] = field(default_factory=list)
    output: dict[str, object] | None = None


def failed_with(error: str, calls: list[CallRow], record: StageRecord) -> Failed:
    """A failure that keeps what its stage had recorded so far, with the `error` added to it (the report
    shows both)."""
    return Failed(error, calls, record.model_copy(update={"error": error}).dump())


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
