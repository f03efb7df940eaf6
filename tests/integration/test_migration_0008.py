"""Migration 0008 on both backends: the dedupe, parent and lease indexes of items become partial (only the
rows they are read for), the queries that read them still use them on Postgres, and a downgrade restores
the full indexes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, text

import migrations
from models import make_engine
from tests.services import create_pg_database, drop_pg_database, unavailable

pytestmark = pytest.mark.integration

PARTIAL = {
    "ix_items_job_dedupe": "dedupe_key IS NOT NULL",
    "ix_items_parent_id": "parent_id IS NOT NULL",
    "ix_items_running_lease": "status = 'running'",
}


def _index_sql(engine: Engine) -> dict[str, str]:
    """Each items index's definition as the database reports it (lower case, quotes and parens removed)."""
    if engine.dialect.name == "sqlite":
        query = (
            "SELECT name, sql FROM sqlite_master "
            "WHERE type = 'index' AND tbl_name = 'items' AND sql IS NOT NULL"
        )
    else:
        query = "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'items'"
    with engine.connect() as conn:
        rows = conn.execute(text(query)).all()
    return {name: sql.lower().replace('"', "").replace("(", "").replace(")", "") for name, sql in rows}


def _seed(engine: Engine) -> None:
    tenant, job = str(uuid.uuid4()), str(uuid.uuid4())
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO tenants (id, name, created_at) VALUES (:id, :name, CURRENT_TIMESTAMP)"),
            {"id": tenant, "name": f"t-{tenant[:8]}"},
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, tenant_id, kind, status, options, metadata, total_items, "
                "warnings, simulated, priority, created_at) VALUES (:id, :t, 'claims', 'queued', '{}', "
                "'{}', 3, '[]', false, 'batch', CURRENT_TIMESTAMP)"
            ),
            {"id": job, "t": tenant},
        )
        for pos, (cid, status, dedupe) in enumerate(
            (("a", "pending", "k"), ("b", "running", None), ("c", "done", "k"))
        ):
            conn.execute(
                text(
                    "INSERT INTO items (job_id, stage, endpoint, position, custom_id, mode, input, status, "
                    "attempts, tries, dedupe_key) VALUES (:j, 'claim', 'decisions', :pos, :cid, 'grounded', "
                    "'{}', :status, 0, 0, :dedupe)"
                ),
                {"j": job, "pos": pos, "cid": cid, "status": status, "dedupe": dedupe},
            )


def _plans_use_partial_indexes(engine: Engine) -> None:
    """The sweeper's, the duplicates' and the children's lookups are planned on the partial indexes."""
    queries = {
        "ix_items_running_lease": "SELECT id FROM items WHERE status = 'running' AND lease_until < now()",
        "ix_items_job_dedupe": "SELECT id FROM items WHERE job_id = :j AND dedupe_key = 'k'",
        "ix_items_parent_id": "SELECT id FROM items WHERE parent_id = 1",
    }
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        job = conn.execute(text("SELECT id FROM jobs LIMIT 1")).scalar_one()
        for index, query in queries.items():
            plan = "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {query}"), {"j": job}))
            assert index in plan, plan


def _roundtrip(url: str) -> None:
    engine = make_engine(url)
    try:
        migrations.upgrade(url, "0007")
        _seed(engine)
        before = _index_sql(engine)
        assert "ix_items_status_lease" in before
        assert not any(" where " in before[name] for name in ("ix_items_job_dedupe", "ix_items_parent_id"))
        migrations.upgrade(url, "0008")
        after = _index_sql(engine)
        assert "ix_items_status_lease" not in after
        for name, where in PARTIAL.items():
            assert f" where {where.lower()}" in after[name].replace("::text", ""), after[name]
        if engine.dialect.name == "postgresql":
            _plans_use_partial_indexes(engine)
        migrations.downgrade(url, "0007")
        restored = _index_sql(engine)
        assert "ix_items_running_lease" not in restored
        assert restored["ix_items_status_lease"] == before["ix_items_status_lease"]
        for name in ("ix_items_job_dedupe", "ix_items_parent_id"):
            assert " where " not in restored[name]
        with engine.connect() as conn:  # the data itself survives the round trip
            assert conn.execute(text("SELECT count(*) FROM items")).scalar() == 3
        migrations.upgrade(url)
        assert {ix["name"] for ix in inspect(engine).get_indexes("items")} >= set(PARTIAL)
    finally:
        engine.dispose()


def test_0008_on_sqlite(tmp_path: Path) -> None:
    _roundtrip(f"sqlite:///{tmp_path / 'm.db'}")


def test_0008_on_postgres() -> None:
    try:
        url = create_pg_database("factgate_m8")
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    try:
        _roundtrip(url)
    finally:
        drop_pg_database(url)
