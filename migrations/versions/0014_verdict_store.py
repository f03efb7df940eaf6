"""verdict store: a tenant's finished Decisions requests, reused by its later jobs (issue 35)

`verdicts` holds one finished request's answers per (tenant, key), the key the SHA-256 of the endpoint,
upstream, model, grounding mode and canonical body (checks/reuse.py); the primary key is the lookup's one
indexed read, `ix_verdicts_job` the purge's batches. `api_calls.reused` marks an answer taken from the store
(cost 0, the original request id), `usage_days.reused` counts the purged ones, and `tenants.reuse` is the
tenant's switch (`factgate tenants set NAME --reuse off`). New columns have constant defaults: no rewrite of
`api_calls` on Postgres, plain ALTER TABLE ADD COLUMN on SQLite; the downgrade drops them the same way
(never a batch rebuild: on SQLite, rebuilding `tenants` would cascade to its jobs). An answer reused before
the downgrade stays an `api_calls` row of cost 0 with no status and the original request id.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "verdicts",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("key", sa.LargeBinary(length=32), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("endpoint", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=64), nullable=False),
        sa.Column("grounded", sa.Boolean(), nullable=False),
        sa.Column("request_id", sa.String(length=128), nullable=True),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "answer",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_verdicts_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_verdicts_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "key", name=op.f("pk_verdicts")),
    )
    op.create_index("ix_verdicts_job", "verdicts", ["job_id"])
    # Plain ADD COLUMN in SQL on both backends: Alembic rebuilds a SQLite table for a column whose default is
    # an expression, and a rebuild of `tenants` drops the table, which with foreign keys on cascades to
    # every job. TRUE/FALSE are constants to SQLite (>= 3.23).
    op.execute("ALTER TABLE api_calls ADD COLUMN reused BOOLEAN DEFAULT false NOT NULL")
    op.execute("ALTER TABLE usage_days ADD COLUMN reused BIGINT DEFAULT 0 NOT NULL")
    op.execute("ALTER TABLE tenants ADD COLUMN reuse BOOLEAN DEFAULT true NOT NULL")


def downgrade() -> None:
    # Plain DROP COLUMN on both backends (SQLite >= 3.35): a batch rebuild of `tenants` on SQLite drops the
    # table, and with foreign keys on that would cascade to every job of every tenant.
    for table, column in (("tenants", "reuse"), ("usage_days", "reused"), ("api_calls", "reused")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    op.drop_index("ix_verdicts_job", table_name="verdicts")
    op.drop_table("verdicts")
