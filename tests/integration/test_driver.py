"""jobs/driver.py against real Postgres: a statement scope is the pool's own psycopg connection in autocommit
for the statement and back out of it after, and a connection the server dropped is invalidated (the next
checkout gets a fresh one) with the error SQLAlchemy would have raised."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from jobs.driver import DriverConnection, on_driver, statement_scope
from models import make_engine, make_session_factory, session_scope
from models.db import database_unreachable
from tests.integration.stack import fresh_database

pytestmark = pytest.mark.integration


@pytest.fixture
def engine() -> Iterator[Engine]:
    with fresh_database() as (url, _engine):
        one = make_engine(url, pool_size=1, max_overflow=0)  # every checkout is the same connection
        try:
            yield one
        finally:
            one.dispose()


def test_a_statement_scope_commits_each_statement_and_gives_the_connection_back_as_it_was(
    engine: Engine,
) -> None:
    with statement_scope(engine) as conn:
        assert isinstance(conn, DriverConnection)
        assert conn.raw.autocommit is True
        on_driver(conn, "CREATE TABLE t (x int)", {})
        on_driver(conn, "INSERT INTO t VALUES (%(x)s)", {"x": 1})
        pid = conn.raw.info.backend_pid
    # The same pooled connection, back in the pool's transactional mode: a session's rollback undoes its
    # insert, and the scope's insert stayed committed.
    sessions = make_session_factory(engine)
    with sessions() as s:
        assert s.connection().connection.driver_connection.info.backend_pid == pid
        assert s.connection().connection.driver_connection.autocommit is False
        s.execute(text("INSERT INTO t VALUES (2)"))
        s.rollback()
    with session_scope(sessions) as s:
        assert s.scalars(text("SELECT x FROM t")).all() == [1]


def test_a_dropped_connection_is_invalidated_and_replaced(engine: Engine) -> None:
    with statement_scope(engine) as conn:
        assert isinstance(conn, DriverConnection)
        dead = conn.raw.info.backend_pid
    admin = make_engine(engine.url.render_as_string(hide_password=False))
    try:
        with admin.connect() as c:
            c.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead})
            c.commit()
    finally:
        admin.dispose()
    with pytest.raises(DBAPIError) as caught, statement_scope(engine) as conn:
        on_driver(conn, "SELECT 1", {})
    assert caught.value.connection_invalidated and database_unreachable(caught.value)
    with statement_scope(engine) as conn:
        assert isinstance(conn, DriverConnection)
        assert on_driver(conn, "SELECT 1", {}).fetchone() == (1,)
        assert conn.raw.info.backend_pid != dead
