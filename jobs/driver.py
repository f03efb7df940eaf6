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

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.pool import Pool, PoolProxiedConnection

from models import autocommit_scope


@dataclass(frozen=True)
class DriverConnection:
    """A pooled psycopg connection in autocommit, for statements that are each a unit of work.

    Why not SQLAlchemy's `Connection` (models/db.py:autocommit_scope): making one, and setting then
    resetting its isolation level at every checkout, cost about 40–60 µs of CPU per statement — a claim and
    a settle per item. This is the pool's own connection (its checkout events, its ping of a connection
    that sat idle, its reset on return), put in autocommit for the statement and back after it."""

    pooled: PoolProxiedConnection
    dialect: Dialect
    pool: Pool

    @property
    def raw(self) -> psycopg.Connection[Any]:
        raw = self.pooled.driver_connection
        assert isinstance(raw, psycopg.Connection)
        return raw


# What a one-statement operation runs on: a session, a SQLAlchemy connection, or a bare driver connection.
Executor = Session | Connection | DriverConnection


@contextmanager
def _driver_autocommit(engine: Engine) -> Iterator[DriverConnection]:
    try:
        pooled = engine.raw_connection()
    except psycopg.Error as exc:
        # `Engine.raw_connection` lets the driver's own error out where `Engine.connect` wraps it: wrapped the
        # same way here, a database that refuses connections (restarting) stays an infrastructure fault that
        # callers retry, not a statement the database refused (the drill's postgres-restart failed items
        # and stalled 28 s before this).
        raise DBAPIError.instance(None, None, exc, psycopg.Error, dialect=engine.dialect) from exc
    conn = DriverConnection(pooled, engine.dialect, engine.pool)
    try:
        conn.raw.autocommit = True
        yield conn
    finally:
        # Back in the pool's transactional mode whatever happened (a session that gets this connection
        # next must not find it committing every statement); a connection that cannot be set is dropped.
        if pooled.is_valid:
            try:
                if not conn.raw.closed and conn.raw.autocommit:
                    conn.raw.autocommit = False
            except psycopg.Error as exc:
                pooled.invalidate(exc)
        pooled.close()


def statement_scope(engine: Engine) -> AbstractContextManager[Connection | DriverConnection]:
    """A connection on which every statement commits on its own: the pool's psycopg connection itself on
    Postgres (`DriverConnection`), SQLAlchemy's autocommit connection elsewhere (SQLite)."""
    if engine.dialect.driver == "psycopg":
        return _driver_autocommit(engine)
    return autocommit_scope(engine)


def is_driver_level(conn: Executor) -> bool:
    """Whether a one-statement operation can go straight to psycopg: a bare Postgres connection."""
    if isinstance(conn, DriverConnection):
        return True
    return isinstance(conn, Connection) and conn.dialect.driver == "psycopg"


def driver_of(session: Executor) -> Connection | DriverConnection | None:
    """The connection (inside the session's transaction, for a session) whose psycopg connection a
    statement may use directly, or None on another driver."""
    if isinstance(session, DriverConnection):
        return session
    conn = session.connection() if isinstance(session, Session) else session
    return conn if conn.dialect.driver == "psycopg" else None


def sqlalchemy_side(session: Executor) -> Session | Connection:
    """`session` where a statement goes through SQLAlchemy (a database other than Postgres): a driver
    connection is only ever made for Postgres (`statement_scope`), so meeting one here is a bug."""
    if isinstance(session, DriverConnection):
        raise TypeError("a driver connection runs Postgres text only")
    return session


def on_driver(
    conn: Connection | DriverConnection, sql: str, params: Mapping[str, object]
) -> psycopg.Cursor[Any]:
    """Run one Postgres statement on the connection's psycopg connection, prepared server-side, with the
    errors SQLAlchemy would raise (an OperationalError stays an infrastructure fault, and a connection
    the server dropped is invalidated so the pool never hands it out again)."""
    pooled = conn.pooled if isinstance(conn, DriverConnection) else conn.connection
    raw = pooled.driver_connection
    assert isinstance(raw, psycopg.Connection)
    try:
        return raw.execute(sql, params, prepare=True)
    except psycopg.Error as exc:
        gone = conn.dialect.is_disconnect(cast(Any, exc), pooled, None)
        if gone:
            # As SQLAlchemy does on a disconnect: every connection the pool made before this one is stale
            # too (the server restarted, or the network between dropped them all), so each is replaced at
            # its next checkout instead of failing once first. Without this, after a Postgres restart each
            # of a worker's pooled connections failed a claim, a settle or a dispatcher tick in turn (the
            # drill's postgres-restart: a 28 s stall, two answered calls not stored).
            pool = conn.pool if isinstance(conn, DriverConnection) else conn.engine.pool
            pool._invalidate(pooled, exc)  # private: what Connection._handle_dbapi_exception calls
            if isinstance(conn, Connection):
                conn.invalidate(exc)
        raise DBAPIError.instance(
            sql, params, exc, psycopg.Error, connection_invalidated=gone, dialect=conn.dialect
        ) from exc
