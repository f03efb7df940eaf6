"""verdict store: a tenant's finished Decisions requests, reused by its later jobs (issue 35)

`verdicts` holds one finished request's answers per (tenant, key), the key the SHA-256 of the endpoint,
upstream, model, grounding mode and canonical body (checks/reuse.py); the primary key is the lookup's one
indexed read, `ix_verdicts_job` the purge's batches. `api_calls.reused` marks an answer taken from the store
(cost 0, the original request id), `usage_days.reused` counts the purged ones, and `tenants.reuse` is the
tenant's switch (`factgate tenants set NAME --reuse off`). New columns have constant defaults: no rewrite of
`api_calls` on Postgres, plain ALTER TABLE ADD COLUMN on SQLite. The downgrade drops them; an answer reused
before it stays an `api_calls` row of cost 0 with its original request id.

Revision ID: 0016
Revises: 0012
Create Date: 2026-12-03 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0012"
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
    with op.batch_alter_table("api_calls", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("reused", sa.Boolean(), server_default=sa.text("false"), nullable=False)
        )
    with op.batch_alter_table("usage_days", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reused", sa.BigInteger(), server_default="0", nullable=False))
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reuse", sa.Boolean(), server_default=sa.text("true"), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("tenants", schema=None) as batch_op:
        batch_op.drop_column("reuse")
    with op.batch_alter_table("usage_days", schema=None) as batch_op:
        batch_op.drop_column("reused")
    with op.batch_alter_table("api_calls", schema=None) as batch_op:
        batch_op.drop_column("reused")
    op.drop_index("ix_verdicts_job", table_name="verdicts")
    op.drop_table("verdicts")
