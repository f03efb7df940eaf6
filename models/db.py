"""Engine and session factory for Postgres (server mode) and SQLite (embedded mode).

SQLite serves a threaded worker in embedded mode, so it gets WAL (readers don't block the writer),
a busy timeout (writers queue instead of failing) and foreign keys (off by default in SQLite).

Postgres connections are pinged before use only when they sat idle in the pool (`PING_IDLE_S`): that is
when a server restart, an idle timeout or a dropped TCP flow leaves a dead connection behind. Pinging at
every checkout (`pool_pre_ping`) cost a round trip per transaction — a third of a worker's round trips per
item — to guard a connection used milliseconds earlier, which is no more likely to be dead than one in the
middle of a transaction; both fail the same way and are retried as an infrastructure fault.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

PING_IDLE_S = 2.0


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


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
