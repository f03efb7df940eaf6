"""Which failures are ours (infrastructure) rather than the item's, and what a tenant may be told about them.

Redis (broker, limiter, budget counters), the database and the broker can all be briefly unreachable. Such
a fault says nothing about the item: the try is given back and the item runs again later — it is never
failed for it. The exception text often names an internal host and port, so it goes to the operator's log
only; the item shows a short, fixed description.
"""

from __future__ import annotations

import kombu.exceptions
import redis.exceptions
import sqlalchemy.exc

# Connection-level faults only: a DataError or IntegrityError is a bug or bad data and is handled apart.
INFRA_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    kombu.exceptions.OperationalError,
    ConnectionError,
    TimeoutError,
)


def is_infrastructure_fault(exc: BaseException) -> bool:
    """True for a fault of Redis, the database or the broker (retry later, never fail the item)."""
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, INFRA_ERRORS)


def service_of(exc: BaseException) -> str:
    """Which kind of service an infrastructure fault is about, for log lines: never where it lives."""
    if isinstance(exc, redis.exceptions.RedisError):
        return "Redis"
    if isinstance(exc, sqlalchemy.exc.SQLAlchemyError):
        return "the database"
    if isinstance(exc, kombu.exceptions.KombuError):
        return "the message broker"
    return "an internal service"


def fault_line(exc: BaseException) -> str:
    """`the database unreachable (OperationalError)`: what a worker's warning says of an infrastructure
    fault; the driver's text (hosts, ports) is left out."""
    return f"{service_of(exc)} unreachable ({type(exc).__name__})"


def describe(exc: BaseException) -> str:
    """A tenant-safe line for an infrastructure fault: which kind of service, never where it lives."""
    service = service_of(exc)
    if service == "Redis":
        service = "the rate limiter / queue store (Redis)"
    return f"temporary infrastructure fault: {service} was unavailable; the item will be tried again"
