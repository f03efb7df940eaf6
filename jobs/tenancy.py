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

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from models import ApiToken, Tenant, utcnow

TOKEN_PREFIX = "fg_"  # noqa: S105 - a display prefix, not a secret
# Weights far apart make the heaviest tenant's turns long for everyone else (docs/architecture.md, scheduler).
MAX_WEIGHT = 100.0


def hash_token(token: str) -> str:
    """The stored form of a token."""
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
    """The tenant called `name`, created on first use."""
    name = name.strip()
    if not name:
        raise ValueError("tenant name must not be empty")
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
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
    """What `tenants list/show` print: settings that govern the tenant's use of the upstream."""

    id: uuid.UUID
    name: str
    weight: float
    created_at: datetime
    tokens: int
    live_jobs: int


class TenantNotFoundError(LookupError):
    """No tenant with that name."""


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
        .where(
            Job.tenant_id == Tenant.id, Job.status.in_(("queued", "in_progress", "finalizing", "cancelling"))
        )
        .scalar_subquery()
    )
    stmt = select(Tenant, tokens, live).order_by(Tenant.name)
    if name is not None:
        stmt = stmt.where(Tenant.name == name)
    return [
        TenantInfo(t.id, t.name, float(t.weight), t.created_at, int(n_tokens), int(n_live))
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


def set_tenant(session: Session, name: str, *, weight: float | None = None) -> TenantInfo:
    """Change a tenant's settings (only those given). The weight is its relative share of every upstream
    scope against the other tenants with work there; it applies from the scheduler's next round."""
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise TenantNotFoundError(f"no tenant {name!r}")
    if weight is not None:
        if not (weight > 0 and weight <= MAX_WEIGHT):
            raise ValueError(f"weight must be above 0 and at most {MAX_WEIGHT:g}, got {weight:g}")
        tenant.weight = float(weight)
    session.flush()
    return tenant_info(session, name)
