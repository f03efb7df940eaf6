"""Page sessions kept on the server, so that signing out, revoking a token or a timeout really ends them.

The browser's signed cookie carries only the session's random secret; this row says whose session it is
(the token that opened it, and that token's tenant) and whether it may still be used. Only the secret's
sha256 is stored, like a token's, so reading the table yields no working cookie.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, utcnow

# Why a session ended (`end_reason`).
SESSION_END_REASONS = ("signed_out", "revoked", "idle", "expired", "replaced")


class WebSession(Base):
    """One sign-in of one browser. Live while `ended_at` is null and the timeouts have not passed."""

    __tablename__ = "web_sessions"
    __table_args__ = (
        # Ending every live session of a revoked token.
        Index("ix_web_sessions_token_id", "token_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    # sha256 of the secret in the cookie: the lookup key.
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    token_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"))
    tenant_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The last page request (background polls excluded), written at most every few seconds to a minute.
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    end_reason: Mapped[str | None] = mapped_column(String(16), default=None)
    # The browser's User-Agent at sign-in (cut to 200 characters), to tell sessions apart.
    user_agent: Mapped[str | None] = mapped_column(String(200), default=None)
