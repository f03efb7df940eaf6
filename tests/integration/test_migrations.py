"""The schema is built only by Alembic: upgrade → downgrade → upgrade on both backends, one head."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

import migrations
from models import Base, make_engine
from tests.services import create_pg_database, drop_pg_database, unavailable

TABLES = {
    "tenants",
    "api_tokens",
    "jobs",
    "items",
    "api_calls",
    "web_sessions",
    "webhook_deliveries",
    "webhook_attempts",
}


def _roundtrip(url: str) -> None:
    engine = make_engine(url)
    try:
        migrations.upgrade(url)
        assert TABLES <= set(inspect(engine).get_table_names())
        migrations.downgrade(url, "base")
        assert not (TABLES & set(inspect(engine).get_table_names()))
        migrations.upgrade(url)
        assert TABLES <= set(inspect(engine).get_table_names())
        # The models and the migrations describe the same schema.
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == [], diff
    finally:
        engine.dispose()


def test_sqlite_upgrade_downgrade_upgrade(tmp_path: Path) -> None:
    _roundtrip(f"sqlite:///{tmp_path / 'm.db'}")


def test_postgres_upgrade_downgrade_upgrade() -> None:
    try:
        url = create_pg_database("factgate_mig")
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    try:
        _roundtrip(url)
    finally:
        drop_pg_database(url)


def test_single_head() -> None:
    script = ScriptDirectory.from_config(migrations.alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1


def test_ensure_current_upgrades_a_new_or_older_database_and_skips_one_at_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'e.db'}"  # its directory is made too
    engine = make_engine(url)
    try:
        migrations.ensure_current(url)  # a new file (in a new directory): the whole schema
        assert TABLES <= set(inspect(engine).get_table_names())
        migrations.downgrade(url, "0006")
        migrations.ensure_current(url)  # an older revision: brought to the head
        with engine.connect() as conn:
            current = set(MigrationContext.configure(conn).get_current_heads())
        assert current == set(ScriptDirectory(str(migrations.HERE)).get_heads())
        assert migrations.head_revisions() == tuple(sorted(current))

        def refuse(*_args: object) -> None:
            raise AssertionError("a database at the head was migrated again")

        monkeypatch.setattr(migrations, "upgrade", refuse)
        migrations.ensure_current(url)  # at the head: one read of the version table, no upgrade
    finally:
        engine.dispose()
