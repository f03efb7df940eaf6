"""factgate: Alembic environment and versions — the one way the schema changes (Postgres and SQLite)."""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.pool import NullPool

from models.db import make_engine

HERE = Path(__file__).resolve().parent


def alembic_config(url: str) -> Config:
    """An Alembic config that works from an installed package (no alembic.ini on the CWD needed)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    # ConfigParser interpolation would choke on '%' in passwords.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` to `revision`."""
    command.upgrade(alembic_config(url), revision)


@functools.cache
def head_revisions() -> tuple[str, ...]:
    """The heads of the migration scripts (read once per process: the scripts do not change under it)."""
    return tuple(sorted(ScriptDirectory(str(HERE)).get_heads()))


def ensure_current(url: str) -> None:
    """Bring the database at `url` to the head unless it is there already.

    Why not always `upgrade`: Alembic reads every migration script and runs env.py each time, ~25 ms of
    CPU even when there is nothing to do, and the embedded app and the CLI's local commands open their
    SQLite file at every start (the test suite does so hundreds of times). Reading the version table is
    one query; a database at another revision, or without one, takes the full upgrade."""
    engine = make_engine(url, poolclass=NullPool)  # as env.py connects: a SQLite file's directory is made
    try:
        with engine.connect() as connection:
            current = tuple(sorted(MigrationContext.configure(connection).get_current_heads()))
    finally:
        engine.dispose()
    if current != head_revisions():
        upgrade(url)


def downgrade(url: str, revision: str) -> None:
    """Step the database at `url` back to `revision` (tests and rollbacks)."""
    command.downgrade(alembic_config(url), revision)
