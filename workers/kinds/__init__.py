"""The worker part of every job kind: its item handlers by stage, registered by name (checks/registry.py).

`workers/run.py:execute` runs the one prologue every item shares (the tenant's client, the budget check,
the `Calls` recorder) and then `handler_for(item)`. A stage name used by one kind only finds its handler
by the stage; a stage several kinds share (`question`, the entry stage of answer and quote) finds it by the
item's job kind (`ClaimedItem.kind`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from checks.recipes import kind_names
from checks.registry import Registry
from jobs.kinds import KINDS as JOB_KINDS
from jobs.records import ClaimedItem
from workers.steps import Handler, PackHandler


@dataclass(frozen=True)
class WorkerKind:
    """A kind's handlers: one per stage of its recipe."""

    name: str
    handlers: Mapping[str, Handler]
    # Stages whose items can be answered several to a request (docs/spec.md §9), with the handler of a pack.
    packs: Mapping[str, PackHandler] = field(default_factory=dict)


KINDS: Registry[WorkerKind] = Registry("workers", "workers.kinds")


def register(kind: WorkerKind) -> WorkerKind:
    return KINDS.register(kind.name, kind)


def handler_for(item: ClaimedItem) -> Handler | None:
    """The handler of an item, or None when no registered kind handles its stage."""
    owners = [part for _, part in KINDS.items() if item.stage in part.handlers]
    if len(owners) == 1:
        return owners[0].handlers[item.stage]
    for part in owners:
        if part.name == item.kind:
            return part.handlers[item.stage]
    return None


def pack_handler_for(item: ClaimedItem) -> PackHandler | None:
    """The handler of a pack headed by `item`, or None when its stage is never packed."""
    owners = [part for _, part in KINDS.items() if item.stage in part.packs]
    kind = str(item.input.get("kind") or "")
    for part in owners:
        if len(owners) == 1 or part.name == kind:
            return part.packs[item.stage]
    return None


def require_all() -> None:
    """At worker start-up: every recipe has its jobs/ and workers/ parts (else MissingPartError, now)."""
    JOB_KINDS.require(kind_names())
    KINDS.require(kind_names())
