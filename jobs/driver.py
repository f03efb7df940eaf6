"""One Postgres statement straight on psycopg, for the statements that run per item or per dispatcher tick.

Why: even a prebuilt SQLAlchemy statement costs an execution context, its parameters processed one by one
and a result wrapper, and an ORM statement built per call costs its construction, its cache key and the
ORM's bulk machinery on top — together more Python than psycopg's own work and the database's. Measured on
the ceiling bench (docs/profiles/): the claim and settle were a quarter of a worker's CPU per claim through
SQLAlchemy; the dispatcher's four statements a tick took 0.5–0.9 ms each built through the ORM.

The statements sent this way are plain text with named parameters, prepared server-side (psycopg prepares a
statement after its first run when asked to), and raise what SQLAlchemy would have raised, so callers and
the fault handling around them (workers/faults.py) see no difference. Other databases (SQLite in embedded
mode) keep the SQLAlchemy path; `driver_of` says which applies.
"""

from __future__ import annotations

from typing import Any, cast

import psycopg
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session


def is_driver_level(conn: Session | Connection) -> bool:
    """Whether a one-statement operation can go straight to psycopg: a bare Postgres connection."""
    return isinstance(conn, Connection) and conn.dialect.driver == "psycopg"


def driver_of(session: Session | Connection) -> Connection | None:
    """The SQLAlchemy connection (inside the session's transaction, for a session) whose psycopg
    connection a statement may use directly, or None on another driver."""
    conn = session.connection() if isinstance(session, Session) else session
    return conn if conn.dialect.driver == "psycopg" else None


def on_driver(conn: Connection, sql: str, params: dict[str, Any]) -> psycopg.Cursor[Any]:
    """Run one Postgres statement on the connection's psycopg connection, prepared server-side, with the
    errors SQLAlchemy would raise (an OperationalError stays an infrastructure fault, and a connection
    the server dropped is invalidated so the pool never hands it out again)."""
    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    try:
        return raw.execute(sql, params, prepare=True)
    except psycopg.Error as exc:
        gone = conn.dialect.is_disconnect(cast(Any, exc), conn.connection, None)
        if gone:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            sql, params, exc, psycopg.Error, connection_invalidated=gone, dialect=conn.dialect
        ) from exc
