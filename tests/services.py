"""Where the test suite finds Postgres and Redis, and the rule for when they are missing.

Under CI=true a test that needs a service fails when the service is unreachable; it never skips.
On a laptop without the services those tests skip with a message saying how to start them.
"""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PG_ADMIN_URL = os.environ.get(
    "FACTGATE_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
# One Redis server for the suite; tests pick numbered databases on it. Point this at another server
# (e.g. redis://127.0.0.1:6390) to run two suites side by side without them flushing each other's data.
REDIS_BASE = os.environ.get("FACTGATE_TEST_REDIS_BASE", "redis://127.0.0.1:6379").rstrip("/")


def redis_db_url(db: int) -> str:
    """The URL of database `db` on the suite's Redis server."""
    return f"{REDIS_BASE}/{db}"


REDIS_URL = os.environ.get("FACTGATE_TEST_REDIS_URL", redis_db_url(15))


def unavailable(what: str, exc: BaseException) -> None:
    """Fail under CI, skip elsewhere — never silently pass."""
    message = f"{what} is unreachable ({type(exc).__name__}: {exc}); run `make services`"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def create_pg_database(prefix: str = "factgate_test") -> str:
    """Create a fresh, uniquely named Postgres database and return its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop_pg_database(url: str) -> None:
    """Drop a database made by `create_pg_database`, closing stray connections first."""
    name = make_url(url).database
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
