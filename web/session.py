"""Per-app resources (settings, engine, session factory, Celery) and the per-request DB session.

`create_app` stores the resources in `app.extensions["factgate"]`; views reach them through these
helpers. The request's session is opened on first use and closed at app-context teardown. Teardown
runs when the view returns, before a streamed body is sent, so streams open their own session
(web/exports.py `stream_job`).
"""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from flask import current_app, g
from redis import Redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from config import Settings

EXTENSION = "factgate"


@dataclass(frozen=True)
class WebResources:
    """What one Flask app holds: built once in `create_app`, shared by every request."""

    settings: Settings
    engine: Engine
    # What /readyz connects with: for Postgres an engine without a pool and with short timeouts (a probe
    # must neither wait for a busy pool nor hang on a dead host); for SQLite the app's own engine.
    probe_engine: Engine
    sessions: sessionmaker[Session]
    celery: Celery
    redis: Redis | None  # server mode only: what /readyz pings


def resources() -> WebResources:
    res: WebResources = current_app.extensions[EXTENSION]
    return res


def settings() -> Settings:
    return resources().settings


def db_session() -> Session:
    """This request's session (created on first use, closed at teardown)."""
    session: Session | None = g.get("db_session")
    if session is None:
        session = resources().sessions()
        g.db_session = session
    return session


def close_db_session(_exc: BaseException | None = None) -> None:
    """Teardown hook: roll back anything uncommitted and return the connection to the pool."""
    session: Session | None = g.pop("db_session", None)
    if session is not None:
        session.close()
