"""fair scheduler: tenant weights, job priority and schedule, item endpoint and scope, ready/in-flight indexes

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
READY = "status = 'pending' AND enqueued_at IS NULL AND duplicate_of IS NULL"
IN_FLIGHT = "enqueued_at IS NOT NULL AND status IN ('pending', 'running')"


def upgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("weight", sa.Float(), server_default="1", nullable=False))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("priority", sa.String(length=16), server_default="batch", nullable=False)
        )
        batch_op.add_column(sa.Column("schedule", JSON, nullable=True))
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("endpoint", sa.String(length=16), server_default="decisions", nullable=False)
        )
        batch_op.add_column(sa.Column("scope", sa.String(length=48), nullable=True))
    # Items created before this revision: the endpoint of their first call, from stage and job kind.
    op.execute(
        "UPDATE items SET endpoint = 'agent' WHERE stage = 'investigation' OR (stage = 'question' AND "
        "job_id IN (SELECT id FROM jobs WHERE kind = 'answer'))"
    )
    op.execute(
        "UPDATE items SET endpoint = 'search' WHERE stage = 'question' AND "
        "job_id IN (SELECT id FROM jobs WHERE kind = 'quote')"
    )
    op.create_index(
        "ix_items_ready",
        "items",
        ["job_id", "endpoint", "position", "id"],
        postgresql_where=sa.text(READY),
        sqlite_where=sa.text(READY),
    )
    op.create_index("ix_api_calls_created", "api_calls", ["created_at"])
    op.create_index(
        "ix_items_in_flight",
        "items",
        ["scope", "enqueued_at"],
        postgresql_where=sa.text(IN_FLIGHT),
        sqlite_where=sa.text(IN_FLIGHT),
    )


def downgrade() -> None:
    op.drop_index("ix_items_in_flight", table_name="items")
    op.drop_index("ix_items_ready", table_name="items")
    op.drop_index("ix_api_calls_created", table_name="api_calls")
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.drop_column("scope")
        batch_op.drop_column("endpoint")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("schedule")
        batch_op.drop_column("priority")
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("weight")
