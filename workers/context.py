"""Per-process resources for tasks: settings, database sessions, the upstream client, the limiter.

Built lazily on first use inside the worker (after any fork), once per Celery app, and shared by
the worker's threads: SQLAlchemy engines, httpx clients and redis clients are thread-safe. Tasks
carry ids, never these objects.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import httpx
import redis as redis_lib
from celery import Celery
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from clients.perplexity import PerplexityClient
from config import Settings
from models import make_engine, make_session_factory
from workers.leases import LeaseKeeper
from workers.limiter import LimiterTimeout, RateLimiter, scope_for
from workers.signals import LimiterWaits, record_throttled

SIMULATOR_BASE = "http://simulator.invalid"
SIMULATOR_KEY = "simulator-key"

_lock = threading.Lock()
# Its own lock: `get_context` holds `_lock` while building a context, which calls `embedded_redis`.
_redis_lock = threading.Lock()
_contexts: dict[int, WorkerContext] = {}
_embedded_redis: Any = None


def embedded_redis() -> redis_lib.Redis:
    """The in-process Redis-compatible store of embedded mode (one per process, shared)."""
    global _embedded_redis  # noqa: PLW0603 - one store per process is the point
    with _redis_lock:
        if _embedded_redis is None:
            import fakeredis  # noqa: PLC0415 - only embedded mode needs it

            _embedded_redis = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        store: redis_lib.Redis = _embedded_redis
        return store


@dataclass
class WorkerContext:
    """What every task needs, built from one Settings."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    redis: redis_lib.Redis
    limiter: RateLimiter
    client: PerplexityClient
    leases: LeaseKeeper
    waits: LimiterWaits | None = None

    def rate_for(self, endpoint: str) -> float:
        """Requests per second allowed upstream for an endpoint (global, all workers)."""
        return {
            "decisions": self.settings.decisions_rps,
            "search": self.settings.search_rps,
            "agent": self.settings.agent_rps,
        }.get(endpoint, self.settings.decisions_rps)

    def close(self) -> None:
        if self.waits is not None:
            self.waits.flush()
        self.leases.close()
        self.client.close()
        self.engine.dispose()


def _simulator_transport() -> httpx.BaseTransport:
    """The bundled simulator mounted in-process (no key: nothing leaves the machine)."""
    from simulator.app import create_app  # noqa: PLC0415 - only needed without a key

    return httpx.WSGITransport(app=create_app())


def build_context(settings: Settings) -> WorkerContext:
    """Wire the resources for `settings`."""
    engine = make_engine(settings.effective_database_url())
    if settings.redis_url:
        rds: redis_lib.Redis = redis_lib.Redis.from_url(settings.redis_url)
    else:
        rds = embedded_redis()
    limiter = RateLimiter(rds)
    # Limiter waits are counted per call and written once a second (workers/signals.py:LimiterWaits);
    # embedded mode's store is in this process, so there they are written at once.
    waits = LimiterWaits(rds, flush_s=1.0 if settings.redis_url else 0.0)
    key = settings.perplexity_api_key

    ctx_ref: list[WorkerContext] = []

    def before_attempt(endpoint: str) -> None:
        ctx = ctx_ref[0]
        try:
            waited = limiter.acquire(
                scope_for(key, endpoint), ctx.rate_for(endpoint), max_wait_s=settings.limiter_max_wait_s
            )
        except LimiterTimeout as exc:
            waits.record(endpoint, exc.waited, timed_out=True)
            raise
        waits.record(endpoint, waited)

    def on_throttled(endpoint: str, wait_s: float) -> None:
        limiter.block(scope_for(key, endpoint), wait_s)
        record_throttled(rds, endpoint)

    client = PerplexityClient(
        SIMULATOR_BASE if key is None else settings.perplexity_api_base,
        SIMULATOR_KEY if key is None else key,
        transport=_simulator_transport() if key is None else None,
        timeout=settings.http_timeout_s,
        max_retries=settings.http_max_retries,
        before_attempt=before_attempt,
        on_throttled=on_throttled,
    )
    sessions = make_session_factory(engine)
    ctx = WorkerContext(
        settings=settings,
        engine=engine,
        sessions=sessions,
        redis=rds,
        limiter=limiter,
        client=client,
        leases=LeaseKeeper(sessions, settings.lease_s),
        waits=waits,
    )
    ctx_ref.append(ctx)
    return ctx


def get_context(app: Celery) -> WorkerContext:
    """The context of this Celery app in this process (`current_app` proxies are resolved)."""
    real: Celery = getattr(app, "_get_current_object", lambda: app)()
    key = id(real)
    ctx = _contexts.get(key)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(key)
            if ctx is None:
                settings: Settings = real.conf.factgate_settings
                ctx = build_context(settings)
                _contexts[key] = ctx
    return ctx


def reset_contexts() -> None:
    """Drop every context (after fork, or between tests)."""
    with _lock:
        for ctx in _contexts.values():
            ctx.close()
        _contexts.clear()
