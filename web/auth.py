"""Bearer-token authentication: every /v1 request resolves to exactly one tenant, or a 401.

The tenant lives on `flask.g` for the request; views scope every query by `current_tenant().id`,
so another tenant's rows are simply not found (a 404, never a 403 that would confirm they exist).
The token's `last_used_at` is written on use, at most once a minute (jobs/sessions.py), in a commit of
its own before the view runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from flask import g, request
from sqlalchemy.orm import Session

from jobs.sessions import live_token, record_token_use, token_is_live
from models import Tenant
from web.errors import unauthenticated
from web.session import db_session


def bearer_token() -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


def require_tenant() -> None:
    """`before_request` hook of the API blueprint: set `g.tenant` or answer 401."""
    token = bearer_token()
    if token is None:
        raise unauthenticated("missing bearer token: send `Authorization: Bearer <token>`")
    session = db_session()
    credential = live_token(session, token)
    if credential is None:
        # Same message for unknown and revoked tokens: no hint about which tokens exist.
        raise unauthenticated("invalid or revoked token")
    if record_token_use(session, credential.token):
        session.commit()
    g.tenant = credential.tenant
    g.token_id = credential.token.id


def token_still_live() -> Callable[[Session], bool]:
    """For a streamed download: is the token this request authenticated with still live? (Asked between
    chunks, after the request has returned, so the token's id is bound now.)"""
    token_id: uuid.UUID = g.token_id
    return lambda session: token_is_live(session, token_id)


def current_tenant() -> Tenant:
    """The authenticated tenant of this request (only inside API views)."""
    tenant: Tenant = g.tenant
    return tenant
