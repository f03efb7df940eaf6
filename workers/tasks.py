"""Celery tasks. Thin: load ids, call a handler (workers/) and jobs/ for every state change.

Which items run, and when, is decided by the dispatcher (workers/dispatcher.py): it sends each job's
picks as a small chord of `run_item` tasks whose body, `after_window`, moves the job's questions on and
finalizes the job once every item is settled. Nothing here is the source of truth: if Redis loses a
message or a chord counter, the dispatcher and the sweeper carry on from the database.

When the database (or Redis, or the broker) is unreachable — a Postgres restart takes seconds — no task
ends in a traceback. A task sent once per event (`start_job`, `after_window`) is retried by Celery with
backoff, at most INFRA_TASK_RETRIES times (about a minute and a half), then gives up with one warning line:
the sweep does the same work from the database later, so giving up loses nothing. The periodic `sweep`
logs one warning line and returns: its next tick, seconds later, is the retry. `run_item` gives its item
back (workers/outcomes.py:Transient), and `deliver_webhooks` (workers/webhooks.py) stops until the sweep
sends it again.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from celery import Task, current_app, shared_task
from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from checks.recipes import RECIPES
from config.logging import bind
from jobs.bulk_load import Built, build_staged
from jobs.control import cancel_step, cancelling_with_pending
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
from jobs.keyring import KeyringError
from jobs.purge import purge_queue, purge_step
from jobs.records import ClaimedItem
from jobs.retention import Retention
from jobs.scheduling import forget_stale_dispatches, mark_started
from jobs.stages import Step, advance_question, stalled_questions
from jobs.sweeper import expire_leases, live_job_ids, stale_validating
from jobs.webhooks import created_in
from models import session_scope, utcnow
from workers.context import WorkerContext, get_context
from workers.dispatcher import refuse_stale_dispatch
from workers.faults import describe as describe_fault
from workers.faults import is_infrastructure_fault, service_of
from workers.kinds import handler_for
from workers.outcomes import Done, Failed, Outcome, Skipped, Transient
from workers.steps import Calls, budget_skip
from workers.webhooks import send_if_due, send_soon

log = logging.getLogger("factgate.workers")

MAX_BACKOFF_S = 60.0
INFRA_RETRY_S = 5.0  # an outage of Redis or the database is usually seconds long
SETTLE_PATIENCE_S = 30.0
# A task sent once per event tries again this often after an infrastructure fault, waiting 2, 4, 8, 16, 30,
# 30 s (±25 %): about a minute and a half, longer than a database restart, and still bounded.
INFRA_TASK_RETRIES = 6
INFRA_TASK_BACKOFF_MAX_S = 30.0


def _infra_countdown_s(retries: int) -> float:
    """Wait before try `retries + 1` of a task that met an infrastructure fault (jittered, capped)."""
    base = min(INFRA_TASK_BACKOFF_MAX_S, 2.0 * float(2**retries))
    return base * (0.75 + 0.5 * random.random())  # noqa: S311 - spreading, not secrecy


def _fault_line(exc: BaseException) -> str:
    """`the database unreachable (OperationalError)`: what a log line says; the driver text (hosts, ports)
    is left out, as everywhere in the workers' warnings."""
    return f"{service_of(exc)} unreachable ({type(exc).__name__})"


def retry_or_give_up(task: Task[Any, Any], exc: Exception, what: str, backstop: str) -> None:
    """In a task's `except`: re-raise `exc` unless it is an infrastructure fault; else have Celery run the
    task again after a backoff (raises Retry) or, after INFRA_TASK_RETRIES, log one warning naming the
    `backstop` that does the work later and return, so the task ends without a traceback.

    Should the retry itself not be sent (the broker is down too), Celery rejects the message: the backstop
    still holds, since it works from the database."""
    if not is_infrastructure_fault(exc):
        raise exc
    tries = task.request.retries
    if tries >= INFRA_TASK_RETRIES:
        log.warning("%s: %s after %d tries; giving up, %s", what, _fault_line(exc), tries + 1, backstop)
        return
    countdown = _infra_countdown_s(tries)
    log.warning(
        "%s: %s; trying again in %.0f s (retry %d of %d)",
        what,
        _fault_line(exc),
        countdown,
        tries + 1,
        INFRA_TASK_RETRIES,
    )
    raise task.retry(countdown=countdown, max_retries=INFRA_TASK_RETRIES)


def advances_on_settle(stage: str) -> bool:
    """Settling an entry item of a staged kind moves it on in the same transaction (jobs/stages.py): the
    first children exist the moment it is done, so the job never looks finished in between."""
    return any(r.staged and r.entry_stage == stage for _, r in RECIPES.items())


def _ctx() -> WorkerContext:
    return get_context(current_app)


def _finalize(ctx: WorkerContext, job_id: uuid.UUID) -> bool:
    with session_scope(ctx.sessions) as session:
        ended = maybe_finalize(session, job_id)
        webhooks = created_in(session)
    send_soon(ctx, webhooks)  # the job's end (and its webhook in the outbox) has committed
    return ended


def _follow(ctx: WorkerContext, step: Step) -> None:
    """After an advance committed: its children are pending and the dispatcher sends them; once a report
    was built the job may be finished."""
    if step.reported and step.job_id is not None:
        _finalize(ctx, step.job_id)


def _advance_nested(session: Session, question_id: int) -> Step | None:
    """Advance inside the settling transaction, in a savepoint: a failure here must not lose the item's
    result; the sweeper advances the question later."""
    try:
        with session.begin_nested():
            return advance_question(session, question_id)
    except SQLAlchemyError:
        log.exception("advancing question %s failed; the sweeper will retry", question_id)
        return None


def _advance(ctx: WorkerContext, question_id: int) -> Step | None:
    """Move one question on; a database error is logged and left to the sweeper, except an unreachable
    database, which is raised: the task around this retries (or the sweep tries again) as a whole."""
    try:
        with session_scope(ctx.sessions) as session:
            return advance_question(session, question_id)
    except SQLAlchemyError as exc:
        if is_infrastructure_fault(exc):
            raise
        log.exception("advancing question %s failed; the sweeper will retry", question_id)
        return None


def advance_stalled(ctx: WorkerContext, job_id: uuid.UUID) -> bool:
    """Advance every question that waits with all its children settled (a lost chord body, a flushed
    Redis, a retry). True when some report was built."""
    with session_scope(ctx.sessions) as session:
        waiting = stalled_questions(session, job_id)
    reported = False
    for question_id in waiting:
        step = _advance(ctx, question_id)
        reported = reported or (step is not None and step.reported)
    return reported


@shared_task(name="factgate.start_job", ignore_result=True, bind=True)
def start_job(self: Task[Any, Any], job_id: str) -> None:
    """A job was stored: build its items if it is still `validating` (a large streamed submission), then
    mark it started. The dispatcher sends its items in its fair order; a job with nothing to send (every
    item already settled, or cancelled before its items were built) is finalized here.

    An unreachable database is retried with backoff (`retry_or_give_up`): every step is idempotent (a build
    happens once, under the job's advisory lock; started and finalized are conditional updates). After the
    last try nothing is lost: the sweep sends `start_job` again for a job still `validating`, the dispatcher
    sends a queued job's items, and the sweep finalizes."""
    jid = uuid.UUID(job_id)
    try:
        ctx = _ctx()
        with session_scope(ctx.sessions) as session:
            built = build_staged(session, jid)
        if built is Built.BUILT:
            log.info("job %s: items built from its staged rows", jid)
        elif built is Built.CANCELLED:
            _finish_cancel(ctx, jid)
            return
        with session_scope(ctx.sessions) as session:
            mark_started(session, [jid])
        # One line per job at INFO (items log nothing there: workers/signals.py:PER_TASK_LOGGERS).
        log.info("job %s received; the dispatcher sends its items", jid)
        _finalize(ctx, jid)
    except Exception as exc:
        retry_or_give_up(self, exc, f"start_job {jid}", "the sweep starts or finalizes the job")


def _finish_cancel(ctx: WorkerContext, job_id: uuid.UUID) -> int:
    """Skip a cancelling job's pending items (and delete the staged rows of one cancelled while
    validating) in bounded batches, each its own transaction, then build the reports of its questions and
    finalize it. Returns the rows handled. Stops early while a build holds the job: that build rolls back
    and calls this itself."""
    handled = 0
    while True:
        with session_scope(ctx.sessions) as session:
            step = cancel_step(session, job_id)
        if not step:
            break
        handled += step
    if step is None:
        return handled
    advance_stalled(ctx, job_id)
    _finalize(ctx, job_id)
    if handled:
        log.info("job %s: cancel finished, %d rows skipped or deleted in batches", job_id, handled)
    return handled


@shared_task(name="factgate.finish_cancel", ignore_result=True)
def finish_cancel(job_id: str) -> None:
    """A job was cancelled (the request only marked it `cancelling`): skip its pending items in batches of
    jobs/control.py:SKIP_BATCH and end it. Several at once share the work (`SKIP LOCKED`); the sweeper sends
    it again for a cancelling job that still has pending items (a lost message)."""
    _finish_cancel(_ctx(), uuid.UUID(job_id))


PURGE_PAUSE_MAX_S = 5.0


def purge_job(
    ctx: WorkerContext,
    job_id: uuid.UUID,
    *,
    pause: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Purge one deleted or expired job in batches of jobs/purge.py:PURGE_BATCH rows, each its own short
    transaction; returns the rows removed.

    Between batches it rests `purge_pause_ratio` times as long as the batch took (FACTGATE_PURGE_PAUSE_RATIO,
    docs/architecture.md "Purge"): a million-item purge writes over a gigabyte of WAL, and back to back its
    deletes kept one backend and the WAL busy the whole time, so a small commit of another tenant queued
    behind them. Resting in proportion to the batch's own time bounds the purge's share whatever the
    machine's speed; it only makes the purge longer, never holds a lock while resting."""
    removed = 0
    ratio = max(0.0, ctx.settings.purge_pause_ratio)
    while True:
        started = clock()
        with session_scope(ctx.sessions) as session:
            step = purge_step(session, job_id)
        if not step:
            return removed
        removed += step
        if ratio:
            pause(min(PURGE_PAUSE_MAX_S, (clock() - started) * ratio))


@shared_task(name="factgate.purge", ignore_result=True)
def purge() -> dict[str, int]:
    """Beat task (every FACTGATE_PURGE_INTERVAL_S), and sent after a delete: remove deleted jobs and purge
    those past their tenant's retention, one job at a time, in bounded batches. Two at once share the rows
    (`SKIP LOCKED`) and count each once (the roll-up moves a row in the statement that deletes it)."""
    try:
        ctx = _ctx()
        with session_scope(ctx.sessions) as session:
            queue = purge_queue(session, Retention.of(ctx.settings))
    except Exception as exc:
        if not is_infrastructure_fault(exc):
            raise
        log.warning("purge: %s; the next purge tries again", _fault_line(exc))
        return {}
    removed = 0
    for jid in [*queue.remove, *queue.expire]:
        try:
            removed += purge_job(ctx, jid)
        except SQLAlchemyError:
            log.exception("purging job %s failed; the next purge goes on from where it stopped", jid)
    if len(queue):
        log.info("purge: %d jobs, %d rows removed", len(queue), removed)
    return {"removed_jobs": len(queue.remove), "expired_jobs": len(queue.expire), "rows": removed}


@shared_task(name="factgate.after_window", ignore_result=True, bind=True)
def after_window(self: Task[Any, Any], job_id: str, question_ids: Sequence[int] = ()) -> None:
    """A window's chord closed: move its questions on (next stage or report), finalize if all is settled.

    Sent once per window, so an unreachable database is retried with backoff (`retry_or_give_up`); moving
    a question on and finalizing are idempotent. After the last try the sweep does both (it advances every
    stalled question of a live job, then finalizes)."""
    jid = uuid.UUID(job_id)
    try:
        ctx = _ctx()
        for question_id in question_ids:
            _advance(ctx, int(question_id))  # every one: a window holds the children of several questions
        _finalize(ctx, jid)
    except Exception as exc:
        retry_or_give_up(self, exc, f"after_window of job {jid}", "the sweep moves its questions on")


def _backoff_s(token: int) -> float:
    """Wait before the next try of a released item: 2, 4, 8 … s by claim number, at most a minute,
    with ±25 % jitter so items released together do not come back together."""
    base = min(MAX_BACKOFF_S, 2.0 * float(2 ** max(0, token - 1)))
    return base * (0.75 + 0.5 * random.random())  # noqa: S311 - spreading, not secrecy


def execute(ctx: WorkerContext, item: ClaimedItem) -> Outcome:
    """Run the item's handler behind the one prologue every stage shares (the budget check, the `Calls`
    that records every attempt). Never raises: every failure becomes an outcome."""
    handler = handler_for(item)
    if handler is None:
        return Failed(f"no handler for item stage {item.stage!r}")
    calls = Calls(ctx, item, ctx.client)
    try:
        try:
            calls.client, calls.own_key = ctx.client_for(item.tenant_id)
        except KeyringError as exc:
            return Failed(f"the tenant's own upstream key cannot be used: {exc}")
        skipped = budget_skip(ctx, item)
        if skipped is not None:
            return skipped
        return calls.marked(handler(ctx, item, calls))
    except Exception as exc:
        if is_infrastructure_fault(exc):
            # Redis, the database or the broker went away mid-try: the item is not at fault. The detail
            # (which names internal hosts) goes to the log; the item shows a fixed line.
            log.warning(
                "item %s of job %s: infrastructure fault, try given back", item.id, item.job_id, exc_info=True
            )
            return Transient(describe_fault(exc), list(calls.rows), retry_in_s=INFRA_RETRY_S)
        log.exception("item %s of job %s crashed", item.id, item.job_id)
        return Failed(
            f"internal error ({type(exc).__name__}); the details are in the worker log", list(calls.rows)
        )


def _apply(session: Session, item: ClaimedItem, outcome: Outcome) -> Step | None:
    """Store an outcome in the caller's transaction; the question moves on with it when it settles."""
    settled = False
    if isinstance(outcome, Done):
        settled = finish_item(session, item, outcome.output, outcome.calls)
    elif isinstance(outcome, Failed):
        settled = fail_item(session, item, outcome.error, outcome.calls, outcome.output)
    elif isinstance(outcome, Skipped):
        settled = skip_item(session, item, outcome.reason)
    else:
        wait = outcome.retry_in_s if outcome.retry_in_s is not None else _backoff_s(item.token)
        release_item(session, item, outcome.error, outcome.calls, retry_at=utcnow() + timedelta(seconds=wait))
    if settled and advances_on_settle(item.stage):
        return _advance_nested(session, item.id)
    return None


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
        for attempt in Retrying(
            retry=retry_if_exception(is_infrastructure_fault),
            wait=wait_exponential(multiplier=0.25, max=5.0),
            stop=stop_after_delay(SETTLE_PATIENCE_S),
            reraise=True,
        ):
            with attempt:
                if at_once:
                    with statement_scope(ctx.engine) as conn:
                        _apply_at_once(conn, item, outcome)
                    return None
                with session_scope(ctx.sessions) as session:
                    return _apply(session, item, outcome)
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
            log.warning("advancing question %s: %s; the sweeper will retry", spent.id, _fault_line(exc))
            return
        log.exception("advancing question %s failed; the sweeper will retry", spent.id)


@shared_task(name="factgate.run_item")
def run_item(item_id: int, epoch: int | None = None, window: Any = None) -> None:
    """Run one item. Never raises into the chord: every failure is recorded on the item.

    `epoch` is the term of the dispatcher that sent it; a message of an older term (a leader that lost its
    lock) is refused before anything is claimed (workers/dispatcher.py:refuse_stale_dispatch).

    `window` is not used: messages sent before the leader closed windows itself (workers/dispatcher.py,
    `_OpenWindow`) carried their window's Redis counter there; such a window is now closed by the job's
    finalize and the sweep, as a window of an earlier leader is.

    The item is claimed (or failed, when it has used every try), its lease is kept alive while the handler
    runs, and the outcome is stored with its calls. A transient failure gives the item back with a time
    before which it is not sent again; the dispatcher sends it when that time has passed.
    """
    _run_item(item_id, epoch)


def _run_item(item_id: int, epoch: int | None) -> None:
    ctx = _ctx()
    lease_s, max_tries = ctx.settings.lease_s, ctx.settings.max_item_attempts
    claim: ClaimedItem | Exhausted | None
    try:
        if refuse_stale_dispatch(ctx, item_id, epoch):
            return
        # The common case is one UPDATE on its own; when it misses, the other rules (cancelled, out of
        # tries, not pending) apply in a transaction.
        with statement_scope(ctx.engine) as conn:
            claim = try_claim(conn, item_id, lease_s, max_tries)
        if claim is None:
            with session_scope(ctx.sessions) as session:
                claim = claim_item(session, item_id, lease_s, max_tries)
    except Exception as exc:
        if not is_infrastructure_fault(exc):
            raise
        # Nothing was claimed; the item stays dispatched and the sweeper sends it again when that goes stale.
        log.warning("could not claim item %s: infrastructure fault", item_id, exc_info=True)
        return
    if claim is None:
        return  # already done, running elsewhere, or skipped: a duplicate delivery is a no-op
    if isinstance(claim, Exhausted):
        _after_exhausted(ctx, claim)
        return
    bind(job_id=claim.job_id)  # every log line of this item carries its job (signals unbind it)
    with ctx.leases.hold(claim.id, claim.token):
        outcome = execute(ctx, claim)
        step = settle(ctx, claim, outcome)
    if step is not None:
        try:
            _follow(ctx, step)
        except Exception as exc:
            if not is_infrastructure_fault(exc):
                raise
            # The item's outcome is stored; only the finalize after it is missing, and the sweep does it.
            log.warning("job %s: could not finalize: %s; the sweep will", step.job_id, _fault_line(exc))


@shared_task(name="factgate.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """Beat task: expired leases back to pending, lost dispatches forgotten (the dispatcher sends them
    again), `validating` jobs whose start message was lost started again, stalled questions moved on,
    finished jobs finalized, due webhooks sent.

    With the database (or Redis) unreachable it logs one warning line and returns `{}`: beat sends the next
    sweep within FACTGATE_SWEEP_INTERVAL_S, which is the retry, and a Celery retry would only pile sweeps
    up behind the outage. Every step is idempotent, so a sweep cut off half-way loses nothing."""
    try:
        return _sweep(_ctx())
    except Exception as exc:
        if not is_infrastructure_fault(exc):
            raise
        log.warning("sweep: %s; the next sweep tries again", _fault_line(exc))
        return {}


def _sweep(ctx: WorkerContext) -> dict[str, int]:
    with session_scope(ctx.sessions) as session:
        expired = expire_leases(session)
        forgotten = forget_stale_dispatches(session, ctx.settings.dispatch_stale_s)
        restart = stale_validating(session, ctx.settings.dispatch_stale_s)
        cancels = cancelling_with_pending(session)
        jobs = live_job_ids(session)
    for jid in restart:  # after commit (the SKIP LOCKED rows were only held for the query)
        log.warning("job %s is still validating: start_job sent again", jid)
        try:
            start_job.delay(str(jid))
        except Exception:
            log.exception("could not send start_job for job %s; the next sweep tries again", jid)
    for jid in cancels:  # usually the view's own message is already at work; batches are shared
        try:
            finish_cancel.delay(str(jid))
        except Exception:
            log.exception("could not send finish_cancel for job %s; the next sweep tries again", jid)
    finalized = 0
    for jid in jobs:
        if _finalize(ctx, jid):
            finalized += 1
            continue
        if advance_stalled(ctx, jid) and _finalize(ctx, jid):
            finalized += 1
    webhooks = send_if_due(ctx)
    return {
        "expired": expired,
        "forgotten": forgotten,
        "finalized": finalized,
        "live": len(jobs),
        "restarted": len(restart),
        "cancels": len(cancels),
        "webhooks_due": int(webhooks),
    }
