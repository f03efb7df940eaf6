"""Per-app resources (settings, engine, session factory, Celery) and the per-request DB session.

`create_app` stores the resources in `app.extensions["factgate"]`; views reach them through these
helpers. The request's session is opened on first use and closed at app-context teardown. Teardown
runs when the view returns, before a streamed body is sent, so streams open their own session
(web/exports.py `stream_job`).
"""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from flask import current_app, g, request
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
    # Sessions for the polls of a running job on Postgres: their connection is in autocommit, so their
    # statements need no BEGIN before them and no ROLLBACK after (`db_session`). None elsewhere (SQLite).
    reading_sessions: sessionmaker[Session] | None = None


def resources() -> WebResources:
    res: WebResources = current_app.extensions[EXTENSION]
    return res


def settings() -> Settings:
    return resources().settings


SAFE_METHODS = frozenset({"GET", "HEAD"})
# The polls a client repeats while a job runs: the API's job status and the job page's progress. Each of
# their reads is a plain statement (none needs a transaction: no server-side cursor, which reports and
# exports use for their row streams).
POLLED_ENDPOINTS = frozenset({"api.get_job", "pages.job_progress"})


def db_session() -> Session:
    """This request's session (created on first use, closed at teardown).

    A poll (`POLLED_ENDPOINTS`) gets a session in autocommit on Postgres. Why: psycopg opens a transaction
    with a BEGIN of its own and the session's close ends it with a ROLLBACK, so a status poll made four
    round trips to Postgres for its two reads, and about a tenth more CPU (bench/ceiling.py's poll, on a
    machine whose cores the workers keep busy). Under Postgres' READ COMMITTED every statement reads its own
    snapshot either way, so the poll sees nothing different; the few writes it makes on the way (a token's
    `last_used_at` once a minute, a page session's last sighting) are one statement each, committed as
    they were.
    """
    session: Session | None = g.get("db_session")
    if session is None:
        res = resources()
        polled = request.method in SAFE_METHODS and request.endpoint in POLLED_ENDPOINTS
        reading = res.reading_sessions if polled else None
        session = (reading or res.sessions)()
        g.db_session = session
    return session


def close_db_session(_exc: BaseException | None = None) -> None:
    """Teardown hook: roll back anything uncommitted and return the connection to the pool."""
    session: Session | None = g.pop("db_session", None)
    if session is not None:
        session.close()
