"""Declarative base, naming convention and portable column types.

Why a naming convention: Alembic can only drop or alter constraints it can name, and SQLite batch
migrations need deterministic names. Why portable types: the same models serve Postgres (server mode)
and SQLite (embedded mode), so JSON becomes JSONB only on Postgres and big integer keys stay
autoincrementing on SQLite.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Index, Integer, MetaData, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSONB on Postgres (compact, indexable), plain JSON text elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only autoincrements INTEGER PRIMARY KEY.
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")


def partial_index(name: str, *columns: str, where: str) -> Index:
    """An index holding only the rows `where` says, in literal SQL that both Postgres and SQLite read (a
    partial index: Postgres can prove a prepared statement with the same condition matches it)."""
    return Index(name, *columns, postgresql_where=text(where), sqlite_where=text(where))


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on every backend (SQLite drops the zone; this restores it)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; use datetime.now(UTC)")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    """The one clock the data layer uses."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Base of every factgate table."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
