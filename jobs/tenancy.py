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

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from models import ApiToken, Tenant, utcnow

TOKEN_PREFIX = "fg_"  # noqa: S105 - a display prefix, not a secret


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
