"""The schema is built only by Alembic: upgrade → downgrade → upgrade on both backends, one head."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

import migrations
from jobs.intake import UnitSpec, create_job
from jobs.tenancy import create_token
from models import Base, make_engine, make_session_factory, session_scope
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


# The migrations whose downgrade rebuilds (SQLite batch mode) or alters a table that others reference with
# ON DELETE CASCADE: jobs, items and tenants. Each step goes to the revision before one of them.
REBUILDING_DOWNGRADES = ("0009", "0005", "0003", "0002")


def _with_jobs(url: str) -> list[str]:
    """A database at the head holding two tenants' jobs (one live, one ended each) with items; the ids."""
    migrations.upgrade(url)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            ids = []
            for name in ("mig-a", "mig-b"):
                tenant_id = create_token(session, name).tenant_id
                for n in range(2):
                    units = [UnitSpec("claims", f"c{i}", "grounded", {"claim": str(i)}) for i in range(3)]
                    job, _ = create_job(session, tenant_id=tenant_id, kind="claims", options={}, units=units)
                    ids.append(str(job.id))
                    if n:
                        job.status = "completed"
        return ids
    finally:
        engine.dispose()


def _counts(engine: Engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        return (
            int(conn.scalar(text("SELECT count(*) FROM tenants")) or 0),
            int(conn.scalar(text("SELECT count(*) FROM jobs")) or 0),
            int(conn.scalar(text("SELECT count(*) FROM items")) or 0),
        )


def _downgrade_keeps_every_row(url: str) -> None:
    _with_jobs(url)
    engine = make_engine(url)
    try:
        before = _counts(engine)
        assert before == (2, 4, 12)
        for revision in REBUILDING_DOWNGRADES:
            migrations.downgrade(url, revision)
            assert _counts(engine) == before, f"rows lost downgrading to {revision}"
        migrations.upgrade(url)
        assert _counts(engine) == before
        with engine.connect() as conn:
            orphans = conn.scalar(
                text("SELECT count(*) FROM items WHERE job_id NOT IN (SELECT id FROM jobs)")
            )
        assert orphans == 0
    finally:
        engine.dispose()


def test_sqlite_downgrades_keep_every_job_and_item(tmp_path: Path) -> None:
    """Batch mode rebuilds a table by copying it, dropping the old one and renaming the copy; with foreign
    keys on, dropping `jobs` cascaded to every item (and `tenants` to every job): `db downgrade 0009` on an
    embedded database left 0 jobs and 0 items."""
    _downgrade_keeps_every_row(f"sqlite:///{tmp_path / 'd.db'}")


def test_postgres_downgrades_keep_every_job_and_item() -> None:
    try:
        url = create_pg_database("factgate_mig")
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    try:
        _downgrade_keeps_every_row(url)
    finally:
        drop_pg_database(url)
