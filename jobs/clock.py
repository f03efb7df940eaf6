"""One clock for leases and dispatch marks: the database's, never a host's wall clock.

Why: a lease is written by the worker that holds the item and read by the sweeper on another host, and a
dispatch mark is written by the leader and read by the sweeper. With each host's own clock, a worker whose
clock ran 90 s behind wrote leases that had already run out by the sweeper's clock, and its running items
were sent a second time (the multi-host drill's clock-skew scenario: 10 duplicate upstream calls in a job
of 350). On Postgres these times are `now()` of the database, computed in the statement itself (no extra
round trip); SQLite (embedded mode, one process on one host) keeps the process's clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func
from sqlalchemy.orm import Session

from models import utcnow


def uses_database_clock(session: Session | Connection) -> bool:
    """Whether the database behind `session` keeps the time (Postgres)."""
    dialect = session.dialect if isinstance(session, Connection) else session.get_bind().dialect
    return dialect.name == "postgresql"


def now_of(session: Session | Connection) -> Any:
    """Now, as a value for a statement: the database's `now()` on Postgres, else this process's time."""
    return func.now() if uses_database_clock(session) else utcnow()


def after(session: Session | Connection, seconds: float) -> Any:
    """`seconds` from now (negative: ago), by the same clock as `now_of`."""
    delta = timedelta(seconds=seconds)
    if uses_database_clock(session):
        return func.now() + delta
    moment: datetime = utcnow() + delta
    return moment
