"""Tenants and bearer tokens: create, authenticate, list, revoke.

A token is 32 random bytes shown once; only its sha256 is stored, so a database leak does not leak
working tokens. Lookups are by hash, which is also constant-time with respect to the secret.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from jobs.keyring import Keyring
from jobs.keyring import fingerprint as key_fingerprint
from jobs.webhooks import normalized_webhook_url
from models import ApiToken, JobStatus, Tenant, utcnow

TOKEN_PREFIX = "fg_"  # noqa: S105 - a display prefix, not a secret
# Weights far apart make the heaviest tenant's turns long for everyone else (docs/architecture.md, scheduler).
MAX_WEIGHT = 100.0


def hash_token(token: str) -> str:
    """The stored form of a token (or of a page session's secret, jobs/sessions.py): its SHA-256."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    """A freshly created token; `token` exists only here and is never stored."""

    token: str
    token_id: uuid.UUID
    tenant_id: uuid.UUID
    tenant_name: str
    name: str


@dataclass(frozen=True)
class TokenInfo:
    """What `tokens list` shows: never the secret, only its display prefix."""

    token_id: uuid.UUID
    tenant_name: str
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


def get_or_create_tenant(session: Session, name: str) -> Tenant:
    """The tenant called `name`, created on first use. A removed tenant's name is not reused: its row stays
    (its usage roll-up is still its own), so asking for it is an error."""
    name = name.strip()
    if not name:
        raise ValueError("tenant name must not be empty")
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is not None and tenant.deleted_at is not None:
        raise ValueError(f"tenant {name!r} was removed; its name is not reused")
    if tenant is None:
        tenant = Tenant(name=name)
        session.add(tenant)
        session.flush()
    return tenant


def create_token(session: Session, tenant_name: str, token_name: str | None = None) -> IssuedToken:
    """Issue a new token for `tenant_name` (the tenant is created if new)."""
    tenant = get_or_create_tenant(session, tenant_name)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        tenant_id=tenant.id,
        name=(token_name or tenant_name).strip(),
        token_sha256=hash_token(token),
        prefix=token[:10],
    )
    session.add(row)
    session.flush()
    return IssuedToken(
        token=token, token_id=row.id, tenant_id=tenant.id, tenant_name=tenant.name, name=row.name
    )


def authenticate(session: Session, token: str) -> Tenant | None:
    """The tenant a live token belongs to, or None for an unknown or revoked token."""
    if not token:
        return None
    row = session.scalar(
        select(ApiToken).where(ApiToken.token_sha256 == hash_token(token), ApiToken.revoked_at.is_(None))
    )
    if row is None:
        return None
    return session.get(Tenant, row.tenant_id)


def list_tokens(session: Session, tenant_name: str | None = None) -> list[TokenInfo]:
    """Every token (optionally of one tenant), newest first."""
    stmt = select(ApiToken, Tenant.name).join(Tenant, Tenant.id == ApiToken.tenant_id)
    if tenant_name is not None:
        stmt = stmt.where(Tenant.name == tenant_name)
    rows = session.execute(stmt.order_by(ApiToken.created_at.desc())).all()
    return [
        TokenInfo(
            token_id=tok.id,
            tenant_name=tname,
            name=tok.name,
            prefix=tok.prefix,
            created_at=tok.created_at,
            last_used_at=tok.last_used_at,
            revoked_at=tok.revoked_at,
        )
        for tok, tname in rows
    ]


def revoke_token(session: Session, token_id_or_prefix: str) -> int:
    """Revoke by id or display prefix; returns how many tokens were revoked (0 or 1)."""
    stmt = update(ApiToken).where(ApiToken.revoked_at.is_(None))
    try:
        stmt = stmt.where(ApiToken.id == uuid.UUID(token_id_or_prefix))
    except ValueError:
        stmt = stmt.where(ApiToken.prefix == token_id_or_prefix)
    result = session.execute(stmt.values(revoked_at=utcnow()))
    return int(getattr(result, "rowcount", 0) or 0)


@dataclass(frozen=True)
class TenantInfo:
    """What `tenants list/show` print: the settings that govern the tenant's use of the upstream.

    The upstream key itself is never here: only whether one is set, its fingerprint and when it was set.
    """

    id: uuid.UUID
    name: str
    weight: float
    created_at: datetime
    tokens: int
    live_jobs: int
    max_items_per_job: int | None = None
    max_active_jobs: int | None = None
    daily_budget_usd: float | None = None
    monthly_budget_usd: float | None = None
    upstream_key_fingerprint: str | None = None
    upstream_key_set_at: datetime | None = None
    webhook_url: str | None = None
    webhook_secret_set_at: datetime | None = None  # None: no signing secret yet (made on first use)
    retention_days: int | None = None  # None: FACTGATE_RETENTION_DAYS
    reuse: bool = True  # its jobs' requests may be answered from its verdict store (jobs/verdicts.py)


class TenantNotFoundError(LookupError):
    """No tenant with that name."""


class _Unset:
    """A setting not given to `set_tenant` (None means "no limit")."""


UNSET: Any = _Unset()


def _tenant_infos(session: Session, name: str | None = None) -> list[TenantInfo]:
    from models import Job  # noqa: PLC0415 - models.jobs is large; only these reads need it

    tokens = (
        select(func.count())
        .select_from(ApiToken)
        .where(ApiToken.tenant_id == Tenant.id, ApiToken.revoked_at.is_(None))
        .scalar_subquery()
    )
    live = (
        select(func.count())
        .select_from(Job)
        .where(Job.tenant_id == Tenant.id, Job.status.in_(sorted(JobStatus.live())))
        .scalar_subquery()
    )
    stmt = select(Tenant, tokens, live).where(Tenant.deleted_at.is_(None)).order_by(Tenant.name)
    if name is not None:
        stmt = stmt.where(Tenant.name == name)
    return [
        TenantInfo(
            t.id,
            t.name,
            float(t.weight),
            t.created_at,
            int(n_tokens),
            int(n_live),
            t.max_items_per_job,
            t.max_active_jobs,
            t.daily_budget_usd,
            t.monthly_budget_usd,
            t.upstream_key_fingerprint,
            t.upstream_key_set_at,
            t.webhook_url,
            t.webhook_secret_set_at,
            t.retention_days,
            bool(t.reuse),
        )
        for t, n_tokens, n_live in session.execute(stmt)
    ]


def list_tenants(session: Session) -> list[TenantInfo]:
    """Every tenant, by name."""
    return _tenant_infos(session)


def tenant_info(session: Session, name: str) -> TenantInfo:
    """One tenant, or TenantNotFoundError."""
    found = _tenant_infos(session, name)
    if not found:
        raise TenantNotFoundError(f"no tenant {name!r}")
    return found[0]


def _positive_int(name: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise ValueError(f"{name} must be at least 1 (or none for no limit), got {value}")
    return value


def _positive_usd(name: str, value: float | None) -> float | None:
    if value is not None and not (value > 0 and value < 1e9):
        raise ValueError(f"{name} must be a positive amount of dollars (or none for no limit), got {value:g}")
    return value


def set_tenant(
    session: Session,
    name: str,
    *,
    weight: float | None = None,
    max_items_per_job: int | None = UNSET,
    max_active_jobs: int | None = UNSET,
    daily_budget_usd: float | None = UNSET,
    monthly_budget_usd: float | None = UNSET,
    upstream_key: str | None = None,
    clear_upstream_key: bool = False,
    keyring: Keyring | None = None,
    webhook_url: str | None = UNSET,
    retention_days: int | None = UNSET,
    max_retention_days: int = 365,
    reuse: bool | None = None,
) -> TenantInfo:
    """Change a tenant's settings (only those given; None clears a limit).

    The weight is its relative share of every upstream scope against the other tenants with work there; it
    applies from the scheduler's next round. Quotas apply to the next submission; a budget raised or cleared
    releases held work at the scheduler's next round. An upstream key is stored encrypted with `keyring`
    and never returned; its fingerprint names the rate-limit scope its jobs use from then on. The webhook
    URL is where jobs that name none of their own send their webhook (None removes it); it applies to
    jobs that end from then on. `retention_days` (None: the operator's default) is how long its ended jobs
    keep their results, at most `max_retention_days` (FACTGATE_RETENTION_MAX_DAYS); it applies to every
    ended job from the next purge on, the ones ended before included. `reuse` False stops its requests
    being answered from, or kept in, its verdict store from the next request on (the entries stay until
    their jobs are purged, and answer again if it is turned back on).
    """
    tenant = session.scalar(select(Tenant).where(Tenant.name == name, Tenant.deleted_at.is_(None)))
    if tenant is None:
        raise TenantNotFoundError(f"no tenant {name!r}")
    if retention_days is not UNSET:
        if retention_days is not None and not 1 <= retention_days <= max_retention_days:
            raise ValueError(
                f"retention must be from 1 to {max_retention_days} days (FACTGATE_RETENTION_MAX_DAYS), "
                f"got {retention_days}"
            )
        tenant.retention_days = retention_days
    if reuse is not None:
        tenant.reuse = bool(reuse)
    if weight is not None:
        if not (weight > 0 and weight <= MAX_WEIGHT):
            raise ValueError(f"weight must be above 0 and at most {MAX_WEIGHT:g}, got {weight:g}")
        tenant.weight = float(weight)
    if max_items_per_job is not UNSET:
        tenant.max_items_per_job = _positive_int("max_items_per_job", max_items_per_job)
    if max_active_jobs is not UNSET:
        tenant.max_active_jobs = _positive_int("max_active_jobs", max_active_jobs)
    if daily_budget_usd is not UNSET:
        tenant.daily_budget_usd = _positive_usd("daily_budget_usd", daily_budget_usd)
    if monthly_budget_usd is not UNSET:
        tenant.monthly_budget_usd = _positive_usd("monthly_budget_usd", monthly_budget_usd)
    if upstream_key is not None and clear_upstream_key:
        raise ValueError("give an upstream key or clear it, not both")
    if upstream_key is not None:
        key = upstream_key.strip()
        if not key or not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
            raise ValueError("the upstream key must be one line of printable ASCII without spaces")
        if keyring is None:
            raise ValueError("storing an upstream key needs the deployment's keyring")
        tenant.upstream_key_encrypted = keyring.encrypt(key)
        tenant.upstream_key_fingerprint = key_fingerprint(key)
        tenant.upstream_key_set_at = utcnow()
    if webhook_url is not UNSET:
        tenant.webhook_url = normalized_webhook_url(webhook_url)
    if clear_upstream_key:
        tenant.upstream_key_encrypted = None
        tenant.upstream_key_fingerprint = None
        tenant.upstream_key_set_at = None
    session.flush()
    return tenant_info(session, name)


@dataclass(frozen=True)
class TenantKey:
    """A tenant's own upstream key as stored: encrypted, with its fingerprint (the limiter scope's name)."""

    fingerprint: str
    encrypted: str


def tenant_key(session: Session, tenant_id: uuid.UUID) -> TenantKey | None:
    """The tenant's own upstream key, still encrypted, or None when its jobs use the operator's key."""
    row = session.execute(
        select(Tenant.upstream_key_fingerprint, Tenant.upstream_key_encrypted).where(Tenant.id == tenant_id)
    ).first()
    if row is None or row[0] is None or row[1] is None:
        return None
    return TenantKey(fingerprint=str(row[0]), encrypted=str(row[1]))


def rotate_tenant_keys(session: Session, keyring: Keyring) -> int:
    """Re-encrypt every stored tenant secret (upstream keys and webhook signing secrets) with the keyring's
    first key; returns how many."""
    n = 0
    for tenant in session.scalars(
        select(Tenant).where(
            (Tenant.upstream_key_encrypted.is_not(None)) | (Tenant.webhook_secret_encrypted.is_not(None))
        )
    ):
        if tenant.upstream_key_encrypted is not None:
            tenant.upstream_key_encrypted = keyring.rotate(tenant.upstream_key_encrypted)
            n += 1
        if tenant.webhook_secret_encrypted is not None:
            tenant.webhook_secret_encrypted = keyring.rotate(tenant.webhook_secret_encrypted)
            n += 1
    session.flush()
    return n
