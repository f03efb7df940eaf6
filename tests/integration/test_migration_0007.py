"""Migration 0007 on both backends: the generated report columns fill in for items stored before it, follow
later writes, and go away again on downgrade (with the index and jobs.request_counts)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, text

import migrations
from models import make_engine
from tests.services import create_pg_database, drop_pg_database, unavailable

pytestmark = pytest.mark.integration

ITEMS = [
    # (custom_id, stage, status, output, input, expected claim_p, expected claim_label)
    ("a", "claim", "done", {"p": 0.75}, {"label": True}, 0.75, True),
    ("b", "claim", "done", {"p": 1}, {"label": False}, 1.0, False),
    ("c", "claim", "failed", {"p": 0.4}, {"label": None}, None, None),  # not done: no probability
    ("d", "claim", "done", {"p": "0.4"}, {}, None, None),  # not a number
    ("e", "claim", "done", {"p": 1.5}, {"label": "yes"}, None, None),  # out of range, not a boolean
    ("f", "claim", "done", None, {"label": True}, None, True),
    ("g", "question", "done", {"p": 0.5}, {"label": True}, None, None),  # not a claim
]


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
                "warnings, simulated, priority, created_at) VALUES (:id, :t, 'claims', 'completed', '{}', "
                "'{}', 7, '[]', false, 'batch', CURRENT_TIMESTAMP)"
            ),
            {"id": job, "t": tenant},
        )
        for pos, (cid, stage, status, output, input_, _p, _l) in enumerate(ITEMS):
            conn.execute(
                text(
                    "INSERT INTO items (job_id, stage, endpoint, position, custom_id, mode, input, output, "
                    "status, attempts, tries) VALUES (:j, :stage, 'decisions', :pos, :cid, 'grounded', "
                    ":input, :output, :status, 1, 1)"
                ),
                {
                    "j": job,
                    "stage": stage,
                    "pos": pos,
                    "cid": cid,
                    "input": json.dumps(input_),
                    "output": None if output is None else json.dumps(output),
                    "status": status,
                },
            )


def _generated(engine: Engine) -> dict[str, tuple[float | None, bool | None]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT custom_id, claim_p, claim_label FROM items ORDER BY position")).all()
    return {cid: (p, None if label is None else bool(label)) for cid, p, label in rows}


def _roundtrip(url: str) -> None:
    engine = make_engine(url)
    try:
        migrations.upgrade(url, "0006")
        _seed(engine)  # rows written before the columns exist
        migrations.upgrade(url, "0007")
        assert _generated(engine) == {cid: (p, label) for cid, *_rest, p, label in ITEMS}
        # Later writes recompute them: a retried claim that now has an answer.
        with engine.begin() as conn:
            conn.execute(text("UPDATE items SET status = 'done' WHERE custom_id = 'c'"))
        assert _generated(engine)["c"] == (0.4, None)
        insp = inspect(engine)
        assert "ix_items_claim_scores" in {ix["name"] for ix in insp.get_indexes("items")}
        assert "request_counts" in {c["name"] for c in insp.get_columns("jobs")}
        migrations.downgrade(url, "0006")
        insp = inspect(engine)
        assert not {"claim_p", "claim_label"} & {c["name"] for c in insp.get_columns("items")}
        assert "ix_items_claim_scores" not in {ix["name"] for ix in insp.get_indexes("items")}
        assert "request_counts" not in {c["name"] for c in insp.get_columns("jobs")}
        with engine.connect() as conn:  # the data itself survives the round trip
            assert conn.execute(text("SELECT count(*) FROM items")).scalar() == len(ITEMS)
        migrations.upgrade(url)
        assert _generated(engine)["a"] == (0.75, True)
    finally:
        engine.dispose()


def test_0007_on_sqlite(tmp_path: Path) -> None:
    _roundtrip(f"sqlite:///{tmp_path / 'm.db'}")


def test_0007_on_postgres() -> None:
    try:
        url = create_pg_database("factgate_m7")
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    try:
        _roundtrip(url)
    finally:
        drop_pg_database(url)
