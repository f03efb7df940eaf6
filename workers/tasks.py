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
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from celery import Task, current_app, shared_task
from sqlalchemy.exc import SQLAlchemyError

from clients.backoff import TASK_BACKOFF
from jobs.bulk_load import Built, build_staged
from jobs.control import cancel_step, cancelling_with_pending
from jobs.packs import free_orphaned_members
from jobs.purge import purge_queue, purge_step
from jobs.retention import Retention
from jobs.scheduling import forget_stale_dispatches, mark_started
from jobs.sweeper import expire_leases, live_job_ids, stale_validating
from models import session_scope
from workers.context import WorkerContext, get_context
from workers.faults import fault_line, is_infrastructure_fault
from workers.run import advance_stalled, finalize_job, run_item_now, run_items_now
from workers.webhooks import send_if_due

log = logging.getLogger("factgate.workers")

# A task sent once per event tries again this often after an infrastructure fault (TASK_BACKOFF: 2, 4, 8,
# 16, 30, 30 s ±25 %): about a minute and a half, longer than a database restart, and still bounded.
INFRA_TASK_RETRIES = 6


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
        log.warning("%s: %s after %d tries; giving up, %s", what, fault_line(exc), tries + 1, backstop)
        return
    countdown = TASK_BACKOFF.wait_s(tries)
    log.warning(
        "%s: %s; trying again in %.0f s (retry %d of %d)",
        what,
        fault_line(exc),
        countdown,
        tries + 1,
        INFRA_TASK_RETRIES,
    )
    raise task.retry(countdown=countdown, max_retries=INFRA_TASK_RETRIES)


def _ctx() -> WorkerContext:
    return get_context(current_app)


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
        finalize_job(ctx, jid)
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
    finalize_job(ctx, job_id)
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
    docs/architecture.md "Deleting, retention and the purge"): a large purge writes a lot of WAL, and back to
    back its deletes would keep one backend and the WAL busy the whole time, so a small commit of another
    tenant would queue behind them (docs/profiles/README.md, "The purge's rest"). Resting in proportion to
    the batch's own time bounds the purge's share whatever the machine's speed; it only makes the purge
    longer, never holds a lock while resting."""
    removed = 0
    ratio = max(0.0, ctx.settings.purge_pause_ratio)
    while True:
        started = clock()
        with session_scope(ctx.sessions) as session:
            step = purge_step(session, job_id, retention=Retention.of(ctx.settings))
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
        log.warning("purge: %s; the next purge tries again", fault_line(exc))
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
        # Those still waiting, of every question the window touched: most moved on with the task that
        # settled their last item, and are read here, not locked and rebuilt one by one.
        advance_stalled(ctx, jid, [int(q) for q in question_ids])
        finalize_job(ctx, jid)
    except Exception as exc:
        retry_or_give_up(self, exc, f"after_window of job {jid}", "the sweep moves its questions on")


@shared_task(name="factgate.run_item")
def run_item(item_id: int, epoch: int | None = None, window: Any = None) -> None:
    """Run one item. Never raises into the chord: every failure is recorded on the item.

    `epoch` is the term of the dispatcher that sent it; a message of an older term (a leader that lost its
    lock) is refused before anything is claimed (workers/leadership.py:refuse_stale_dispatch).

    `window` is not used: messages sent before the leader closed windows itself (workers/windows.py,
    `OpenWindow`) carried their window's Redis counter there; such a window is now closed by the job's
    finalize and the sweep, as a window of an earlier leader is.

    The item is claimed (or failed, when it has used every try), its lease is kept alive while the handler
    runs, and the outcome is stored with its calls. A transient failure gives the item back with a time
    before which it is not sent again; the dispatcher sends it when that time has passed.
    """
    run_item_now(_ctx(), item_id, epoch)


@shared_task(name="factgate.run_items")
def run_items(item_ids: list[int], epoch: int | None = None) -> None:
    """Run several items whose stage calls nothing upstream (the citations answer), sent together by the
    leader (workers/publishing.py): each as `run_item` would, their outcomes stored in one transaction.
    Never raises: every failure is recorded on its item."""
    run_items_now(_ctx(), [int(i) for i in item_ids], epoch)


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
        log.warning("sweep: %s; the next sweep tries again", fault_line(exc))
        return {}


def _sweep(ctx: WorkerContext) -> dict[str, int]:
    with session_scope(ctx.sessions) as session:
        expired = expire_leases(session)
        free_orphaned_members(session)  # members left waiting by a head that ended without them
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
        if finalize_job(ctx, jid):
            finalized += 1
            continue
        if advance_stalled(ctx, jid) and finalize_job(ctx, jid):
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
