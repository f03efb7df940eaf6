"""The page session behind a browser request: opened at sign-in, checked on every page, ended at sign-out.

The signed cookie holds only the session's secret (`SESSION_KEY`); jobs/sessions.py decides on every
request whether that session may still be used and ends it when not. This module is the cookie side:
reading and writing the secret, and telling the person why they have to sign in again.
"""

from __future__ import annotations

from flask import request, session

from jobs.sessions import (
    Credential,
    EndedSession,
    LiveSession,
    check_session,
    end_session,
    open_session,
)
from web.session import db_session, settings

SESSION_KEY = "sid"


def _cookie_secret() -> str | None:
    secret = session.get(SESSION_KEY)
    return secret if isinstance(secret, str) and secret else None


def current(*, activity: bool) -> LiveSession | EndedSession | None:
    """This request's page session: live, ended (and why), or None when the cookie names none.

    `activity` is False for background requests (the progress poll), which must not keep a session alive.
    Whatever the check wrote (an ended session, the time last seen, the token's last use) is committed.
    """
    secret = _cookie_secret()
    if secret is None:
        return None
    cfg = settings()
    db = db_session()
    found = check_session(db, secret, idle_s=cfg.session_idle_s, max_s=cfg.session_max_s, activity=activity)
    db.commit()
    return found


def span(seconds: int) -> str:
    """A timeout for people: "8 hours", "7 days", "90 minutes", "45 seconds"."""
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'' if n == 1 else 's'}"
    return f"{seconds} second{'' if seconds == 1 else 's'}"


def ended_notice(ended: EndedSession) -> str:
    """Why the person has to sign in again, in one sentence."""
    cfg = settings()
    notices = {
        "signed_out": "This session was signed out. Sign in again.",
        "revoked": "Your session ended because the token it was opened with has been revoked.",
        "idle": f"Your session ended after {span(cfg.session_idle_s)} without activity. Sign in again.",
        "expired": (
            f"Your session ended: a session lasts at most {span(cfg.session_max_s)} after sign-in. "
            "Sign in again."
        ),
        "replaced": "This session was replaced by a newer sign-in. Sign in again.",
    }
    return notices.get(ended.reason, "Your session has ended. Sign in again.")


def start(credential: Credential) -> None:
    """Open a page session for a live token and put its secret in a fresh cookie (a new CSRF token too).
    A session this browser still had is ended: one browser, one session."""
    db = db_session()
    previous = _cookie_secret()
    if previous is not None:
        end_session(db, previous, reason="replaced")
    opened = open_session(db, credential.token, user_agent=request.user_agent.string)
    db.commit()
    session.clear()
    session[SESSION_KEY] = opened.secret
    session.permanent = True


def finish() -> None:
    """Sign out: end the session on the server (so a copy of the cookie stops working) and clear it."""
    secret = _cookie_secret()
    if secret is not None:
        db = db_session()
        end_session(db, secret, reason="signed_out")
        db.commit()
    session.clear()
