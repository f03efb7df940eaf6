"""Where the test suite finds Postgres and Redis, and the rule for when they are missing.

Under CI=true a test that needs a service fails when the service is unreachable; it never skips.
On a laptop without the services those tests skip with a message saying how to start them.

Parallel runs (`pytest -n N`, pytest-xdist): each worker process is told apart by PYTEST_XDIST_WORKER
(`gw0`, `gw1`, ...). It gets Redis databases of its own for everything the suite flushes (see
`redis_db_url`) and a migrated template database of its own in Postgres, from which every test database
is cloned with `CREATE DATABASE ... TEMPLATE` instead of running the migrations again (see
`create_pg_database`). Database names carry a random suffix, so suites of other people on the same server
never meet ours.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
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

# The databases tests flush (11 the CLI server, 12 the metrics test, 13 the queue stack and the honcho test)
# are a block of three per xdist worker: gw0 (and a run without xdist) keeps 11-13, gw1 gets 8-10, gw2 5-7,
# gw3 2-4. Database 15 is shared by every worker: its tests touch only keys under a prefix of their own. 0
# and 1 are never used (a developer's own data usually lives in 0), nor 14.
FLUSHED_DBS = (11, 12, 13)
_BLOCK_STARTS = (11, 8, 5, 2)
MAX_XDIST_WORKERS = len(_BLOCK_STARTS)
SHARED_DB = 15


def xdist_worker() -> int:
    """This process's xdist worker number (`gw2` → 2); 0 without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def redis_db_url(db: int) -> str:
    """The URL of logical database `db` on the suite's Redis server, for this xdist worker."""
    if db in FLUSHED_DBS:
        worker = xdist_worker()
        if worker >= MAX_XDIST_WORKERS:
            raise RuntimeError(
                f"xdist worker gw{worker}: one Redis server has databases for {MAX_XDIST_WORKERS} workers "
                f"(run with -n {MAX_XDIST_WORKERS} or fewer)"
            )
        db = _BLOCK_STARTS[worker] + FLUSHED_DBS.index(db)
    return f"{REDIS_BASE}/{db}"


REDIS_URL = os.environ.get("FACTGATE_TEST_REDIS_URL", redis_db_url(SHARED_DB))


def unavailable(what: str, exc: BaseException) -> None:
    """Fail under CI, skip elsewhere — never silently pass."""
    message = f"{what} is unreachable ({type(exc).__name__}: {exc}); run `make services`"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _admin_execute(sql: str) -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(sql))
    finally:
        admin.dispose()


def _url_of(name: str) -> str:
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


_template_lock = threading.Lock()
_template: str | None = None


def template_database() -> str:
    """The name of this process's template database at the head migration (made on first use).

    Migrated once per test process (per xdist worker), never connected to again, dropped when the
    process exits. Only `tests/integration/test_migrations.py` runs the migrations on databases of its own.
    """
    global _template  # noqa: PLW0603 - one template per process is the point
    with _template_lock:
        if _template is None:
            import migrations

            name = f"factgate_template_{uuid.uuid4().hex[:10]}"
            _admin_execute(f'CREATE DATABASE "{name}"')
            atexit.register(_drop_quietly, name)
            url = _url_of(name)
            migrations.upgrade(url)  # the engine it used is disposed: nothing stays connected
            _template = name
        return _template


def drop_template_database() -> None:
    """Drop this process's template, if it made one (the session's end; atexit is the fallback)."""
    global _template
    with _template_lock:
        name, _template = _template, None
    if name is not None:
        _drop_quietly(name)


def _drop_quietly(name: str) -> None:
    with contextlib.suppress(Exception):  # the server went away first: nothing left to clean
        _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_pg_database(prefix: str = "factgate_test", *, migrated: bool = False) -> str:
    """Create a fresh, uniquely named Postgres database and return its URL.

    `migrated=True` clones it from this process's template, already at the head migration (a file copy
    inside Postgres, far cheaper than running Alembic); otherwise it is empty.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    if migrated:
        _admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database()}"')
    else:
        _admin_execute(f'CREATE DATABASE "{name}"')
    return _url_of(name)


def drop_pg_database(url: str) -> None:
    """Drop a database made by `create_pg_database`, closing stray connections first."""
    name = make_url(url).database
    _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
