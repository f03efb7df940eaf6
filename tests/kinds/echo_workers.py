"""`echo`, the worker part (workers/kinds/): one handler, no upstream call — it shouts the text back."""

from __future__ import annotations

from jobs.records import ClaimedItem
from workers.context import WorkerContext
from workers.kinds import WorkerKind, register
from workers.outcomes import Done, Outcome
from workers.steps import Calls


def handle_echo(ctx: WorkerContext, item: ClaimedItem, calls: Calls) -> Outcome:
    return Done({"echoed": str(item.input["text"]).upper()}, calls.rows)


KIND = register(WorkerKind("echo", {"echo": handle_echo}))
