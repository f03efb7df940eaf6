"""The webhook outbox: write a delivery when a job ends, hand due deliveries to senders, record attempts,
redeliver; and each tenant's signing secret.

Outbox: `record_job_ended` runs inside the transaction that ends the job (jobs/finalize.py), so the job's
end and its message commit together or not at all. The body (the job object, jobs/serialize.py) and the
`webhook-id` are fixed there, so every attempt sends the same id and bytes. A sender claims due rows with
a conditional UPDATE (`claim_due`: one sender per row, round robin across tenants, a lock that runs out if
the sender dies), sends
outside any transaction, then records the attempt (`record_attempt`): delivered on a 2xx, else the next try
after an exponential wait (checks/webhooks.py:retry_wait_s) until the retry window closes, then failed. A
delivery whose attempt never recorded a result (its sender died holding it) is claimed again, and once its
window has closed it ends failed too (`give_up_unrecorded`): nothing stays pending for ever.

Secrets: `whsec_...` (checks/webhooks.py:new_secret), encrypted at rest with the deployment's keyring
(jobs/keyring.py) like tenants' upstream keys, created on first use and never logged.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Select, func, or_, select, update
from sqlalchemy.orm import Session

from checks.webhooks import new_secret, retry_wait_s, validate_webhook_url
from jobs.keyring import Keyring
from jobs.serialize import job_json
from models import Job, Tenant, WebhookAttempt, WebhookDelivery, utcnow

log = logging.getLogger("factgate.jobs")

EVENTS = {"completed": "job.completed", "failed": "job.failed", "cancelled": "job.cancelled"}
# Where a finalizing session lists the deliveries it wrote, so the caller can send them once it commits.
CREATED_KEY = "factgate.webhook_deliveries"
ATTEMPTS_SHOWN = 20


class DeliveryStateError(Exception):
    """The delivery cannot be redelivered now (it is still being tried)."""


def webhook_target(session: Session, job: Job) -> str | None:
    """The job's `webhook_url` option, else its tenant's default URL, else None."""
    url = (job.options or {}).get("webhook_url")
    if url:
        return str(url)
    default = session.scalar(select(Tenant.webhook_url).where(Tenant.id == job.tenant_id))
    return str(default) if default else None


def record_job_ended(session: Session, job: Job) -> WebhookDelivery | None:
    """In the transaction that ended `job`: its delivery, due at once (None when it has nowhere to go)."""
    event = EVENTS.get(job.status)
    if event is None:
        return None
    url = webhook_target(session, job)
    if not url:
        return None
    now = utcnow()
    delivery_id = uuid.uuid4()
    row = WebhookDelivery(
        id=delivery_id,
        webhook_id=f"msg_{delivery_id.hex}",
        tenant_id=job.tenant_id,
        job_id=job.id,
        event=event,
        url=url,
        body=job_json(session, job),
        status="pending",
        attempts=0,
        next_attempt_at=now,
        scheduled_at=now,
        created_at=now,
    )
    session.add(row)
    session.flush()
    session.info.setdefault(CREATED_KEY, []).append(delivery_id)
    return row


def created_in(session: Session) -> list[uuid.UUID]:
    """The deliveries this session wrote (to send as soon as it has committed)."""
    return list(session.info.get(CREATED_KEY, ()))


# --- sending ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery a sender holds: what to send, where, and which attempt this is (also the claim token)."""

    id: uuid.UUID
    webhook_id: str
    tenant_id: uuid.UUID
    url: str
    body: str
    attempt: int
    scheduled_at: datetime


def _due(now: datetime) -> tuple[ColumnElement[bool], ...]:
    """Conditions of a delivery a sender may take now."""
    return (
        WebhookDelivery.status == "pending",
        WebhookDelivery.next_attempt_at <= now,
        or_(WebhookDelivery.locked_until.is_(None), WebhookDelivery.locked_until < now),
    )


def any_due(session: Session, now: datetime | None = None) -> bool:
    """Is some delivery waiting for a sender?"""
    now = now or utcnow()
    return session.scalar(select(WebhookDelivery.id).where(*_due(now)).limit(1)) is not None


def fair_due(now: datetime, limit: int) -> Select[tuple[uuid.UUID]]:
    """Due deliveries, round robin across tenants: each row's rank is its place in its tenant's due queue
    plus the deliveries that tenant has in flight now, so one tenant's backlog (or its hanging receiver)
    takes a sender only after every other tenant with something due has had one."""
    in_flight = (
        select(WebhookDelivery.tenant_id, func.count().label("n"))
        .where(WebhookDelivery.status == "pending", WebhookDelivery.locked_until >= now)
        .group_by(WebhookDelivery.tenant_id)
        .subquery()
    )
    due = (
        select(
            WebhookDelivery.id,
            WebhookDelivery.tenant_id,
            WebhookDelivery.next_attempt_at,
            func.row_number()
            .over(
                partition_by=WebhookDelivery.tenant_id,
                order_by=(WebhookDelivery.next_attempt_at, WebhookDelivery.id),
            )
            .label("place"),
        )
        .where(*_due(now))
        .subquery()
    )
    return (
        select(due.c.id)
        .outerjoin(in_flight, in_flight.c.tenant_id == due.c.tenant_id)
        .order_by(due.c.place + func.coalesce(in_flight.c.n, 0), due.c.next_attempt_at, due.c.id)
        .limit(limit)
    )


def give_up_unrecorded(session: Session, *, retry_for_s: float, now: datetime, limit: int = 100) -> int:
    """End as `failed` the deliveries whose last attempt never recorded a result (its sender died, or
    crashed, with the row held) and whose retry window has closed; returns how many. Within the window
    such a row is simply claimed again."""
    closed = now - timedelta(seconds=retry_for_s)
    lost = (
        WebhookDelivery.status == "pending",
        WebhookDelivery.locked_until.is_not(None),
        WebhookDelivery.locked_until < now,
        WebhookDelivery.scheduled_at < closed,
    )
    rows = session.execute(
        select(WebhookDelivery.id, WebhookDelivery.attempts).where(*lost).limit(limit)
    ).all()
    ended = 0
    for delivery_id, attempts in rows:
        error = "given up: the retry window closed and the last attempt never recorded a result"
        moved = session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id, WebhookDelivery.attempts == attempts, *lost)
            .values(status="failed", next_attempt_at=None, locked_until=None, last_error=error)
        )
        if not getattr(moved, "rowcount", 0):
            continue
        session.add(
            WebhookAttempt(
                delivery_id=delivery_id,
                attempt=attempts,
                started_at=now,
                error=error,
            )
        )
        ended += 1
    if ended:
        session.flush()
        log.warning("gave up %d webhook deliveries whose last attempt never recorded a result", ended)
    return ended


def claim_due(
    session: Session, *, lock_s: float, limit: int = 10, retry_for_s: float | None = None
) -> list[ClaimedDelivery]:
    """Take up to `limit` due deliveries for this sender, fairly across tenants (`fair_due`), each held
    for `lock_s` (commit before sending). With `retry_for_s`, first give up what `give_up_unrecorded`
    finds.

    Each row moves with its own conditional UPDATE, so two senders never hold the same row; the attempt
    count goes up here, and the sender records its result against that count.
    """
    now = utcnow()
    if retry_for_s is not None:
        give_up_unrecorded(session, retry_for_s=retry_for_s, now=now)
    candidates = session.scalars(fair_due(now, limit)).all()
    claimed: list[ClaimedDelivery] = []
    for delivery_id in candidates:
        moved = session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id, *_due(now))
            .values(locked_until=now + timedelta(seconds=lock_s), attempts=WebhookDelivery.attempts + 1)
        )
        if not getattr(moved, "rowcount", 0):
            continue  # another sender took it
        row = session.get(WebhookDelivery, delivery_id, populate_existing=True)
        assert row is not None
        claimed.append(
            ClaimedDelivery(
                id=row.id,
                webhook_id=row.webhook_id,
                tenant_id=row.tenant_id,
                url=row.url,
                body=row.body,
                attempt=row.attempts,
                scheduled_at=row.scheduled_at,
            )
        )
    return claimed


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt came to (clients/webhooks.py:SendResult, in jobs/ terms)."""

    status_code: int | None
    error: str | None
    duration_ms: float | None
    permanent: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def record_attempt(
    session: Session,
    claimed: ClaimedDelivery,
    result: AttemptResult,
    *,
    started_at: datetime,
    retry_base_s: float,
    retry_for_s: float,
) -> str:
    """Store one attempt and what follows from it; returns the delivery's status (pending: tried again at
    its `next_attempt_at`; delivered; failed: given up)."""
    now = utcnow()
    next_at: datetime | None = None
    if result.ok:
        status = "delivered"
    elif result.permanent:
        status = "failed"
    else:
        candidate = now + timedelta(seconds=retry_wait_s(claimed.attempt, retry_base_s))
        if candidate <= claimed.scheduled_at + timedelta(seconds=retry_for_s):
            status, next_at = "pending", candidate
        else:
            status = "failed"
    session.add(
        WebhookAttempt(
            delivery_id=claimed.id,
            attempt=claimed.attempt,
            started_at=started_at,
            duration_ms=result.duration_ms,
            status_code=result.status_code,
            error=result.error,
            next_attempt_at=next_at,
        )
    )
    values: dict[str, object] = {
        "status": status,
        "next_attempt_at": next_at,
        "locked_until": None,
        "last_attempt_at": started_at,
        "last_status_code": result.status_code,
        "last_error": result.error,
    }
    if status == "delivered":
        values["delivered_at"] = now
    moved = session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == claimed.id, WebhookDelivery.attempts == claimed.attempt)
        .values(**values)
    )
    if not getattr(moved, "rowcount", 0):
        # Our hold ran out and another sender took the row: the attempt happened and is recorded, but the
        # row's state is that sender's to write.
        log.warning(
            "webhook delivery %s: attempt %s finished after its hold ran out", claimed.id, claimed.attempt
        )
    session.flush()
    return status


# --- the job page --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptView:
    attempt: int
    started_at: datetime
    status_code: int | None
    error: str | None
    duration_ms: float | None
    next_attempt_at: datetime | None


@dataclass(frozen=True)
class DeliveryView:
    """One delivery as the job page shows it (never its body: that is the job object the page shows)."""

    id: uuid.UUID
    webhook_id: str
    event: str
    url: str
    status: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: datetime | None
    history: list[AttemptView]

    @property
    def can_redeliver(self) -> bool:
        return self.status != "pending"


def deliveries_of(session: Session, tenant_id: uuid.UUID, job_id: uuid.UUID) -> list[DeliveryView]:
    """The job's deliveries, newest first, each with its latest attempts (newest first)."""
    rows = session.scalars(
        select(WebhookDelivery)
        .where(WebhookDelivery.job_id == job_id, WebhookDelivery.tenant_id == tenant_id)
        .order_by(WebhookDelivery.created_at.desc())
    ).all()
    out: list[DeliveryView] = []
    for row in rows:
        attempts = session.scalars(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id == row.id)
            .order_by(WebhookAttempt.attempt.desc(), WebhookAttempt.id.desc())
            .limit(ATTEMPTS_SHOWN)
        ).all()
        out.append(
            DeliveryView(
                id=row.id,
                webhook_id=row.webhook_id,
                event=row.event,
                url=row.url,
                status=row.status,
                attempts=row.attempts,
                created_at=row.created_at,
                next_attempt_at=row.next_attempt_at,
                last_attempt_at=row.last_attempt_at,
                last_status_code=row.last_status_code,
                last_error=row.last_error,
                delivered_at=row.delivered_at,
                history=[
                    AttemptView(
                        a.attempt, a.started_at, a.status_code, a.error, a.duration_ms, a.next_attempt_at
                    )
                    for a in attempts
                ],
            )
        )
    return out


def redeliver(session: Session, tenant_id: uuid.UUID, delivery_id: uuid.UUID) -> WebhookDelivery | None:
    """Send a delivered or given-up message again, now, with the same `webhook-id` and body, and a new retry
    window. None when the tenant has no such delivery; DeliveryStateError while it is still being tried."""
    row = session.scalar(
        select(WebhookDelivery).where(
            WebhookDelivery.id == delivery_id, WebhookDelivery.tenant_id == tenant_id
        )
    )
    if row is None:
        return None
    now = utcnow()
    moved = session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id, WebhookDelivery.status != "pending")
        .values(status="pending", next_attempt_at=now, scheduled_at=now, locked_until=None)
    )
    if not getattr(moved, "rowcount", 0):
        raise DeliveryStateError("this webhook is still being tried; its next try is already scheduled")
    session.refresh(row)
    session.info.setdefault(CREATED_KEY, []).append(delivery_id)
    return row


# --- tenants' URL and secret ----------------------------------------------------------------------------


def normalized_webhook_url(url: str | None) -> str | None:
    """A tenant's default URL as stored: validated (checks/webhooks.py), or None to remove it."""
    if url is None or not url.strip():
        return None
    return validate_webhook_url(url.strip())


def tenant_webhook_secret(
    session: Session, tenant_id: uuid.UUID, keyring: Keyring, *, create: bool = True
) -> str | None:
    """The tenant's signing secret, decrypted; created (once, whoever asks first) when it has none."""
    stored = session.scalar(select(Tenant.webhook_secret_encrypted).where(Tenant.id == tenant_id))
    if stored is None and create:
        session.execute(
            update(Tenant)
            .where(Tenant.id == tenant_id, Tenant.webhook_secret_encrypted.is_(None))
            .values(webhook_secret_encrypted=keyring.encrypt(new_secret()), webhook_secret_set_at=utcnow())
        )
        stored = session.scalar(select(Tenant.webhook_secret_encrypted).where(Tenant.id == tenant_id))
    return None if stored is None else keyring.decrypt(stored)


def rotate_webhook_secret(session: Session, tenant_id: uuid.UUID, keyring: Keyring) -> str:
    """Replace the tenant's secret with a new one (deliveries from now on are signed with it)."""
    secret = new_secret()
    session.execute(
        update(Tenant)
        .where(Tenant.id == tenant_id)
        .values(webhook_secret_encrypted=keyring.encrypt(secret), webhook_secret_set_at=utcnow())
    )
    return secret
