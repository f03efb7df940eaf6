"""tenant governance: quotas, daily and monthly budgets, an own upstream key (encrypted)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("max_items_per_job", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("max_active_jobs", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("daily_budget_usd", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("monthly_budget_usd", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("upstream_key_encrypted", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("upstream_key_fingerprint", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("upstream_key_set_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("api_calls", schema=None) as batch_op:
        batch_op.create_index("ix_api_calls_tenant_created", ["tenant_id", "created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("api_calls", schema=None) as batch_op:
        batch_op.drop_index("ix_api_calls_tenant_created")
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        for name in (
            "upstream_key_set_at",
            "upstream_key_fingerprint",
            "upstream_key_encrypted",
            "monthly_budget_usd",
            "daily_budget_usd",
            "max_active_jobs",
            "max_items_per_job",
        ):
            batch_op.drop_column(name)
