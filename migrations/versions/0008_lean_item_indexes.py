"""lean item indexes: the dedupe, parent and lease indexes of items only hold the rows they are read for

A bulk intake inserts up to a million items in one statement, and Postgres writes an entry into every index
of `items` for each of them. Three of those indexes are only ever read for a small subset of the rows:
`ix_items_job_dedupe` for repeated requests (only they keep a dedupe key), `ix_items_parent_id` for child
items (questions' sentences, results, comparisons) and the sweeper's lease index for running items. As
partial indexes they stay the size of that subset, and an insert of new top-level pending items with no
dedupe key writes none of them.

Every query that reads them names a value the predicate implies (`dedupe_key = …`, `parent_id = …`,
`status = 'running'`), so the planner keeps using them. Creating the indexes scans `items` once each (plain
CREATE INDEX, which blocks writes to items while it runs: a maintenance window on a large table).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 11:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# models/jobs.py: DEDUPED_SQL, CHILD_SQL, RUNNING_SQL (the same text on both backends).
DEDUPED_SQL = "dedupe_key IS NOT NULL"
CHILD_SQL = "parent_id IS NOT NULL"
RUNNING_SQL = "status = 'running'"


def upgrade() -> None:
    op.drop_index("ix_items_job_dedupe", table_name="items")
    op.drop_index("ix_items_parent_id", table_name="items")
    op.drop_index("ix_items_status_lease", table_name="items")
    for name, columns, where in (
        ("ix_items_job_dedupe", ["job_id", "dedupe_key"], DEDUPED_SQL),
        ("ix_items_parent_id", ["parent_id"], CHILD_SQL),
        ("ix_items_running_lease", ["lease_until"], RUNNING_SQL),
    ):
        op.create_index(name, "items", columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where))


def downgrade() -> None:
    op.drop_index("ix_items_running_lease", table_name="items")
    op.drop_index("ix_items_parent_id", table_name="items")
    op.drop_index("ix_items_job_dedupe", table_name="items")
    op.create_index("ix_items_status_lease", "items", ["status", "lease_until"])
    op.create_index("ix_items_parent_id", "items", ["parent_id"])
    op.create_index("ix_items_job_dedupe", "items", ["job_id", "dedupe_key"])
