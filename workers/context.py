"""Per-process resources for tasks: settings, database sessions, the upstream client, the limiter.

Built lazily on first use inside the worker (after any fork), once per Celery app, and shared by
the worker's threads: SQLAlchemy engines, httpx clients and redis clients are thread-safe. Tasks
carry ids, never these objects.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import redis as redis_lib
from celery import Celery
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from clients.perplexity import PerplexityClient
from config import Settings
from config.redis_url import redis_client
from jobs.keyring import keyring_for
from jobs.tenancy import TenantKey, tenant_key
from models import make_engine, make_session_factory
from workers.leases import LeaseKeeper
from workers.limiter import LimiterTimeout, RateLimiter, WirePass, scope_for, with_headroom
from workers.metrics import embedded_redis
from workers.signals import LimiterWaits, record_throttled

SIMULATOR_BASE = "http://simulator.invalid"
SIMULATOR_KEY = "simulator-key"
TENANT_KEY_TTL_S = 30.0
# How long a worker trusts that an unlimited scope is not blocked by a 429 (`UnlimitedScopes`): another
# process's block reaches it within this time. Long enough that the reads are a small part of the calls at
# full speed (docs/profiles/README.md, "Unlimited scopes"); an upstream configured as unlimited seldom
# answers 429, and a call sent into a block it had not seen yet is answered 429 and retried after the block
# like any other.
UNLIMITED_CHECK_S = 0.25

_lock = threading.Lock()
_contexts: dict[int, WorkerContext] = {}


def rate_of(settings: Settings, endpoint: str) -> float:
    """Requests per second allowed upstream for an endpoint, per key (before the limiter's headroom)."""
    return {
        "decisions": settings.decisions_rps,
        "search": settings.search_rps,
        "agent": settings.agent_rps,
    }.get(endpoint, settings.decisions_rps)


@dataclass
class WorkerContext:
    """What every task needs, built from one Settings.

    `client` speaks with the operator's key (PERPLEXITY_API_KEY). A tenant with its own key gets a client of
    its own (`client_for`), built on first use from the decrypted key and kept by fingerprint; its limiter
    scope is that key's, so it has its own rate limit. Keys are read from the database (encrypted) and
    decrypted here, in the worker: task messages carry item ids only.
    """

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    redis: redis_lib.Redis
    limiter: RateLimiter
    client: PerplexityClient
    leases: LeaseKeeper
    waits: LimiterWaits
    _tenant_clients: dict[str, PerplexityClient] = field(default_factory=dict, repr=False)
    _tenant_keys: dict[uuid.UUID, tuple[float, TenantKey | None]] = field(default_factory=dict, repr=False)
    _clients_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def rate_for(self, endpoint: str) -> float:
        """Requests per second allowed upstream for an endpoint (global, all workers, per key)."""
        return rate_of(self.settings, endpoint)

    def _tenant_key(self, tenant_id: uuid.UUID) -> TenantKey | None:
        """The tenant's stored key (encrypted), read at most every TENANT_KEY_TTL_S: a key set or cleared by
        an operator reaches running workers within that time."""
        now = time.monotonic()
        hit = self._tenant_keys.get(tenant_id)
        if hit is not None and now - hit[0] < TENANT_KEY_TTL_S:
            return hit[1]
        with self.sessions() as session:
            found = tenant_key(session, tenant_id)
        self._tenant_keys[tenant_id] = (now, found)
        return found

    def client_for(self, tenant_id: uuid.UUID) -> tuple[PerplexityClient, str | None]:
        """The client a tenant's items use, and the fingerprint of its own key (None: the operator's)."""
        stored = self._tenant_key(tenant_id)
        if stored is None:
            return self.client, None
        with self._clients_lock:
            client = self._tenant_clients.get(stored.fingerprint)
            if client is None:
                secret = keyring_for(self.settings).decrypt(stored.encrypted)
                client = make_client(
                    self.settings, secret, self.limiter, self.redis, self.rate_for, waits=self.waits
                )
                self._tenant_clients[stored.fingerprint] = client
        return client, stored.fingerprint

    def close(self) -> None:
        self.waits.flush()
        self.leases.close()
        self.client.close()
        for client in self._tenant_clients.values():
            client.close()
        self.engine.dispose()


def _simulator_transport() -> httpx.BaseTransport:
    """The bundled simulator mounted in-process (no key: nothing leaves the machine)."""
    from simulator.app import create_app  # noqa: PLC0415 - only needed without a key

    return httpx.WSGITransport(app=create_app())


class UnlimitedScopes:
    """Whether an unlimited scope (rate 0: no upstream limit configured) is free of a 429's block, read at
    most every `max_age_s` per scope instead of once per call.

    Such a scope books no slots, so the limiter's script only told whether upstream had blocked it: a Redis
    round trip per call, for an answer that almost never changes. Here the scope's
    blocked-until is read with Redis' clock and trusted for `max_age_s` by this process's monotonic clock; a
    block this process sets is seen at once (`forget`), another process's within `max_age_s`. A scope found
    blocked is not cleared: the caller goes through `acquire`, which waits out the block.
    """

    def __init__(self, limiter: RateLimiter, max_age_s: float = UNLIMITED_CHECK_S) -> None:
        self.limiter = limiter
        self.max_age_s = max_age_s
        self._seen: dict[str, tuple[float, int]] = {}  # scope -> (monotonic read, µs until it is free)

    def clear(self, scope: str) -> bool:
        """True when the scope was not blocked at a read under `max_age_s` old and its block (if any) is
        over by now; reads the scope again when the last read is older."""
        now = time.monotonic()
        seen = self._seen.get(scope)
        if seen is None or now - seen[0] >= self.max_age_s:
            state = self.limiter.state(scope)
            seen = (now, max(0, state.blocked_until_us - state.redis_time_us))
            self._seen[scope] = seen
        return (now - seen[0]) * 1_000_000 >= seen[1]

    def forget(self, scope: str) -> None:
        self._seen.pop(scope, None)


class WireTicket:
    """What the client holds for a request that passed the wire gate: called once the request is gone
    (`RateLimiter.left_wire`); `fresh()` says whether it may still be written on (`pass_fresh`)."""

    def __init__(self, limiter: RateLimiter, wire_pass: WirePass) -> None:
        self._limiter = limiter
        self._pass = wire_pass

    def __call__(self) -> int:
        return self._limiter.left_wire(self._pass)

    def fresh(self) -> bool:
        return self._limiter.pass_fresh(self._pass)


def make_client(
    settings: Settings,
    key: str | None,
    limiter: RateLimiter,
    rds: redis_lib.Redis,
    rate_for: Callable[[str], float],
    *,
    waits: LimiterWaits,
) -> PerplexityClient:
    """A client for one upstream key, paced by the global limiter in that key's scopes.

    Without any key (no PERPLEXITY_API_KEY, and an operator key is what is asked for) the bundled simulator
    answers in-process. A tenant key in that mode goes to the same simulator: it stands in for the API.
    """
    scope_key = key
    simulated = settings.perplexity_api_key is None
    unlimited = UnlimitedScopes(limiter)

    def before_attempt(endpoint: str) -> None:
        rate = with_headroom(rate_for(endpoint), settings.limiter_headroom)
        if rate <= 0 and unlimited.clear(scope_for(scope_key, endpoint)):
            waits.record(endpoint, 0.0)
            return
        try:
            waited = limiter.acquire(
                scope_for(scope_key, endpoint),
                with_headroom(rate_for(endpoint), settings.limiter_headroom),
                max_wait_s=settings.limiter_max_wait_s,
            )
        except LimiterTimeout as exc:
            waits.record(endpoint, exc.waited, timed_out=True)
            raise
        waits.record(endpoint, waited)

    def before_send(endpoint: str) -> Callable[[], object] | None:
        # The upstream's own rate, no headroom: the gate counts what the upstream will count.
        wire = limiter.enter_wire(
            scope_for(scope_key, endpoint), rate_for(endpoint), max_wait_s=settings.limiter_max_wait_s
        )
        if wire is None:
            return None
        if wire.waited > 0:
            waits.record_wire_held(endpoint, wire.waited)
        return WireTicket(limiter, wire)

    def on_throttled(endpoint: str, wait_s: float) -> None:
        limiter.block(scope_for(scope_key, endpoint), wait_s)
        unlimited.forget(scope_for(scope_key, endpoint))
        record_throttled(rds, endpoint)

    return PerplexityClient(
        SIMULATOR_BASE if simulated else settings.perplexity_api_base,
        key or SIMULATOR_KEY,
        transport=_simulator_transport() if simulated else None,
        timeout=settings.http_timeout_s,
        max_retries=settings.http_max_retries,
        retry_base_s=settings.http_retry_base_s,
        before_attempt=before_attempt,
        before_send=before_send,
        on_throttled=on_throttled,
    )


def build_context(settings: Settings) -> WorkerContext:
    """Wire the resources for `settings`."""
    engine = make_engine(settings.effective_database_url())
    if settings.redis_url:
        # The one client of the worker (limiter, leases and host beats, the dispatcher's lock, budget and
        # metrics counters), built from REDIS_URL by the parser the broker uses too: plain or Sentinel.
        rds: redis_lib.Redis = redis_client(settings.redis_url)
    else:
        rds = embedded_redis()
    limiter = RateLimiter(rds, arrival_margin_s=settings.limiter_arrival_margin_s)
    # Limiter waits are counted per call and written once a second (workers/signals.py:LimiterWaits);
    # embedded mode's store is in this process, so there they are written at once.
    waits = LimiterWaits(rds, flush_s=1.0 if settings.redis_url else 0.0)
    client = make_client(
        settings,
        settings.perplexity_api_key,
        limiter,
        rds,
        lambda endpoint: rate_of(settings, endpoint),
        waits=waits,
    )
    sessions = make_session_factory(engine)
    return WorkerContext(
        settings=settings,
        engine=engine,
        sessions=sessions,
        redis=rds,
        limiter=limiter,
        client=client,
        leases=LeaseKeeper(sessions, settings.lease_s, redis=rds),
        waits=waits,
    )


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
