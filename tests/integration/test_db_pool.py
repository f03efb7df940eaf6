"""The Postgres pool pings a connection only when it sat idle (models/db.py), and replaces a dead one."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import pool, text

import models.db
from models import make_engine


def _backend_pid(engine: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_back_in_use_at_once_is_not_pinged(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(pg_url)
    pings: list[object] = []
    real_ping = engine.dialect.do_ping
    monkeypatch.setattr(engine.dialect, "do_ping", lambda c: pings.append(c) or real_ping(c))
    try:
        monkeypatch.setattr(models.db, "PING_IDLE_S", 3600.0)
        first = _backend_pid(engine)
        assert _backend_pid(engine) == first and pings == []  # the same connection, no round trip added
        monkeypatch.setattr(models.db, "PING_IDLE_S", 0.0)
        assert _backend_pid(engine) == first and len(pings) == 1  # "idle" now: pinged, alive, kept
    finally:
        engine.dispose()


def test_a_connection_that_died_while_idle_is_replaced(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models.db, "PING_IDLE_S", 0.0)
    engine = make_engine(pg_url)
    admin = make_engine(pg_url, poolclass=pool.NullPool)
    try:
        dead = _backend_pid(engine)
        with admin.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": dead}).scalar_one()
        # The pooled connection is gone; the next checkout notices and reconnects instead of failing.
        assert _backend_pid(engine) != dead
    finally:
        engine.dispose()
        admin.dispose()
