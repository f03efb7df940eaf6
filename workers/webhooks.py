"""Sending the webhook outbox: the `factgate.deliver_webhooks` task.

Sent right after a job's end commits (workers/tasks.py:_finalize) and by every sweep while something is due
(the backstop for a lost message, and what makes retries happen: a retry is simply a row whose next try has
come). The task claims due deliveries (jobs/webhooks.py), signs each attempt with the tenant's secret
(checks/webhooks.py; Standard Webhooks), sends it (clients/webhooks.py: checked, pinned address, no
redirects, short timeouts) and records what came back. The secret and the signature are never logged.

An unreachable database (or Redis) stops the task with one warning line, not a traceback, and no Celery
retry: the sweep, every FACTGATE_SWEEP_INTERVAL_S, sends another task while something is due, and a
delivery claimed when the fault came is sent again once its hold runs out (same `webhook-id`).
"""

from __future__ import annotations

import logging
import time
import uuid

from celery import current_app, shared_task

from checks.webhooks import sign
from clients.webhooks import send
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
BATCH = 10
# One task sends for at most this long, then leaves the rest to the next one (the sweep sends another).
TASK_BUDGET_S = 60.0


def _lock_s(settings: Settings) -> float:
    """How long a sender holds a delivery: longer than one attempt can take."""
    return settings.webhook_connect_timeout_s + settings.webhook_timeout_s + 30.0


def _keyring(settings: Settings) -> Keyring | None:
    try:
        return keyring_for(settings)
    except KeyringError:
        return None


def attempt(ctx: WorkerContext, claimed: ClaimedDelivery, keyring: Keyring | None) -> str:
    """Sign and send one claimed delivery, record the attempt; returns the delivery's new status."""
    settings = ctx.settings
    started = utcnow()
    result: AttemptResult
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
        result = AttemptResult(None, error or "the tenant has no webhook secret", None)
    else:
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
        result = AttemptResult(sent.status_code, sent.error, sent.duration_ms, permanent=sent.permanent)
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


def deliver_due(ctx: WorkerContext, *, budget_s: float = TASK_BUDGET_S) -> int:
    """Send due deliveries, a batch at a time, until none is due or the budget is spent; returns attempts."""
    keyring = _keyring(ctx.settings)
    deadline = time.monotonic() + budget_s
    attempts = 0
    try:
        while time.monotonic() < deadline:
            with session_scope(ctx.sessions) as session:
                batch = claim_due(session, lock_s=_lock_s(ctx.settings), limit=BATCH)
            if not batch:
                break
            for claimed in batch:
                try:
                    attempt(ctx, claimed, keyring)
                except Exception as exc:
                    if is_infrastructure_fault(exc):
                        raise  # the rest of the batch would meet the same fault: stop (below)
                    # The hold runs out and the delivery is tried again; nothing else waits for it.
                    log.exception("webhook delivery %s: attempt %s failed", claimed.id, claimed.attempt)
                attempts += 1
    except Exception as exc:
        if not is_infrastructure_fault(exc):
            raise
        service, kind = service_of(exc), type(exc).__name__
        log.warning("webhooks: %s unreachable (%s); the next sweep sends what is due", service, kind)
    return attempts


@shared_task(name=DELIVER_TASK, ignore_result=True)
def deliver_webhooks() -> int:
    """Send every webhook that is due (see the module docstring)."""
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
