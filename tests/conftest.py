"""Shared fixtures: a migrated Postgres database per session, a migrated SQLite file, Redis.

Postgres databases are clones of a template migrated once per test process (tests/services.py); SQLite
files are copies of one migrated once per session. Under xdist each worker has its own of both.
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from sqlalchemy import Engine
from sqlalchemy.orm import Session

import migrations
from models import make_engine
from tests.schedule import Module, interleave, positions
from tests.services import (
    MAX_XDIST_WORKERS,
    REDIS_URL,
    create_pg_database,
    drop_pg_database,
    drop_template_database,
    unavailable,
)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per core, at most as many as the suite has Redis databases for."""
    cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_XDIST_WORKERS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (`make test`: `--dist loadfile --no-loadscope-reorder`, whole modules go to whichever
    worker is free, in collection order), modules that mostly wait on a clock are mixed with modules that
    keep the CPU busy, long ones first (tests/schedule.py says how and why). Module fixtures (a server, an
    embedded worker, a shared stack) stay on one worker. Without xdist nothing changes."""
    if not hasattr(config, "workerinput"):
        return
    modules: dict[str, Module] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        seen = modules.get(path)
        modules[path] = Module(
            path,
            (seen.tests if seen else 0) + 1,
            slow=(seen is not None and seen.slow) or item.get_closest_marker("slow") is not None,
            e2e=(seen is not None and seen.e2e) or item.get_closest_marker("e2e") is not None,
        )
    workers = int(config.workerinput.get("workercount", 1))
    rank = positions(interleave(list(modules.values()), workers))
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])


_frozen_module: list[str] = [""]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection allocated (every module of the product and the suite, the apps they build at
    import, ~2,000 test items) out of the garbage collector's reach, as the worker does at start
    (workers/bootsteps.py: `_freeze_startup_objects`)."""
    gc.collect()
    gc.freeze()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """When a test module starts (in the process that runs it), collect what earlier modules left dead,
    then move what is still alive (session fixtures, caches) out of the garbage collector's reach too.

    Why: each full collection traversed every live object of the session again. Measured with gc
    callbacks in a `make test` run, the four xdist workers spent 19 s of their ~90 s of CPU collecting
    garbage, 14 s of it in about 15 full collections each (~0.3 s apiece), and the suite is CPU-bound on
    two cores; frozen at each module, 14 s in all. A frozen object that dies later is never freed; the
    session ends soon enough for that not to matter."""
    module = item.nodeid.split("::", 1)[0]
    if module != _frozen_module[0]:
        _frozen_module[0] = module
        gc.collect()
        gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def _pg_template_dropped() -> Iterator[None]:
    """The template database this process may have made is dropped when the session ends."""
    yield
    drop_template_database()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh Postgres database at the head migration, dropped at the end of the session."""
    try:
        url = create_pg_database(migrated=True)
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture(scope="session")
def pg_engine(pg_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def db(pg_engine: Engine) -> Iterator[Session]:
    """A session inside an outer transaction that is rolled back after the test.

    Code under test may commit: commits become savepoints (join_transaction_mode).
    """
    with pg_engine.connect() as conn:
        outer = conn.begin()
        session = Session(bind=conn, join_transaction_mode="create_savepoint", expire_on_commit=False)
        try:
            yield session
        finally:
            session.close()
            outer.rollback()


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file at the head migration per session; `sqlite_url` copies it."""
    path = tmp_path_factory.mktemp("sqlite-template") / "factgate.db"
    migrations.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path, _sqlite_template: Path) -> str:
    """A SQLite file of the test's own at the head migration."""
    path = tmp_path / "factgate.db"
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def redis_client() -> Iterator[redis_lib.Redis]:
    """Real Redis (db 15). Tests must only touch keys under their own prefix."""
    client = redis_lib.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except Exception as exc:
        unavailable("Redis", exc)
        raise
    yield client
    client.close()
