"""lifecycle: deleted and purged jobs, per-tenant retention, removed tenants, the usage roll-up

Nothing used to leave the database. A job can now be deleted by its tenant (`jobs.deleted_at`: every read
treats it as gone at once) or outlive its retention (`jobs.purged_at`: its items, staged rows, webhook
deliveries and per-attempt `api_calls` rows are gone, the job row and summary stay one more retention
period); `tenants.retention_days` overrides FACTGATE_RETENTION_DAYS, and `tenants.deleted_at` marks a
removed tenant. The purge (jobs/purge.py) removes rows in batches; before an `api_calls` row goes, it is
added to `usage_days` (tenant, UTC day, endpoint, model) in the same statement, so `/v1/usage` and the
budgets read roll-up plus live rows and give the same totals before and after.

`ix_jobs_purge` is partial (deleted or purged jobs only): the purge's queue stays the size of what is left
to purge. All columns are nullable additions and one new table: no rewrite of `jobs` on Postgres, and plain
ALTER TABLE ADD COLUMN on SQLite.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-15 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# models/jobs.py:PURGE_PENDING_SQL
PURGE_PENDING_SQL = "deleted_at IS NOT NULL OR purged_at IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("purged_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_jobs_purge",
        "jobs",
        ["id"],
        postgresql_where=sa.text(PURGE_PENDING_SQL),
        sqlite_where=sa.text(PURGE_PENDING_SQL),
    )
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("retention_days", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "usage_days",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("endpoint", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("searches", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_usage_days_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "day", "endpoint", "model", name=op.f("pk_usage_days")),
    )


def downgrade() -> None:
    op.drop_table("usage_days")
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("deleted_at")
        batch_op.drop_column("retention_days")
    op.drop_index("ix_jobs_purge", table_name="jobs")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("purged_at")
        batch_op.drop_column("deleted_at")
