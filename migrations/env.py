"""Alembic environment: runs migrations online against the configured URL.

SQLite cannot ALTER most things in place, so migrations run in batch mode there: a table is rebuilt by
copying it, dropping the old one and renaming the copy. Dropping a table that others reference with
ON DELETE CASCADE deletes their rows when foreign keys are enforced — which every connection of ours turns
on (models/db.py) — so a downgrade through 0010, 0006, 0004 or 0003 once left an embedded database with no
jobs and no items. Migrations therefore run with SQLite's foreign keys off (the pragma has no effect inside
a transaction, so it is set before one begins), and `PRAGMA foreign_key_check` must find nothing once they
have run: a rebuild that left a dangling reference fails the command loudly instead of passing in silence.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, pool

from models import Base
from models.db import make_engine

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    """Emit SQL without a database connection (`alembic upgrade --sql`)."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _check_foreign_keys(connection: Connection) -> None:
    """Fail a SQLite migration run that left rows pointing at rows that are gone."""
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        tables = sorted({str(row[0]) for row in broken})
        raise RuntimeError(
            f"the migrations left {len(broken)} rows referencing missing rows in {', '.join(tables)}; "
            "restore the database from its backup and report this"
        )


def run_migrations_online() -> None:
    """Run against a live connection."""
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    connectable = make_engine(url, poolclass=pool.NullPool)
    with connectable.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=sqlite,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                _check_foreign_keys(connection)
    connectable.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
