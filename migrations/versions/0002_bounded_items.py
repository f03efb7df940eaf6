"""bounded item life and exact accounting: items.tries and not_before, api_calls.wait_ms, item index

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 07:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tries", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("api_calls", schema=None) as batch_op:
        batch_op.add_column(sa.Column("wait_ms", sa.Float(), server_default="0", nullable=False))
        batch_op.create_index("ix_api_calls_item", ["item_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("api_calls", schema=None) as batch_op:
        batch_op.drop_index("ix_api_calls_item")
        batch_op.drop_column("wait_ms")
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.drop_column("not_before")
        batch_op.drop_column("tries")
