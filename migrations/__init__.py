"""factgate: Alembic environment and versions — the one way the schema changes (Postgres and SQLite)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

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


def downgrade(url: str, revision: str) -> None:
    """Step the database at `url` back to `revision` (tests and rollbacks)."""
    command.downgrade(alembic_config(url), revision)
