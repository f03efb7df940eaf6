"""Engine and session factory for Postgres (server mode) and SQLite (embedded mode).

SQLite serves a threaded worker in embedded mode, so it gets WAL (readers don't block the writer),
a busy timeout (writers queue instead of failing) and foreign keys (off by default in SQLite).

Postgres connections are pinged before use only when they sat idle in the pool (`PING_IDLE_S`): that is
when a server restart, an idle timeout or a dropped TCP flow leaves a dead connection behind. Pinging at
every checkout (`pool_pre_ping`) cost a round trip per transaction — a third of a worker's round trips per
item — to guard a connection used milliseconds earlier, which is no more likely to be dead than one in the
middle of a transaction; both fail the same way and are retried as an infrastructure fault.

`database_unreachable` tells a database that cannot be reached (down, restarting, refusing connections, a
pool with no free connection) from a statement the database refused: the first is worth retrying in a few
seconds (the web answers 503), the second is a bug or bad data (a 500).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm import Session, sessionmaker

PING_IDLE_S = 2.0

# Postgres SQLSTATEs that say "not now" about the server, never "wrong" about the statement: class 08
# (connection exceptions), 53300 too_many_connections, and operator intervention during a restart —
# 57P01 admin_shutdown (fast shutdown ends our session), 57P02 crash_shutdown, 57P03 cannot_connect_now
# ("the database system is starting up / shutting down"). Not 57014 (a statement timeout: a slow query is
# ours to fix), not 40P01/55P03 (deadlock, lock timeout: about this statement), not 53100/53200 (disk,
# memory: no restart fixes them by itself).
UNREACHABLE_SQLSTATE_CLASSES = ("08",)
UNREACHABLE_SQLSTATES = frozenset({"53300", "57P01", "57P02", "57P03"})
# SQLite (embedded mode): another writer held the file past the busy timeout, or the file cannot be
# opened. "no such table" and every other SQLITE_ERROR stay bugs.
UNREACHABLE_SQLITE_ERRORS = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN")


def database_unreachable(exc: BaseException) -> bool:
    """True when `exc` says the database could not be reached or cannot serve right now (retry in a few
    seconds), False for everything else, a refused statement included (a bug: an error, not an outage).

    Recognised: a pool timeout (every connection busy), an error after which SQLAlchemy invalidated the
    connection (it saw a disconnect), and an OperationalError or InterfaceError whose driver error is a
    connection failure — one the driver raised without a SQLSTATE (connection refused, server closed the
    connection) or with one of UNREACHABLE_SQLSTATES; for SQLite, a busy or unopenable file.
    """
    if isinstance(exc, PoolTimeoutError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    orig = exc.orig
    if isinstance(orig, sqlite3.Error):
        name = getattr(orig, "sqlite_errorname", "") or ""
        return name.startswith(UNREACHABLE_SQLITE_ERRORS)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate is None:
        return True  # libpq's own failure: no server answered the statement
    code = str(sqlstate)
    return code.startswith(UNREACHABLE_SQLSTATE_CLASSES) or code in UNREACHABLE_SQLSTATES


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def json_bytes(value: Any) -> bytes:
    """JSON for the psycopg driver's JSONB parameters (every item's input and output, every report): orjson
    writes it several times faster than the standard library, in the same JSON (keys that are numbers
    become strings, as `json.dumps` makes them); JSONB keeps the value, not the text."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine with the settings each backend needs."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    ping_when_idle = "pool_pre_ping" not in kwargs
    if "poolclass" not in kwargs:
        kwargs.setdefault("pool_size", 10)
        kwargs.setdefault("max_overflow", 20)
    kwargs.setdefault("json_serializer", json_bytes)
    kwargs.setdefault("json_deserializer", orjson.loads)
    engine = create_engine(url, **kwargs)
    if ping_when_idle:
        _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection at checkout if it sat idle for more than PING_IDLE_S; a dead one is
    replaced by the pool (DisconnectionError makes it reconnect and try again)."""
    dialect = engine.dialect

    def checkin(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["idle_since"] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since <= PING_IDLE_S:
            return  # new, or back in use within moments of its last use
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError("a pooled connection died while idle") from exc

    event.listen(engine, "checkin", checkin)
    event.listen(engine, "checkout", checkout)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (tasks read results after committing)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def autocommit_scope(engine: Engine) -> Iterator[Connection]:
    """A connection on which every statement commits on its own, for units of work that are one statement.

    Such a statement is atomic by itself; without a transaction around it, it costs one round trip
    instead of three (BEGIN, the statement, COMMIT), and a bare connection costs less Python than a
    session around it. Workers claim and settle items this way.
    """
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        yield conn


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error, always close."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
