"""The life of one item in a worker, behind the `run_item` task (workers/tasks.py): claim it (or, for a
pack's head, its pack: workers/packs.py), run its stage's handler behind the one prologue every stage
shares, store the outcome through jobs/ riding out a short database outage, and move its question on.

Nothing here decides which items run: the dispatcher sends them. Never raises into the task: every
failure is recorded on the item.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import timedelta

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from checks.recipes import RECIPES
from clients.backoff import ITEM_BACKOFF, SETTLE_BACKOFF, patiently
from config.logging import bind
from jobs.driver import DriverConnection, statement_scope
from jobs.finalize import maybe_finalize
from jobs.items import (
    Exhausted,
    claim_item,
    fail_item,
    fail_item_at_once,
    finish_item,
    finish_item_at_once,
    release_item,
    settles_at_once,
    skip_item,
    try_claim,
)
from jobs.records import ClaimedItem
from jobs.stages import Step, advance_question, advance_questions, stalled_questions
from jobs.webhooks import created_in
from models import session_scope, utcnow
from workers.context import WorkerContext
from workers.faults import describe as describe_fault
from workers.faults import fault_line, is_infrastructure_fault
from workers.kinds import handler_for
from workers.leadership import refuse_stale_dispatch
from workers.outcomes import Done, Failed, Outcome, Skipped, Transient
from workers.packs import packs_of, run_pack, take_members
from workers.steps import INFRA_RETRY_S, behind_prologue
from workers.store_answers import store_answers
from workers.webhooks import send_soon

log = logging.getLogger("factgate.workers")


SETTLE_PATIENCE_S = 30.0


def advances_on_settle(stage: str) -> bool:
    """Settling an entry item of a staged kind moves it on in the same transaction (jobs/stages.py): the
    first children exist the moment it is done, so the job never looks finished in between."""
    return any(r.staged and r.entry_stage == stage for _, r in RECIPES.items())


def finalize_job(ctx: WorkerContext, job_id: uuid.UUID) -> bool:
    with session_scope(ctx.sessions) as session:
        ended = maybe_finalize(session, job_id)
        webhooks = created_in(session)
    send_soon(ctx, webhooks)  # the job's end (and its webhook in the outbox) has committed
    return ended


def _follow(ctx: WorkerContext, step: Step) -> None:
    """After an advance committed: its children are pending and the dispatcher sends them; once a report
    was built the job may be finished."""
    if step.reported and step.job_id is not None:
        finalize_job(ctx, step.job_id)


def _advance_nested(ctx: WorkerContext, session: Session, question_id: int) -> Step | None:
    """Advance inside the settling transaction, in a savepoint: a failure here must not lose the item's
    result; the sweeper advances the question later."""
    try:
        with session.begin_nested():
            return advance_question(session, question_id, store_answers(ctx))
    except SQLAlchemyError:
        log.exception("advancing question %s failed; the sweeper will retry", question_id)
        return None


def _advance_together(ctx: WorkerContext, session: Session, question_ids: Sequence[int]) -> list[Step]:
    """`_advance_nested` for several questions in one savepoint; if that fails, each in its own, so one
    question the database refuses leaves the others moved on."""
    if not question_ids:
        return []
    try:
        with session.begin_nested():
            return advance_questions(session, question_ids, store_answers(ctx))
    except SQLAlchemyError:
        log.warning("advancing %d questions together failed; one by one", len(question_ids), exc_info=True)
    return [step for q in question_ids if (step := _advance_nested(ctx, session, q)) is not None]


def advance(ctx: WorkerContext, question_id: int) -> Step | None:
    """Move one question on; a database error is logged and left to the sweeper, except an unreachable
    database, which is raised: the task around this retries (or the sweep tries again) as a whole."""
    try:
        with session_scope(ctx.sessions) as session:
            return advance_question(session, question_id, store_answers(ctx))
    except SQLAlchemyError as exc:
        if is_infrastructure_fault(exc):
            raise
        log.exception("advancing question %s failed; the sweeper will retry", question_id)
        return None


def advance_stalled(ctx: WorkerContext, job_id: uuid.UUID, among: Sequence[int] | None = None) -> bool:
    """Advance every question (of those `among`, when given) that waits with all its children settled (a
    lost chord body, a flushed Redis, a retry). True when some report was built."""
    with session_scope(ctx.sessions) as session:
        waiting = stalled_questions(session, job_id, among)
    reported = False
    for question_id in waiting:
        step = advance(ctx, question_id)
        reported = reported or (step is not None and step.reported)
    return reported


def execute(ctx: WorkerContext, item: ClaimedItem) -> Outcome:
    """Run the item's handler behind the one prologue every stage shares (workers/steps.py). Never raises:
    every failure becomes an outcome."""
    handler = handler_for(item)
    if handler is None:
        return Failed(f"no handler for item stage {item.stage!r}")
    return behind_prologue(
        ctx, item, lambda calls: calls.marked(handler(ctx, item, calls)), f"item {item.id}"
    )


def _apply(ctx: WorkerContext, session: Session, item: ClaimedItem, outcome: Outcome) -> Step | None:
    """Store an outcome in the caller's transaction; the question moves on with it when it settles."""
    if _store(session, item, outcome) and advances_on_settle(item.stage):
        return _advance_nested(ctx, session, item.id)
    return None


def _store(session: Session, item: ClaimedItem, outcome: Outcome) -> bool:
    """Store an outcome in the caller's transaction; True when the item settled."""
    settled = False
    if isinstance(outcome, Done):
        settled = finish_item(session, item, outcome.output, outcome.calls)
    elif isinstance(outcome, Failed):
        settled = fail_item(session, item, outcome.error, outcome.calls, outcome.output)
    elif isinstance(outcome, Skipped):
        settled = skip_item(session, item, outcome.reason)
    else:
        # Without a wait of its own, by its claim number (ITEM_BACKOFF): items released together come back
        # apart.
        wait = outcome.retry_in_s if outcome.retry_in_s is not None else ITEM_BACKOFF.wait_s(item.token - 1)
        release_item(session, item, outcome.error, outcome.calls, retry_at=utcnow() + timedelta(seconds=wait))
    return settled


def _at_once(ctx: WorkerContext, item: ClaimedItem, outcome: Outcome) -> bool:
    """Whether the outcome can be stored in one statement (jobs/items.py:`settles_at_once`): a result or
    a failure of an item that moves nothing else on. Most items settle this way, in one round trip."""
    return (
        isinstance(outcome, Done | Failed)
        and not advances_on_settle(item.stage)
        and settles_at_once(ctx.engine.dialect.name, item)
    )


def _apply_at_once(session: Connection | DriverConnection, item: ClaimedItem, outcome: Outcome) -> None:
    if isinstance(outcome, Done):
        finish_item_at_once(session, item, outcome.output, outcome.calls)
    elif isinstance(outcome, Failed):
        fail_item_at_once(session, item, outcome.error, outcome.calls, outcome.output)


def settle(ctx: WorkerContext, item: ClaimedItem, outcome: Outcome) -> Step | None:
    """Store the outcome, riding out a short database outage; never lose the record of what was billed.

    The common outcome is one statement without a transaction around it (`_at_once`); the others are one
    transaction. A connection fault is retried with backoff for up to SETTLE_PATIENCE_S (the lease is still
    being renewed meanwhile). Any other database error — a value the database refuses — must not wedge the
    item either: its calls are recorded and the item fails with a clear error, in a transaction of its own.
    """
    at_once = _at_once(ctx, item, outcome)
    try:
        for attempt in patiently(is_infrastructure_fault, SETTLE_BACKOFF, SETTLE_PATIENCE_S):
            with attempt:
                if at_once:
                    with statement_scope(ctx.engine) as conn:
                        _apply_at_once(conn, item, outcome)
                    return None
                with session_scope(ctx.sessions) as session:
                    return _apply(ctx, session, item, outcome)
    except Exception as exc:
        if is_infrastructure_fault(exc):
            log.error(
                "item %s: could not store its outcome; its lease will expire and it runs again", item.id
            )
            return None
        log.exception("item %s: the database refused its outcome; failing it with its calls", item.id)
        error = f"the result could not be stored ({type(exc).__name__}); the details are in the worker log"
        try:
            with session_scope(ctx.sessions) as session:
                fail_item(session, item, error, outcome.calls if not isinstance(outcome, Skipped) else ())
        except Exception:
            log.exception("item %s: could not record the failure either; its lease will expire", item.id)
    return None


def _after_exhausted(ctx: WorkerContext, spent: Exhausted) -> None:
    """An item failed at claim for having used every try: its question moves on as after any failure."""
    if not advances_on_settle(spent.stage):
        return
    try:
        with session_scope(ctx.sessions) as session:
            step = advance_question(session, spent.id)
        _follow(ctx, step)
    except SQLAlchemyError as exc:
        if is_infrastructure_fault(exc):
            log.warning("advancing question %s: %s; the sweeper will retry", spent.id, fault_line(exc))
            return
        log.exception("advancing question %s failed; the sweeper will retry", spent.id)


def _claim(ctx: WorkerContext, item_id: int, epoch: int | None) -> ClaimedItem | Exhausted | None:
    """The item, claimed for this worker (or out of tries); None when a message of an older reign asked,
    the item is not pending (done, running elsewhere, skipped: a duplicate delivery is a no-op), or the
    database is unreachable: nothing was claimed, the item stays dispatched and the sweeper sends it again
    when that goes stale."""
    lease_s, max_tries = ctx.settings.lease_s, ctx.settings.max_item_attempts
    try:
        if refuse_stale_dispatch(ctx, item_id, epoch):
            return None
        # The common case is one UPDATE on its own; when it misses, the other rules (cancelled, out of
        # tries, not pending) apply in a transaction.
        with statement_scope(ctx.engine) as conn:
            claim = try_claim(conn, item_id, lease_s, max_tries)
        if claim is None:
            with session_scope(ctx.sessions) as session:
                return claim_item(session, item_id, lease_s, max_tries)
        return claim
    except Exception as exc:
        if not is_infrastructure_fault(exc):
            raise
        log.warning("could not claim item %s: infrastructure fault", item_id, exc_info=True)
        return None


def _finalize_after(ctx: WorkerContext, job_id: uuid.UUID) -> None:
    try:
        finalize_job(ctx, job_id)
    except Exception as exc:
        if not is_infrastructure_fault(exc):
            raise
        # The outcomes are stored; only the finalize after them is missing, and the sweep does it.
        log.warning("job %s: could not finalize: %s; the sweep will", job_id, fault_line(exc))


def run_item_now(ctx: WorkerContext, item_id: int, epoch: int | None) -> None:
    """Claim, run and settle one item (the `run_item` task's body)."""
    claim = _claim(ctx, item_id, epoch)
    if isinstance(claim, Exhausted):
        _after_exhausted(ctx, claim)
    elif claim is not None:
        _run_claimed(ctx, claim)


def _run_claimed(ctx: WorkerContext, claim: ClaimedItem) -> None:
    bind(job_id=claim.job_id)  # every log line of this item carries its job (signals unbind it)
    if packs_of(claim) and _ran_as_pack(ctx, claim):
        return
    with ctx.leases.hold(claim.id, claim.token):
        outcome = execute(ctx, claim)
        step = settle(ctx, claim, outcome)
    if step is not None and step.reported and step.job_id is not None:
        _finalize_after(ctx, step.job_id)


def _settle_together(ctx: WorkerContext, done: Sequence[tuple[ClaimedItem, Outcome]]) -> list[Step]:
    """Every outcome in one transaction (each question moving on in a savepoint of its own, as `settle`
    does it); when that transaction fails, each on its own through `settle`, which rides out a short
    outage and fails an item whose outcome the database refuses."""
    try:
        with session_scope(ctx.sessions) as session:
            moving = [
                item.id
                for item, outcome in done
                if _store(session, item, outcome) and advances_on_settle(item.stage)
            ]
            return _advance_together(ctx, session, moving)
    except Exception:
        log.warning("storing %d outcomes together failed; storing each on its own", len(done), exc_info=True)
    return [step for item, outcome in done if (step := settle(ctx, item, outcome)) is not None]


def run_items_now(ctx: WorkerContext, item_ids: Sequence[int], epoch: int | None) -> None:
    """Claim, run and settle several items of a stage that calls nothing upstream (the `run_items` task's
    body): each claimed and run as `run_item_now` would, their outcomes stored together, and each job they
    finished finalized once. An item out of tries, or one that packs, takes its own path; every lease is
    kept alive from its claim until its item is settled."""
    claims: list[ClaimedItem] = []
    alone: list[ClaimedItem] = []
    steps: list[Step] = []
    with ExitStack() as held:
        for item_id in item_ids:
            claim = _claim(ctx, item_id, epoch)
            if isinstance(claim, Exhausted):
                _after_exhausted(ctx, claim)
            elif claim is not None:
                held.enter_context(ctx.leases.hold(claim.id, claim.token))
                (alone if packs_of(claim) else claims).append(claim)
        if claims:
            bind(job_id=claims[0].job_id)
            steps = _settle_together(ctx, [(claim, execute(ctx, claim)) for claim in claims])
        for claim in alone:
            _run_claimed(ctx, claim)
    for job_id in sorted({s.job_id for s in steps if s.reported and s.job_id is not None}, key=str):
        _finalize_after(ctx, job_id)


def _ran_as_pack(ctx: WorkerContext, head: ClaimedItem) -> bool:
    """Claim the head's pack members and run them in one request (workers/packs.py). False when the head
    has no pending member left: it runs as a single item. An unreachable database gives the head back."""
    try:
        members = take_members(ctx, head)
    except Exception as exc:
        if not is_infrastructure_fault(exc):
            raise
        log.warning("could not claim the pack of item %s: infrastructure fault", head.id, exc_info=True)
        with ctx.leases.hold(head.id, head.token):
            settle(ctx, head, Transient(describe_fault(exc), [], retry_in_s=INFRA_RETRY_S))
        return True
    if not members:
        return False
    run_pack(ctx, head, members)
    return True
