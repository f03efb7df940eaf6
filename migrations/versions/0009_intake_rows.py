"""intake_rows: a lasting staging table for streamed submissions, whose items are built after the 202

A streamed NDJSON or CSV body is COPYed, row by row as it is validated, into `intake_rows` under its job's
id (jobs/bulk_load.py:StagedRows). Up to FACTGATE_INTAKE_DEFER_ROWS rows, the items are built from it before
the request answers, and the rows deleted in the same transaction, as the temporary staging table did
before. Above it the job is committed `validating` with its rows staged here, and the `start_job` task
builds the items (jobs/bulk_load.py:build_staged): the 202 no longer waits for one INSERT of a million items
into a table with six indexes, a foreign key and generated columns.

The table is logged (not UNLOGGED, not TEMPORARY): a job answered 202 must survive a Postgres restart or a
worker killed mid-build, and its rows are all it has until the items exist.

One btree index, on `job_id`: the build and the deletes read one job's rows. Every row of a job carries the
same key, which Postgres (13+) deduplicates in the index, so it stays a few pages per job of rows.

No primary key and no foreign key to `jobs`, on purpose: a foreign key is an RI trigger fired per row
inserted — a million lookups of the same job row during the COPY, the very per-row cost this table avoids
on `items`. The rows are short-lived and always deleted by our code: by the build, in the transaction that
creates the items (`build_staged`, or the intake itself for a small job), by `build_staged` when the job was
cancelled while validating, and by `jobs/finalize.py:maybe_finalize` when a job ends with rows left (a
cancelled job whose build never ran). A rolled-back submission leaves none (the COPY was in its
transaction). factgate never deletes a job row; an operator who does removes its staged rows with it
(`DELETE FROM intake_rows WHERE job_id NOT IN (SELECT id FROM jobs)` finds any left).

SQLite (embedded mode) gets the table too, to keep one schema; its intake never streams, so it stays empty.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-08 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "intake_rows",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("row", sa.Integer(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("label", sa.Boolean(), nullable=True),
        sa.Column("kind", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("in_query", sa.Boolean(), nullable=True),
    )
    op.create_index("ix_intake_rows_job", "intake_rows", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_intake_rows_job", table_name="intake_rows")
    op.drop_table("intake_rows")
