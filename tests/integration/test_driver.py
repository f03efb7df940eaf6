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


def test_a_disconnect_replaces_every_older_pooled_connection_not_only_its_own() -> None:
    # After a Postgres restart every pooled connection is dead. The first statement to meet one fails (an
    # infrastructure fault, retried by the caller); the next checkout must not hand out another dead one.
    with fresh_database() as (url, _engine):
        engine = make_engine(url, pool_size=3, max_overflow=0)
        try:
            held = [engine.raw_connection() for _ in range(3)]
            pids = [c.driver_connection.info.backend_pid for c in held]  # type: ignore[union-attr]
            for c in held:
                c.close()
            admin = make_engine(url)
            try:
                with admin.connect() as c:
                    for pid in pids:
                        c.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
                    c.commit()
            finally:
                admin.dispose()
            with pytest.raises(DBAPIError), statement_scope(engine) as conn:
                on_driver(conn, "SELECT 1", {})
            for _ in range(3):  # each of them fresh now, none of the other two dead ones
                with statement_scope(engine) as conn:
                    assert on_driver(conn, "SELECT 1", {}).fetchone() == (1,)
        finally:
            engine.dispose()


def test_a_statement_that_fails_leaves_the_connection_transactional(engine: Engine) -> None:
    with pytest.raises(DBAPIError), statement_scope(engine) as conn:
        on_driver(conn, "SELECT no_such_column FROM pg_class", {})
    with make_session_factory(engine)() as s:
        assert s.connection().connection.driver_connection.autocommit is False


def test_a_database_that_refuses_connections_is_an_infrastructure_fault() -> None:
    # The pool's own connect lets psycopg's error out; the scope wraps it as Engine.connect would, so the
    # callers' retries (workers/faults.py) see a database that is away, not a statement it refused.
    from workers.faults import is_infrastructure_fault

    engine = make_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/none", connect_args={"connect_timeout": 2}
    )
    try:
        with pytest.raises(DBAPIError) as caught, statement_scope(engine):
            pass
    finally:
        engine.dispose()
    assert database_unreachable(caught.value) and is_infrastructure_fault(caught.value)
