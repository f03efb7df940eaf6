"""report columns: items.claim_p and items.claim_label (generated), a covering index for the claims report,
jobs.request_counts (stored when a job ends)

On PostgreSQL the generated columns are STORED, so adding them rewrites the items table once (minutes on a
table of tens of millions of rows: run it in a maintenance window). SQLite can only add VIRTUAL generated
columns; it computes them on read, from the same JSON.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 10:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# models/jobs.py: CLAIM_P_SQL and CLAIM_LABEL_SQL (PostgreSQL).
CLAIM_P_PG = (
    "CASE WHEN stage = 'claim' AND status = 'done' AND jsonb_typeof(output -> 'p') = 'number' "
    "THEN CASE WHEN (output ->> 'p')::numeric BETWEEN 0 AND 1 THEN (output ->> 'p')::double precision END END"
)
CLAIM_LABEL_PG = (
    "CASE WHEN stage = 'claim' AND jsonb_typeof(input -> 'label') = 'boolean' "
    "THEN (input ->> 'label')::boolean END"
)
# The same rules in SQLite's JSON functions (json_type is 'real' or 'integer' for a number).
CLAIM_P_SQLITE = (
    "CASE WHEN stage = 'claim' AND status = 'done' AND json_type(output, '$.p') IN ('real', 'integer') "
    "AND json_extract(output, '$.p') BETWEEN 0 AND 1 THEN CAST(json_extract(output, '$.p') AS REAL) END"
)
CLAIM_LABEL_SQLITE = (
    "CASE WHEN stage = 'claim' AND json_type(input, '$.label') IN ('true', 'false') "
    "THEN json_extract(input, '$.label') END"
)


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.add_column(
        "items",
        sa.Column(
            "claim_p",
            sa.Float(),
            sa.Computed(CLAIM_P_SQLITE if sqlite else CLAIM_P_PG, persisted=not sqlite),
            nullable=True,
        ),
    )
    op.add_column(
        "items",
        sa.Column(
            "claim_label",
            sa.Boolean(),
            sa.Computed(CLAIM_LABEL_SQLITE if sqlite else CLAIM_LABEL_PG, persisted=not sqlite),
            nullable=True,
        ),
    )
    op.create_index(
        "ix_items_claim_scores",
        "items",
        ["job_id", "mode", "position"],
        postgresql_include=["claim_p", "claim_label", "status", "custom_id"],
    )
    op.add_column(
        "jobs",
        sa.Column(
            "request_counts",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
    )


def downgrade() -> None:
    op.drop_index("ix_items_claim_scores", table_name="items")
    # Plain ALTER TABLE … DROP COLUMN on both backends (SQLite ≥ 3.35 has it). Not batch mode on SQLite: it
    # rebuilds the table, and dropping the old `jobs` table with foreign keys on cascades to every item.
    for table, column in (("items", "claim_label"), ("items", "claim_p"), ("jobs", "request_counts")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
