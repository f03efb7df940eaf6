"""request id lookups through a hash index: `ix_api_calls_request_id` holds a 4-byte hash per call

Support looks an upstream call up by its `x-request-id` (`jobs/queries.py:lookup_request`), always by
equality. The B-tree on the 36-character id was 82 bytes per call (bench/footprint.py, a grounded claim),
the largest index of `api_calls`; a hash index keeps a 4-byte hash code and the row's address per entry,
about a third of that, and is read the same way (`request_id = …`). Postgres only: SQLite keeps its B-tree.
Rebuilding the index scans `api_calls` once (plain CREATE INDEX: it blocks writes to the table while it
runs, a maintenance window on a large table).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-16 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_api_calls_request_id"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index(INDEX, table_name="api_calls")
    op.create_index(INDEX, "api_calls", ["request_id"], postgresql_using="hash")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index(INDEX, table_name="api_calls")
    op.create_index(INDEX, "api_calls", ["request_id"])
