"""Shared fixtures: a migrated Postgres database per session, a migrated SQLite file, Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from sqlalchemy import Engine
from sqlalchemy.orm import Session

import migrations
from models import make_engine
from tests.services import REDIS_URL, create_pg_database, drop_pg_database, unavailable


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh Postgres database at the head migration, dropped at the end of the session."""
    try:
        url = create_pg_database()
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    try:
        migrations.upgrade(url)
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


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'factgate.db'}"
    migrations.upgrade(url)
    return url


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
