"""Tenants and their API tokens. Only a token's sha256 is stored; the token is shown once at creation."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, Float, ForeignKey, Integer, String, Text, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, utcnow


class Tenant(Base):
    """An organisation; every job and every query is scoped to one."""

    __tablename__ = "tenants"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    # Relative share of every upstream scope this tenant uses, against the other tenants with work there.
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")
    # Quotas and budgets (None: no limit). Checked at intake; a budget reached mid-run holds the tenant's
    # remaining items until it resets or is raised (jobs/quotas.py).
    max_items_per_job: Mapped[int | None] = mapped_column(Integer, default=None)
    max_active_jobs: Mapped[int | None] = mapped_column(Integer, default=None)
    daily_budget_usd: Mapped[float | None] = mapped_column(Float, default=None)
    monthly_budget_usd: Mapped[float | None] = mapped_column(Float, default=None)
    # The tenant's own upstream key, Fernet-encrypted (jobs/keyring.py); only its fingerprint is ever shown.
    upstream_key_encrypted: Mapped[str | None] = mapped_column(Text, default=None)
    upstream_key_fingerprint: Mapped[str | None] = mapped_column(String(16), default=None)
    upstream_key_set_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # Where a job's webhook goes when the job names no `webhook_url` of its own (None: nowhere).
    webhook_url: Mapped[str | None] = mapped_column(Text, default=None)
    # The Standard Webhooks signing secret (`whsec_...`), Fernet-encrypted like the upstream key; shown only
    # by `factgate tenants webhook-secret`, created on first use.
    webhook_secret_encrypted: Mapped[str | None] = mapped_column(Text, default=None)
    webhook_secret_set_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # How many days an ended job's results are kept (None: FACTGATE_RETENTION_DAYS), at most the operator's
    # FACTGATE_RETENTION_MAX_DAYS whatever is stored here.
    retention_days: Mapped[int | None] = mapped_column(Integer, default=None)
    # Removed (`factgate tenants delete`): no token or session of it works, its jobs are purged; the row
    # stays, so its name is not reused and its usage roll-up (billing) keeps its owner.
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Whether its jobs' requests may be answered from (and kept in) its verdict store (`factgate tenants set
    # NAME --reuse off|on`); a job's own `reuse: "none"` turns it off for that job alone.
    reuse: Mapped[bool] = mapped_column(Boolean, default=True, server_default=text("true"))


class ApiToken(Base):
    """A bearer token. `token_sha256` is the lookup key; `prefix` lets people tell tokens apart."""

    __tablename__ = "api_tokens"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
