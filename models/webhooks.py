"""The webhook outbox: one row per message to send (a job that ended), one row per attempt to send it.

A delivery is written in the same transaction that ends its job (jobs/finalize.py), so a job never ends
without its message, and a message never exists for a job that did not end. Workers send due rows and
record every attempt; the row keeps the message's `webhook-id` and exact body, so every retry (and a
redelivery) carries the same id and bytes. Response bodies are never stored.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, BigIntPK, UTCDateTime, partial_index, utcnow

WEBHOOK_EVENTS = ("job.completed", "job.failed", "job.cancelled")
# pending: waiting for its next try (or being sent); delivered: a 2xx came back; failed: given up.
DELIVERY_STATUSES = ("pending", "delivered", "failed")
# Condition of the partial index the sender reads (also in migration 0006).
DUE_SQL = "status = 'pending'"


class WebhookDelivery(Base):
    """One message about one job to one URL, retried until a 2xx or until `retry_until`."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_job", "job_id", "created_at"),
        # What the sender polls: pending rows by their next try.
        partial_index("ix_webhook_deliveries_due", "next_attempt_at", where=DUE_SQL),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    # The Standard Webhooks `webhook-id` header: the same on every attempt of this message.
    webhook_id: Mapped[str] = mapped_column(String(64), unique=True)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(32))
    # Where it goes: the job's `webhook_url` option, else the tenant's default, when the job ended.
    url: Mapped[str] = mapped_column(Text)
    # The exact request body (the job object as it was when the job ended), sent as is on every attempt.
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # When the next try is due (null once delivered or given up).
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # A sender holds the row until then while it sends (a sender that died lets it go at this time).
    locked_until: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # When the current series of tries began: the job's end, or a redelivery. No try is scheduled more than
    # FACTGATE_WEBHOOK_RETRY_FOR_S (24 h) after it.
    scheduled_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    last_status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class WebhookAttempt(Base):
    """One try at sending a delivery: when, what came back (an HTTP status, or why nothing did), and when
    the next try was scheduled. The response body is not kept."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (Index("ix_webhook_attempts_delivery", "delivery_id", "attempt"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    delivery_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    duration_ms: Mapped[float | None] = mapped_column(Float, default=None)
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    # The try scheduled after this one (null when delivered, given up, or refused for good).
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
