"""Who is calling: bearer tokens in use, and page sessions that end when access ends.

A page session is a `web_sessions` row opened at sign-in; the browser's cookie carries only its random
secret. Every page request checks the row, so the session stops working when the person signs out (a
copy of the cookie included), when the token that opened it is revoked, after `idle_s` without a page
request, or `max_s` after sign-in. Background requests (the job page's progress poll) are checked the
same way but are not activity: a tab left open still times out.

`api_tokens.last_used_at` and `web_sessions.last_seen_at` are written on use, but not on every request:
at most once a minute per token (`TOKEN_USE_EVERY`), and for sessions at most every tenth of the idle
timeout (at most a minute), so a busy client does not turn every read into a write. The conditional
UPDATEs make that hold across processes too. Callers commit.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.orm import Session

from jobs.tenancy import hash_token
from models import ApiToken, Tenant, WebSession, utcnow

TOKEN_USE_EVERY = timedelta(minutes=1)
MAX_SEEN_EVERY = timedelta(minutes=1)
USER_AGENT_CHARS = 200
SESSION_SECRET_BYTES = 32


# --- bearer tokens ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credential:
    """A live token and the tenant it belongs to."""

    token: ApiToken
    tenant: Tenant


# Built once: every API request runs it, and building the statement and its cache key per call was a
# tenth of a status poll's CPU (bench/ceiling.py's poll).
_LIVE_TOKEN = (
    select(ApiToken, Tenant)
    .join(Tenant, Tenant.id == ApiToken.tenant_id)
    .where(ApiToken.token_sha256 == bindparam("digest"), ApiToken.revoked_at.is_(None))
)


def live_token(session: Session, token: str) -> Credential | None:
    """The live (not revoked) token with this secret, with its tenant; None for unknown or revoked."""
    if not token:
        return None
    row = session.execute(_LIVE_TOKEN, {"digest": hash_token(token)}).first()
    if row is None:
        return None
    return Credential(token=row[0], tenant=row[1])


def token_is_live(session: Session, token_id: uuid.UUID) -> bool:
    """True while the token is not revoked. A download re-checks it between chunks: access ends with the
    grant, not with the end of a transfer that began before the revocation."""
    query = select(ApiToken.id).where(ApiToken.id == token_id, ApiToken.revoked_at.is_(None))
    return session.scalar(query) is not None


def record_token_use(session: Session, token: ApiToken, now: datetime | None = None) -> bool:
    """Set `last_used_at` unless it was set less than a minute ago; True when it was written."""
    now = now or utcnow()
    cutoff = now - TOKEN_USE_EVERY
    if token.last_used_at is not None and token.last_used_at > cutoff:
        return False  # known fresh: not even a round trip
    result = session.execute(
        update(ApiToken)
        .where(
            ApiToken.id == token.id,
            or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at <= cutoff),
        )
        .values(last_used_at=now)
        .execution_options(synchronize_session=False)
    )
    written = int(getattr(result, "rowcount", 0) or 0) == 1
    if written:
        token.last_used_at = now
    return written


# --- page sessions ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenedSession:
    """A new page session. `secret` goes into the signed cookie and is never stored."""

    id: uuid.UUID
    secret: str


@dataclass(frozen=True)
class LiveSession:
    """A page session that may be used: whose it is."""

    id: uuid.UUID
    token_id: uuid.UUID
    tenant: Tenant


@dataclass(frozen=True)
class EndedSession:
    """A page session that may not be used, and why: one of `models.SESSION_END_REASONS`, or `unknown`
    (no such session: a forged, very old or foreign cookie)."""

    reason: str


def open_session(
    session: Session, token: ApiToken, *, user_agent: str | None = None, now: datetime | None = None
) -> OpenedSession:
    """Start a page session for a live token (the caller has checked it) and count it as token use."""
    now = now or utcnow()
    secret = secrets.token_urlsafe(SESSION_SECRET_BYTES)
    row = WebSession(
        secret_sha256=hash_token(secret),
        token_id=token.id,
        tenant_id=token.tenant_id,
        created_at=now,
        last_seen_at=now,
        user_agent=(user_agent or None) and user_agent[:USER_AGENT_CHARS],
    )
    session.add(row)
    session.flush()
    record_token_use(session, token, now)
    return OpenedSession(id=row.id, secret=secret)


def _end(session: Session, session_id: uuid.UUID, reason: str, now: datetime) -> None:
    session.execute(
        update(WebSession)
        .where(WebSession.id == session_id, WebSession.ended_at.is_(None))
        .values(ended_at=now, end_reason=reason)
        .execution_options(synchronize_session=False)
    )


def end_session(
    session: Session, secret: str, reason: str = "signed_out", now: datetime | None = None
) -> bool:
    """End the session with this secret (sign-out); True when a live session was ended."""
    result = session.execute(
        update(WebSession)
        .where(WebSession.secret_sha256 == hash_token(secret), WebSession.ended_at.is_(None))
        .values(ended_at=now or utcnow(), end_reason=reason)
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0) > 0


def end_sessions_of_revoked_tokens(session: Session, now: datetime | None = None) -> int:
    """End every live session whose token is revoked (`tokens revoke` calls this at once; the per-request
    check would end each at its next request anyway). Returns how many were ended."""
    revoked = select(ApiToken.id).where(ApiToken.revoked_at.is_not(None))
    result = session.execute(
        update(WebSession)
        .where(WebSession.ended_at.is_(None), WebSession.token_id.in_(revoked))
        .values(ended_at=now or utcnow(), end_reason="revoked")
        .execution_options(synchronize_session=False)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def seen_every(idle_s: float) -> timedelta:
    """How stale `last_seen_at` may get before a page request rewrites it: a tenth of the idle timeout,
    at most a minute (so a session may end up to that much before its idle timeout, never after)."""
    return min(MAX_SEEN_EVERY, timedelta(seconds=idle_s / 10))


def page_session_is_live(
    session: Session, session_id: uuid.UUID, *, max_s: float, now: datetime | None = None
) -> bool:
    """True while the page session has not ended, its token is not revoked and its `max_s` after sign-in
    have not passed. A download re-checks this between chunks. It ends nothing itself, and idleness does not
    count: the download in progress is the person's activity; the next page request ends the session."""
    now = now or utcnow()
    query = (
        select(WebSession.id)
        .join(ApiToken, ApiToken.id == WebSession.token_id)
        .where(
            WebSession.id == session_id,
            WebSession.ended_at.is_(None),
            ApiToken.revoked_at.is_(None),
            WebSession.created_at > now - timedelta(seconds=max_s),
        )
    )
    return session.scalar(query) is not None


def check_session(
    session: Session,
    secret: str,
    *,
    idle_s: float,
    max_s: float,
    activity: bool,
    now: datetime | None = None,
) -> LiveSession | EndedSession:
    """Whether the page session with this secret may be used now; ends it (and says why) when not.

    `activity` is False for background requests: they are refused like any other once the session has
    ended, but they neither postpone the idle timeout nor count as token use.
    """
    now = now or utcnow()
    row = session.execute(
        select(WebSession, ApiToken, Tenant)
        .join(ApiToken, ApiToken.id == WebSession.token_id)
        .join(Tenant, Tenant.id == WebSession.tenant_id)
        .where(WebSession.secret_sha256 == hash_token(secret))
    ).first()
    if row is None:
        return EndedSession("unknown")
    web_session, token, tenant = row
    if web_session.ended_at is not None:
        return EndedSession(web_session.end_reason or "signed_out")
    reason = None
    if token.revoked_at is not None:
        reason = "revoked"
    elif now - web_session.created_at >= timedelta(seconds=max_s):
        reason = "expired"
    elif now - web_session.last_seen_at >= timedelta(seconds=idle_s):
        reason = "idle"
    if reason is not None:
        _end(session, web_session.id, reason, now)
        return EndedSession(reason)
    if activity:
        if now - web_session.last_seen_at >= seen_every(idle_s):
            session.execute(
                update(WebSession)
                .where(WebSession.id == web_session.id, WebSession.ended_at.is_(None))
                .values(last_seen_at=now)
                .execution_options(synchronize_session=False)
            )
        record_token_use(session, token, now)
    return LiveSession(id=web_session.id, token_id=token.id, tenant=tenant)
