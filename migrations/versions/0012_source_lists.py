"""source lists: a grounded claim's search sources stored once per job and list, not in every item

A grounded claim's output held its search results (title, url, date, snippet), ~950 of its 2,695 bytes
(bench/footprint.py), and the claims of one job whose searches found the same pages repeated them item
after item. New outputs keep `src_ref` (32 hex digits, checks/claim_sources.py) where `sources` was, and
`source_lists` holds each distinct list once per job; readers put it back, so every result line, export,
report and request lookup is unchanged. Rows written before stay as they are (readers take both), so the
upgrade only creates the table. The downgrade puts every list back into the outputs that name it (one
UPDATE over the items that hold a reference), then drops the table.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-17 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# checks/claim_sources.py: REF_KEY, SOURCES_KEY (spelled out: a migration says what it did then).
_INLINE_PG = (
    "UPDATE items SET output = (items.output - 'src_ref') || jsonb_build_object('sources', s.sources) "
    "FROM source_lists s WHERE items.output ? 'src_ref' AND s.job_id = items.job_id "
    "AND s.digest = CAST(items.output ->> 'src_ref' AS uuid)"
)
_INLINE_SQLITE = (
    "UPDATE items SET output = json_set(json_remove(output, '$.src_ref'), '$.sources', json(("
    "SELECT s.sources FROM source_lists s WHERE s.job_id = items.job_id "
    "AND s.digest = json_extract(items.output, '$.src_ref')))) "
    "WHERE json_extract(output, '$.src_ref') IS NOT NULL"
)


def upgrade() -> None:
    op.create_table(
        "source_lists",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("digest", sa.Uuid(), nullable=False),
        sa.Column(
            "sources",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_source_lists_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "digest", name=op.f("pk_source_lists")),
    )


def downgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    op.execute(_INLINE_PG if pg else _INLINE_SQLITE)
    op.drop_table("source_lists")
