"""`/healthz` (liveness) and `/readyz` (readiness): two questions, two answers.

Liveness asks "is this process able to answer at all?": `/healthz` touches no dependency, so a Postgres
restart never makes an orchestrator kill healthy web processes (restarting them would not bring the
database back, and would drop every request in flight). Readiness asks "can it serve requests right now?":
`/readyz` runs `SELECT 1` on the database and `PING` on Redis (server mode), each bounded by
READY_TIMEOUT_S, and answers 503 naming what failed, so a load balancer stops sending traffic until it is
back. Embedded mode (SQLite, no Redis) checks the database only: there is nothing else to reach.

Neither says where a dependency lives or why it failed (the log does): both are unauthenticated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from flask import Blueprint, Response, jsonify
from redis import Redis
from sqlalchemy import text

from web.errors import RETRY_AFTER_S, unreachable_service
from web.session import resources

log = logging.getLogger("factgate.web")

health = Blueprint("health", __name__)

# Each readiness check gives up after this long (the database connect and statement, the Redis socket):
# a probe must answer well within an orchestrator's probe timeout even when a dependency drops packets.
READY_TIMEOUT_S = 2

Check = Literal["ok", "unreachable"]


def _check(probe: Callable[[], object], name: str, service: str) -> Check:
    """ "ok" when `probe()` returns. Any failure is "not ready"; only an unexpected kind deserves a traceback
    in the log (`name` as the check's line says it, `service` as the unreachable one's does)."""
    try:
        probe()
    except Exception as exc:
        if unreachable_service(exc) is None:
            log.exception("readiness: the %s check failed", name)
        else:
            log.warning("readiness: %s unreachable (%s)", service, type(exc).__name__)
        return "unreachable"
    return "ok"


def _select_one() -> None:
    with resources().probe_engine.connect() as conn:
        conn.execute(text("SELECT 1"))


def _check_database() -> Check:
    return _check(_select_one, "database", "database")


def _check_redis(store: Redis) -> Check:
    return _check(store.ping, "Redis", "redis")


@health.get("/healthz")
def healthz() -> Response:
    """Liveness: 200 whenever the process answers; no dependency is touched (see the module docstring)."""
    res = resources()
    return jsonify(
        {
            "status": "ok",
            "mode": "embedded" if res.settings.embedded else "server",
            "simulated": res.settings.uses_simulator,
        }
    )


@health.get("/readyz")
def readyz() -> Response:
    """Readiness: 200 `ready` when the database (and Redis in server mode) answer, else 503 `unavailable`
    with `Retry-After` and which check failed."""
    checks: dict[str, Check] = {"database": _check_database()}
    store = resources().redis
    if store is not None:  # server mode; embedded mode has no Redis to reach
        checks["redis"] = _check_redis(store)
    ready = all(value == "ok" for value in checks.values())
    resp = jsonify({"status": "ready" if ready else "unavailable", "checks": checks})
    if not ready:
        resp.status_code = 503
        resp.headers["Retry-After"] = str(RETRY_AFTER_S)
    resp.headers["Cache-Control"] = "no-store"
    return resp
