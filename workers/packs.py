"""Run a pack: the head's claim takes its pending members, one request answers them all, each is settled
as the item it is (jobs/packs.py has the state changes, docs/spec.md §9 the request).

Thin, like the item path in workers/tasks.py: the same prologue (the tenant's client, the budget check),
the kind's pack handler, one transaction to store every member's outcome, riding out a short database
outage the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import timedelta

from sqlalchemy.orm import Session

from clients.backoff import ITEM_BACKOFF, SETTLE_BACKOFF, patiently
from jobs.packs import MemberResult, claim_members, settle_pack
from jobs.records import CallRow, ClaimedItem
from models import session_scope, utcnow
from workers.context import WorkerContext
from workers.faults import is_infrastructure_fault
from workers.kinds import pack_handler_for
from workers.outcomes import AskAlone, Done, Failed, PackAnswered, PackOutcome, Skipped
from workers.steps import behind_prologue

log = logging.getLogger("factgate.workers")

SETTLE_PATIENCE_S = 30.0


def packs_of(item: ClaimedItem) -> bool:
    """Whether `item` may head a pack: its job packs (`pack_size` above 1) and its stage packs."""
    return int(item.options.get("pack_size") or 1) > 1 and pack_handler_for(item) is not None


def take_members(ctx: WorkerContext, head: ClaimedItem) -> list[ClaimedItem]:
    """Claim the head's pending members for this worker (none: the head runs as a single item)."""
    settings = ctx.settings
    with session_scope(ctx.sessions) as session:
        return claim_members(session, head, settings.lease_s, settings.max_item_attempts)


def execute_pack(ctx: WorkerContext, items: Sequence[ClaimedItem]) -> PackOutcome:
    """The pack handler behind the prologue every try has (workers/steps.py); never raises."""
    head = items[0]
    handler = pack_handler_for(head)
    if handler is None:
        return Failed(f"no pack handler for item stage {head.stage!r}")
    return behind_prologue(
        ctx, head, lambda calls: calls.marked_pack(handler(ctx, items, calls)), f"pack of item {head.id}"
    )


def member_results(items: Sequence[ClaimedItem], outcome: PackOutcome) -> list[MemberResult]:
    """What the outcome means for each item of the pack."""
    if isinstance(outcome, PackAnswered):
        results: list[MemberResult] = []
        for item, member in zip(items, outcome.members, strict=True):
            if isinstance(member, Done):
                results.append(MemberResult(item, "done", member.output))
            elif isinstance(member, Failed):
                results.append(MemberResult(item, "failed", member.output, member.error))
            else:
                assert isinstance(member, AskAlone)
                results.append(MemberResult(item, "alone", error=member.error, retry_at=utcnow()))
        return results
    if isinstance(outcome, Failed):
        return [MemberResult(item, "failed", outcome.output, outcome.error) for item in items]
    if isinstance(outcome, Skipped):
        return [MemberResult(item, "skipped", error=outcome.reason) for item in items]
    # Without a wait of its own, by the head's claim number, as a single item (workers/tasks.py).
    wait = outcome.retry_in_s if outcome.retry_in_s is not None else ITEM_BACKOFF.wait_s(items[0].token - 1)
    retry_at = utcnow() + timedelta(seconds=wait)
    return [MemberResult(item, "released", error=outcome.error, retry_at=retry_at) for item in items]


def _settle(
    ctx: WorkerContext, items: Sequence[ClaimedItem], outcome: PackOutcome, results: list[MemberResult]
) -> None:
    calls: list[CallRow] = outcome.calls if not isinstance(outcome, Skipped) else []
    try:
        for attempt in patiently(is_infrastructure_fault, SETTLE_BACKOFF, SETTLE_PATIENCE_S):
            with attempt, session_scope(ctx.sessions) as session:
                _store(session, items[0], results, calls)
    except Exception as exc:
        if is_infrastructure_fault(exc):
            log.error(
                "pack of item %s: could not store its outcome; its leases expire and it runs again",
                items[0].id,
            )
            return
        log.exception("pack of item %s: the database refused its outcome; failing its items", items[0].id)
        error = f"the result could not be stored ({type(exc).__name__}); the details are in the worker log"
        failed = [MemberResult(r.item, "failed", error=error) for r in results]
        try:
            with session_scope(ctx.sessions) as session:
                _store(session, items[0], failed, calls)
        except Exception:
            log.exception(
                "pack of item %s: could not record the failure either; its leases expire", items[0].id
            )


def _store(
    session: Session, head: ClaimedItem, results: list[MemberResult], calls: Sequence[CallRow]
) -> None:
    settle_pack(session, head, results, calls)


def run_pack(ctx: WorkerContext, head: ClaimedItem, members: Sequence[ClaimedItem]) -> None:
    """Hold every item's lease while the pack's request runs, then store each item's outcome."""
    items = [head, *members]
    with ExitStack() as stack:
        for item in items:
            stack.enter_context(ctx.leases.hold(item.id, item.token))
        outcome = execute_pack(ctx, items)
        _settle(ctx, items, outcome, member_results(items, outcome))
