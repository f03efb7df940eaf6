"""Sending the webhook outbox: the `factgate.deliver_webhooks` task and the sender threads it wakes.

Sent right after a job's end commits (workers/run.py:finalize_job) and by every sweep while something is due
(the backstop for a lost message, and what makes retries happen: a retry is simply a row whose next try has
come). Senders claim due deliveries one at a time, round robin across tenants (jobs/webhooks.py), sign each
attempt with the tenant's secret (checks/webhooks.py; Standard Webhooks), send it (clients/webhooks.py:
checked, pinned address, no redirects, one deadline for the whole attempt) and record what came back. Any
exception on the way is a failed attempt recorded with its reason. The secret and the signature are never
logged.

Isolation: the task itself only wakes this process's `SenderPool` — FACTGATE_WEBHOOK_SENDERS threads of
their own, started with the worker (workers/bootsteps.py) — and returns at once. So however slow the
receivers, webhooks never hold the task pool's threads, which run items; at worst every sender waits out
its deadline (FACTGATE_WEBHOOK_TIMEOUT_S). Where no pool runs (a task run in place), the task sends itself,
for at most TASK_BUDGET_S.

An unreachable database (or Redis) stops a sender's round with one warning line, not a traceback, and no
Celery retry: the sweep, every FACTGATE_SWEEP_INTERVAL_S, sends another task while something is due, and a
delivery claimed when the fault came is sent again once its hold runs out (same `webhook-id`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from celery import Celery, current_app, shared_task

from checks.webhooks import sign
from clients.webhooks import MAX_ERROR_CHARS, send
from config import Settings
from jobs.keyring import Keyring, KeyringError, keyring_for
from jobs.webhooks import (
    AttemptResult,
    ClaimedDelivery,
    any_due,
    claim_due,
    record_attempt,
    tenant_webhook_secret,
)
from models import session_scope, utcnow
from workers.api import DELIVER_WEBHOOKS
from workers.context import WorkerContext, get_context
from workers.faults import is_infrastructure_fault, service_of

log = logging.getLogger("factgate.workers")

DELIVER_TASK = DELIVER_WEBHOOKS  # workers/api.py: what other layers enqueue by name
# A task run without sender threads sends for at most this long, then leaves the rest to the next one.
TASK_BUDGET_S = 60.0
# Sender threads also look for due deliveries this often unwoken (a lost wake waits no longer than this).
IDLE_CHECK_S = 60.0


def _lock_s(settings: Settings) -> float:
    """How long a sender holds a delivery: longer than one attempt can take (its deadline, plus signing
    and recording)."""
    return settings.webhook_timeout_s + 30.0


def _keyring(settings: Settings) -> Keyring | None:
    try:
        return keyring_for(settings)
    except KeyringError:
        return None


def attempt(ctx: WorkerContext, claimed: ClaimedDelivery, keyring: Keyring | None) -> str:
    """Sign and send one claimed delivery, record the attempt; returns the delivery's new status."""
    settings = ctx.settings
    started = utcnow()
    try:
        result = _try(ctx, claimed, keyring)
    except Exception as exc:
        if is_infrastructure_fault(exc):
            raise  # nothing can be recorded either; the hold runs out and it is tried again
        # Whatever else went wrong is this attempt's failure, recorded like any other: the delivery moves
        # on to its next try (and ends failed after its window) instead of being claimed again at once.
        log.warning("webhook %s attempt %s raised", claimed.webhook_id, claimed.attempt, exc_info=True)
        result = AttemptResult(None, f"{type(exc).__name__} while sending: {exc}"[:MAX_ERROR_CHARS], None)
    with session_scope(ctx.sessions) as session:
        status = record_attempt(
            session,
            claimed,
            result,
            started_at=started,
            retry_base_s=settings.webhook_retry_base_s,
            retry_for_s=settings.webhook_retry_for_s,
        )
    outcome = (
        f"HTTP {result.status_code}" if result.status_code is not None else (result.error or "no response")
    )
    log.info("webhook %s attempt %s: %s; now %s", claimed.webhook_id, claimed.attempt, outcome, status)
    return status


def _try(ctx: WorkerContext, claimed: ClaimedDelivery, keyring: Keyring | None) -> AttemptResult:
    settings = ctx.settings
    secret: str | None = None
    error: str | None = None
    if keyring is None:
        error = "no encryption key to keep the tenant's webhook secret with: set FACTGATE_ENCRYPTION_KEYS"
    else:
        try:
            with session_scope(ctx.sessions) as session:
                secret = tenant_webhook_secret(session, claimed.tenant_id, keyring)
        except KeyringError as exc:
            error = f"the tenant's webhook secret cannot be used: {exc}"
    if secret is None:
        return AttemptResult(None, error or "the tenant has no webhook secret", None)
    timestamp = int(time.time())
    body = claimed.body.encode("utf-8")
    headers = {
        "webhook-id": claimed.webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, claimed.webhook_id, timestamp, body),
    }
    sent = send(
        claimed.url,
        body,
        headers,
        allow_private=settings.webhook_allow_private,
        connect_timeout_s=settings.webhook_connect_timeout_s,
        timeout_s=settings.webhook_timeout_s,
    )
    return AttemptResult(sent.status_code, sent.error, sent.duration_ms, permanent=sent.permanent)


def deliver_due(
    ctx: WorkerContext, *, budget_s: float | None = TASK_BUDGET_S, stop: threading.Event | None = None
) -> int:
    """Send due deliveries one at a time until none is due, the budget (None: no budget) is spent or `stop`
    is set; returns attempts. Each is claimed just before it is sent, so a hold never waits behind another
    delivery's attempt."""
    keyring = _keyring(ctx.settings)
    lock_s, retry_for_s = _lock_s(ctx.settings), ctx.settings.webhook_retry_for_s
    deadline = None if budget_s is None else time.monotonic() + budget_s
    attempts = 0
    try:
        while (deadline is None or time.monotonic() < deadline) and not (stop and stop.is_set()):
            with session_scope(ctx.sessions) as session:
                batch = claim_due(session, lock_s=lock_s, limit=1, retry_for_s=retry_for_s)
            if not batch:
                break
            for claimed in batch:
                try:
                    attempt(ctx, claimed, keyring)
                except Exception as exc:
                    if is_infrastructure_fault(exc):
                        raise  # the next delivery would meet the same fault: stop (below)
                    # Recording failed: the hold runs out, and the delivery is tried again (or given up).
                    log.exception("webhook delivery %s: attempt %s failed", claimed.id, claimed.attempt)
                attempts += 1
    except Exception as exc:
        if not is_infrastructure_fault(exc):
            raise
        service, kind = service_of(exc), type(exc).__name__
        log.warning("webhooks: %s unreachable (%s); the next sweep sends what is due", service, kind)
    return attempts


class SenderPool:
    """This worker process's webhook senders: `size` threads that sleep until woken (`wake`), then send
    until nothing is due. Every thread wakes on a wake; two threads never hold the same delivery."""

    def __init__(self, ctx: WorkerContext, size: int) -> None:
        self.ctx = ctx
        self.size = size
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> SenderPool:
        for n in range(self.size):
            thread = threading.Thread(target=self._run, name=f"factgate-webhooks-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._wake.set()  # what was due while no worker ran
        return self

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop taking deliveries; one being sent ends within its deadline, or its hold runs out."""
        self._stop.set()
        self._wake.set()
        until = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, until - time.monotonic()))
        self._threads.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(IDLE_CHECK_S)
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                deliver_due(self.ctx, budget_s=None, stop=self._stop)
            except Exception:
                log.exception("webhook sender: a round failed; the next wake tries again")
                self._stop.wait(1.0)


_pools: dict[int, SenderPool] = {}
_pools_lock = threading.Lock()


def start_senders(app: Celery) -> SenderPool:
    """Start this process's sender threads for `app` (workers/bootsteps.py:WebhookSendersStep)."""
    ctx = get_context(app)
    real: Celery = getattr(app, "_get_current_object", lambda: app)()
    with _pools_lock:
        pool = _pools.get(id(real))
        if pool is None:
            pool = _pools[id(real)] = SenderPool(ctx, ctx.settings.webhook_senders).start()
    return pool


def stop_senders(app: Celery) -> None:
    real: Celery = getattr(app, "_get_current_object", lambda: app)()
    with _pools_lock:
        pool = _pools.pop(id(real), None)
    if pool is not None:
        pool.stop()


def senders_of(app: Celery) -> SenderPool | None:
    real: Celery = getattr(app, "_get_current_object", lambda: app)()
    with _pools_lock:
        return _pools.get(id(real))


@shared_task(name=DELIVER_TASK, ignore_result=True)
def deliver_webhooks() -> int:
    """Wake this process's senders (see the module docstring); without them, send in place. Returns the
    attempts made here (0 when the senders were woken)."""
    pool = senders_of(current_app)
    if pool is not None:
        pool.wake()
        return 0
    return deliver_due(get_context(current_app))


def send_soon(ctx: WorkerContext, delivery_ids: list[uuid.UUID] | None = None) -> None:
    """Ask a worker to send due webhooks now (after a commit that made some due); a lost message only waits
    for the next sweep."""
    if delivery_ids is not None and not delivery_ids:
        return
    try:
        deliver_webhooks.apply_async()
    except Exception:
        log.warning("could not enqueue webhook delivery; the next sweep sends them", exc_info=True)


def send_if_due(ctx: WorkerContext) -> bool:
    """The sweep's backstop: enqueue a delivery task when something is due. Never fails the sweep."""
    try:
        with session_scope(ctx.sessions) as session:
            due = any_due(session)
    except Exception as exc:
        # An outage is one line; anything else keeps its traceback.
        log.warning(
            "could not look for due webhooks; the next sweep looks again",
            exc_info=not is_infrastructure_fault(exc),
        )
        return False
    if due:
        send_soon(ctx)
    return due
