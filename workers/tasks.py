"""Celery tasks. Thin: load ids, call a handler (workers/) and jobs/ for every state change.

Fan-out goes in windows of bounded chords: `start_job` enqueues the first windows, and each chord's
body (`after_window`) finalizes the job if every item is terminal, otherwise enqueues the next
window. Nothing here is the source of truth: if Redis loses a message or a chord counter, the
sweeper re-dispatches from the database.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from celery import Task, chord, current_app, shared_task
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from config.logging import bind
from jobs.dispatch import forget_stale_dispatches, in_flight, mark_started, next_window
from jobs.finalize import maybe_finalize
from jobs.flows import Step, advance_question, stalled_questions
from jobs.items import claim_item, fail_item, finish_item, release_item, skip_item
from jobs.records import ClaimedItem
from jobs.sweeper import expire_leases, live_job_ids
from models import session_scope
from workers.answers import handle_answer_question, handle_investigation, handle_sentence
from workers.claims import handle_claim
from workers.context import WorkerContext, get_context
from workers.flows import question_handler
from workers.outcomes import Done, Failed, Outcome, Skipped, Transient
from workers.quotes import handle_compare, handle_quote_question, handle_result

log = logging.getLogger("factgate.workers")

INITIAL_WINDOWS = 2
Handler = Callable[[WorkerContext, ClaimedItem], Outcome]
HANDLERS: dict[str, Handler] = {
    "claim": handle_claim,
    "question": question_handler({"answer": handle_answer_question, "quote": handle_quote_question}),
    "sentence": handle_sentence,
    "investigation": handle_investigation,
    "result": handle_result,
    "compare": handle_compare,
}
# Settling one of these moves its question on in the same transaction (jobs/flows.py): the first
# children exist the moment the question is done, so the job never looks finished in between.
ADVANCE_ON_SETTLE = frozenset({"question"})


def _ctx() -> WorkerContext:
    return get_context(current_app)


def dispatch(ctx: WorkerContext, job_id: uuid.UUID, windows: int) -> int:
    """Enqueue up to `windows` chords of the job's next undispatched items; returns items enqueued."""
    sent = 0
    for _ in range(windows):
        with session_scope(ctx.sessions) as session:
            ids = next_window(session, job_id, ctx.settings.chord_size)
        if not ids:
            break
        chord(run_item.si(i) for i in ids)(after_window.si(str(job_id)))
        sent += len(ids)
    return sent


def send_children(ctx: WorkerContext, question_id: int, child_ids: list[int]) -> None:
    """Chords of a question's new children whose body moves the question on again."""
    size = max(1, ctx.settings.chord_size)
    for start in range(0, len(child_ids), size):
        chunk = child_ids[start : start + size]
        chord(run_item.si(i) for i in chunk)(advance_question_task.si(question_id))


def _follow(ctx: WorkerContext, step: Step) -> None:
    """After an advance committed: send its children, or try to finalize once a report was built."""
    if step.spawned:
        send_children(ctx, step.question_id, step.spawned)
    if step.reported and step.job_id is not None:
        with session_scope(ctx.sessions) as session:
            maybe_finalize(session, step.job_id)


def _advance_nested(session: Session, question_id: int) -> Step | None:
    """Advance inside the settling transaction, in a savepoint: a failure here must not lose the item's
    result; the sweeper advances the question later."""
    try:
        with session.begin_nested():
            return advance_question(session, question_id)
    except SQLAlchemyError:
        log.exception("advancing question %s failed; the sweeper will retry", question_id)
        return None


def advance_stalled(ctx: WorkerContext, job_id: uuid.UUID) -> bool:
    """Advance every question that waits with all its children settled (a lost chord body, a flushed
    Redis, a retry). True when some report was built."""
    with session_scope(ctx.sessions) as session:
        waiting = stalled_questions(session, job_id)
    reported = False
    for question_id in waiting:
        try:
            with session_scope(ctx.sessions) as session:
                step = advance_question(session, question_id)
        except SQLAlchemyError:
            log.exception("advancing question %s failed; the sweeper will retry", question_id)
            continue
        if step.spawned:
            send_children(ctx, question_id, step.spawned)
        reported = reported or step.reported
    return reported


@shared_task(name="factgate.advance_question", ignore_result=True)
def advance_question_task(question_id: int) -> None:
    """Chord body of a question's children: next stage, or the report (and maybe the job's end)."""
    ctx = _ctx()
    try:
        with session_scope(ctx.sessions) as session:
            step = advance_question(session, question_id)
    except SQLAlchemyError:
        log.exception("advancing question %s failed; the sweeper will retry", question_id)
        return
    _follow(ctx, step)


@shared_task(name="factgate.start_job", ignore_result=True)
def start_job(job_id: str) -> None:
    """Mark the job started and enqueue its first windows (never inside the HTTP request)."""
    ctx = _ctx()
    jid = uuid.UUID(job_id)
    with session_scope(ctx.sessions) as session:
        mark_started(session, jid)
    if not dispatch(ctx, jid, INITIAL_WINDOWS):
        with session_scope(ctx.sessions) as session:
            maybe_finalize(session, jid)


@shared_task(name="factgate.after_window", ignore_result=True)
def after_window(job_id: str) -> None:
    """A chord closed: finalize if everything is terminal, else keep the pipeline full."""
    ctx = _ctx()
    jid = uuid.UUID(job_id)
    with session_scope(ctx.sessions) as session:
        if maybe_finalize(session, jid):
            return
    if advance_stalled(ctx, jid):
        with session_scope(ctx.sessions) as session:
            if maybe_finalize(session, jid):
                return
    dispatch(ctx, jid, 1)


@shared_task(name="factgate.run_item", bind=True, max_retries=None)
def run_item(self: Task, item_id: int) -> None:  # type: ignore[type-arg]
    """Run one item. Never raises into the chord: every failure is recorded on the item."""
    ctx = _ctx()
    with session_scope(ctx.sessions) as session:
        claimed = claim_item(session, item_id, ctx.settings.lease_s)
    if claimed is None:
        return  # already done, running elsewhere, or skipped: a duplicate delivery is a no-op
    bind(job_id=claimed.job_id)  # every log line of this item carries its job (signals unbind it)
    handler = HANDLERS.get(claimed.stage)
    outcome: Outcome
    if handler is None:
        outcome = Failed(f"no handler for item stage {claimed.stage!r}")
    else:
        try:
            outcome = handler(ctx, claimed)
        except Exception as exc:  # a bug must not wedge the job: record it on the item
            log.exception("item %s of job %s crashed", item_id, claimed.job_id)
            outcome = Failed(f"internal error: {type(exc).__name__}: {exc}")
    retries = int(self.request.retries or 0)
    if isinstance(outcome, Transient) and retries >= ctx.settings.task_max_retries:
        outcome = Failed(f"{outcome.error} (gave up after {retries + 1} tries)", outcome.calls)
    step: Step | None = None
    with session_scope(ctx.sessions) as session:
        settled = False
        if isinstance(outcome, Done):
            settled = finish_item(session, claimed, outcome.output, outcome.calls)
        elif isinstance(outcome, Failed):
            settled = fail_item(session, claimed, outcome.error, outcome.calls, outcome.output)
        elif isinstance(outcome, Skipped):
            settled = skip_item(session, claimed, outcome.reason)
        else:
            release_item(session, claimed, outcome.error, outcome.calls)
        if settled and claimed.stage in ADVANCE_ON_SETTLE:
            step = _advance_nested(session, claimed.id)
    if step is not None:
        _follow(ctx, step)
    if isinstance(outcome, Transient):
        countdown = min(60.0, 2.0 * (2**retries))
        raise self.retry(countdown=countdown)


@shared_task(name="factgate.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """Beat task: re-drive expired leases and lost messages, finalize finished jobs."""
    ctx = _ctx()
    stale_s = float(ctx.settings.lease_s)
    with session_scope(ctx.sessions) as session:
        expired = expire_leases(session)
        jobs = live_job_ids(session)
    redispatched = finalized = 0
    for jid in jobs:
        with session_scope(ctx.sessions) as session:
            forget_stale_dispatches(session, jid, stale_s)
            if maybe_finalize(session, jid):
                finalized += 1
                continue
        if advance_stalled(ctx, jid):
            with session_scope(ctx.sessions) as session:
                if maybe_finalize(session, jid):
                    finalized += 1
                    continue
        with session_scope(ctx.sessions) as session:
            busy = in_flight(session, jid)
        if busy == 0:
            with session_scope(ctx.sessions) as session:
                mark_started(session, jid)  # a lost start_job message leaves the job queued
            redispatched += dispatch(ctx, jid, INITIAL_WINDOWS)
    return {"expired": expired, "redispatched": redispatched, "finalized": finalized, "live": len(jobs)}
