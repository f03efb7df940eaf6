"""Which errors are an unreachable dependency (503, retried) and which are bugs (500): the classifiers.

`models.database_unreachable` is what lets the web answer 503 during a Postgres restart without turning a
refused statement into a "try again later"; `web.errors.unreachable_service` adds Redis and the broker.
The Postgres errors are psycopg's own classes (their SQLSTATE is a class attribute), wrapped the way
SQLAlchemy wraps them; the SQLite ones come from a real SQLite file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import kombu.exceptions
import psycopg
import psycopg.errors
import pytest
import redis.exceptions
import sqlalchemy.exc

from clients.backoff import TASK_BACKOFF
from models import database_unreachable
from web.errors import RETRY_AFTER_S, unavailable, unreachable_service
from workers.tasks import INFRA_TASK_RETRIES

INFRA_TASK_BACKOFF_MAX_S = TASK_BACKOFF.cap_s


def wrapped(
    orig: Exception, cls: type[sqlalchemy.exc.DBAPIError] = sqlalchemy.exc.OperationalError
) -> Exception:
    return cls("SELECT 1", {}, orig)


@pytest.mark.parametrize(
    "orig",
    [
        psycopg.OperationalError("connection failed: Connection refused"),  # no SQLSTATE: libpq's own
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.CrashShutdown("terminating connection because of crash of another server process"),
        psycopg.errors.CannotConnectNow("the database system is shutting down"),
        psycopg.errors.TooManyConnections("sorry, too many clients already"),
        psycopg.errors.ConnectionFailure("connection failure"),
    ],
    ids=lambda e: type(e).__name__ + ":" + str(e)[:20],
)
def test_a_database_that_cannot_serve_now_is_unreachable(orig: Exception) -> None:
    assert database_unreachable(wrapped(orig))


def test_a_closed_connection_and_a_pool_timeout_are_unreachable() -> None:
    assert database_unreachable(
        wrapped(psycopg.InterfaceError("the connection is closed"), sqlalchemy.exc.InterfaceError)
    )
    assert database_unreachable(sqlalchemy.exc.TimeoutError("QueuePool limit of size 10 overflow 20 reached"))
    invalidated = sqlalchemy.exc.DBAPIError("SELECT 1", {}, Exception("gone"), connection_invalidated=True)
    assert database_unreachable(invalidated)


@pytest.mark.parametrize(
    ("orig", "cls"),
    [
        (psycopg.errors.UndefinedTable('relation "x" does not exist'), sqlalchemy.exc.ProgrammingError),
        (psycopg.errors.DivisionByZero("division by zero"), sqlalchemy.exc.DataError),
        (psycopg.errors.UniqueViolation("duplicate key"), sqlalchemy.exc.IntegrityError),
        # OperationalErrors about the statement, not the server: a statement timeout, a deadlock, a lock
        # timeout, a full disk. A restart does not fix them; they are errors to see, not to wait out.
        (
            psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
            sqlalchemy.exc.OperationalError,
        ),
        (psycopg.errors.DeadlockDetected("deadlock detected"), sqlalchemy.exc.OperationalError),
        (psycopg.errors.LockNotAvailable("could not obtain lock"), sqlalchemy.exc.OperationalError),
        (psycopg.errors.DiskFull("could not extend file"), sqlalchemy.exc.OperationalError),
        # A client-side mistake without a SQLSTATE is still a ProgrammingError, not an outage.
        (
            psycopg.ProgrammingError("the query has 1 placeholder but 2 parameters were passed"),
            sqlalchemy.exc.ProgrammingError,
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v.__name__,
)
def test_a_statement_the_database_refuses_is_not_an_outage(
    orig: Exception, cls: type[sqlalchemy.exc.DBAPIError]
) -> None:
    assert not database_unreachable(wrapped(orig, cls))


def test_other_errors_are_not_outages() -> None:
    assert not database_unreachable(ValueError("x"))
    assert not database_unreachable(sqlalchemy.exc.NoResultFound("none"))


def test_sqlite_busy_is_unreachable_and_no_such_table_is_a_bug(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(sqlite3.OperationalError) as busy:
            other.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(sqlite3.OperationalError) as missing:
            holder.execute("SELECT * FROM no_such_table")
    finally:
        holder.close()
        other.close()
    assert database_unreachable(wrapped(busy.value))
    assert not database_unreachable(wrapped(missing.value))


def test_web_names_the_unreachable_service_and_nothing_else() -> None:
    assert unreachable_service(wrapped(psycopg.errors.AdminShutdown("bye"))) == "database"
    assert unreachable_service(redis.exceptions.ConnectionError("Error 111 connecting")) == "redis"
    assert unreachable_service(redis.exceptions.TimeoutError("Timeout reading")) == "redis"
    assert unreachable_service(redis.exceptions.BusyLoadingError("loading")) == "redis"
    assert unreachable_service(kombu.exceptions.OperationalError("broker gone")) == "broker"
    assert unreachable_service(redis.exceptions.ResponseError("WRONGTYPE")) is None
    assert (
        unreachable_service(wrapped(psycopg.errors.UndefinedTable("x"), sqlalchemy.exc.ProgrammingError))
        is None
    )
    assert unreachable_service(RuntimeError("bug")) is None


def test_the_503_says_when_to_try_again() -> None:
    err = unavailable("the database is unreachable")
    assert err.status == 503
    assert err.headers == {"Retry-After": str(RETRY_AFTER_S)}
    assert err.body() == {
        "error": {"type": "service_unavailable_error", "message": "the database is unreachable"}
    }


def test_task_retry_backoff_grows_and_is_bounded() -> None:
    waits = [TASK_BACKOFF.wait_s(n) for n in range(INFRA_TASK_RETRIES)]
    assert all(0 < w <= INFRA_TASK_BACKOFF_MAX_S * 1.25 for w in waits)
    assert waits[0] <= 2.5 and waits[-1] >= INFRA_TASK_BACKOFF_MAX_S * 0.75
    assert sum(waits) <= INFRA_TASK_RETRIES * INFRA_TASK_BACKOFF_MAX_S * 1.25
