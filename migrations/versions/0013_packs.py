"""packs: several items answered by one upstream request

A packed request (docs/spec.md §9) answers several items — an answer's sentences, a job's ungrounded
claims — that stay items of their own. `items.pack_of` names the pack's head on every other member: only
the head is dispatched (the ready index leaves members out), and claiming the head claims its pending
members. `api_calls.pack_items` lists every item a packed attempt answered, so a request id resolves to all
of them while the attempt is one row, billed once.

The downgrade drops both columns with plain `ALTER TABLE … DROP COLUMN` (SQLite 3.35 and later, and
Postgres), not a batch rebuild: rebuilding `items` on SQLite with foreign keys on would cascade into every
child item. Members of packs not yet sent become ordinary ready items again.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 14:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
OLD_READY = "status = 'pending' AND enqueued_at IS NULL AND duplicate_of IS NULL"
READY = "status = 'pending' AND enqueued_at IS NULL AND duplicate_of IS NULL AND pack_of IS NULL"
PACKED = "pack_of IS NOT NULL AND status = 'pending'"


def _ready_index(where: str) -> None:
    op.create_index(
        "ix_items_ready",
        "items",
        ["job_id", "endpoint", "position", "id"],
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )


def upgrade() -> None:
    op.add_column("items", sa.Column("pack_of", sa.BigInteger().with_variant(sa.Integer(), "sqlite")))
    op.add_column("api_calls", sa.Column("pack_items", JSON, nullable=True))
    op.create_index(
        "ix_items_pack_of",
        "items",
        ["pack_of"],
        postgresql_where=sa.text(PACKED),
        sqlite_where=sa.text(PACKED),
    )
    op.drop_index("ix_items_ready", table_name="items")
    _ready_index(READY)


def downgrade() -> None:
    op.drop_index("ix_items_ready", table_name="items")
    op.drop_index("ix_items_pack_of", table_name="items")
    op.execute("ALTER TABLE api_calls DROP COLUMN pack_items")
    op.execute("ALTER TABLE items DROP COLUMN pack_of")
    _ready_index(OLD_READY)
