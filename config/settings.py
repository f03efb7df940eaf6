"""Every setting factgate reads, parsed from the environment in one typed place.

Why one place: the web process, the workers, the CLI and the tests must agree on the same
values, and a reviewer should be able to see every knob (and its default) on one screen.
The API key is held here but never rendered: `Settings.__repr__` masks it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

DEFAULT_API_BASE = "https://api.perplexity.ai"

N = TypeVar("N", int, float)


def _given(env: Mapping[str, str], name: str) -> str | None:
    """The variable's value, or None when it is unset or blank (then the default applies)."""
    raw = env.get(name)
    return None if raw is None or raw.strip() == "" else raw


def _number(env: Mapping[str, str], name: str, default: N, parse: Callable[[str], N], what: str) -> N:
    raw = _given(env, name)
    if raw is None:
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be {what}, got {raw!r}") from exc


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    return _number(env, name, default, int, "an integer")


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, "a number")


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _given(env, name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 1/true/yes/on or 0/false/no/off, got {raw!r}")


def _str(env: Mapping[str, str], name: str) -> str | None:
    raw = _given(env, name)
    return None if raw is None else raw.strip()


@dataclass(frozen=True)
class Settings:
    """Typed settings. Build with `Settings.from_env()`; tests use `dataclasses.replace`."""

    # Where state lives. Both unset → embedded mode (SQLite file + in-process broker and limiter).
    database_url: str | None = None
    redis_url: str | None = None
    instance_path: Path = field(default_factory=lambda: Path("instance"))

    # Upstream. No key → the bundled simulator answers, and every output says so.
    perplexity_api_key: str | None = field(default=None, repr=False)
    perplexity_api_base: str = DEFAULT_API_BASE
    http_timeout_s: float = 30.0
    http_max_retries: int = 3
    # The first backoff wait when the upstream sends no Retry-After (then twice that, four times; jittered).
    # 1 s suits the public API; a gateway that recovers faster (or a test against the simulator) may use less.
    http_retry_base_s: float = 1.0

    # Global upstream rate limits (requests per second, per key and endpoint).
    decisions_rps: float = 10.0
    search_rps: float = 50.0
    agent_rps: float = 3.0
    limiter_max_wait_s: float = 60.0
    # Fraction of each rate left unused, so that slot-to-wire jitter seldom makes the wire gate hold a
    # request (the gate, not the headroom, keeps the upstream's window; workers/limiter.py). In [0, 1).
    limiter_headroom: float = 0.01
    # The wire gate's margin: how much longer one request may take from "written" to "counted upstream"
    # than a request written a window later, before the gate can no longer rule out one too many in a
    # window (docs/architecture.md, "The wire gate"). In [0, 1).
    limiter_arrival_margin_s: float = 0.010

    # Intake limits.
    max_rows_per_job: int = 1_000_000
    max_claim_bytes: int = 4_096
    # NDJSON and CSV bodies are streamed into COPY (never held whole): 1,000,000 claims are ~80 MB.
    max_body_bytes: int = 256 * 1024 * 1024
    # A JSON body is parsed whole before its rows are counted: bounded well below NDJSON's limit.
    max_json_body_bytes: int = 8 * 1024 * 1024
    # A streamed body of more rows than this answers 202 as `validating` before its items exist; the
    # `start_job` task builds them (jobs/bulk_load.py). Up to it, the items are built before the answer.
    intake_defer_rows: int = 50_000
    # Streamed exports (results, errors, the report file) of one tenant at once, across web processes when
    # Redis is configured; past it a 429 (web/export_slots.py). 0: no bound.
    max_exports_per_tenant: int = 4
    # A request body must arrive at this average rate after a grace period, or the read stops with a 408
    # (web/body.py:PacedInput): a client trickling a body cannot hold a web thread for ever.
    body_grace_s: float = 30.0
    body_min_bytes_per_s: int = 16_384
    # Each send of a response must be taken by the client within this, or the connection is dropped
    # (a reader that stops reading frees its thread).
    send_timeout_s: float = 60.0

    # Queue behaviour.
    chord_size: int = 50  # most items in one chord (a window the dispatcher sends for one job)
    dispatch_interval_s: float = 0.05  # how often the leading dispatcher looks for free slots
    dispatch_max_in_flight: int = 64  # per scope: items dispatched and not settled, at most
    dispatch_stale_s: float = 60.0  # a dispatched item not claimed by then is sent again
    lease_s: int = 300
    # Tries per item that may reach upstream (across leases and transient failures); then it fails.
    max_item_attempts: int = 4
    sweep_interval_s: float = 15.0
    worker_concurrency: int = 64
    # How much a server-mode worker process lowers its own CPU priority (nice increment; 0 keeps it): batch
    # work gives way to the web and the database on a host it shares with them (workers/priority.py).
    worker_nice: int = 3

    # Data lifecycle (jobs/purge.py). An ended job's results are kept this many days (a tenant may set its
    # own, at most the maximum); then its items and per-attempt rows are purged in batches (usage rolled up
    # first) and the job row stays as many days more. Deleted jobs and removed tenants go at the next purge.
    retention_days: int = 30
    retention_max_days: int = 365
    purge_interval_s: float = 300.0
    # After each purge batch the purge rests this many times as long as the batch took (at most 5 s), so a
    # long purge takes at most about 1/(1 + ratio) of one Postgres backend and of the WAL's bandwidth, and
    # other tenants' commits do not queue behind its stream of deletes (0: no rest).
    purge_pause_ratio: float = 1.0

    # Web.
    secret_key: str | None = field(default=None, repr=False)
    # A page session ends after this long without a page request (background polls do not count) ...
    session_idle_s: int = 8 * 3600
    # ... and this long after sign-in, whatever the activity.
    session_max_s: int = 7 * 24 * 3600
    # Proxies in front of the web process whose X-Forwarded-For/-Proto/-Host/-Port are believed (0: none).
    trust_proxy: int = 0
    # Always mark the session cookie Secure (a TLS proxy that does not say so in X-Forwarded-Proto).
    cookie_secure: bool = False
    # Strict-Transport-Security max-age sent on responses served over https (0: no header).
    hsts_max_age_s: int = 365 * 24 * 3600

    # Fernet keys that encrypt tenants' own upstream keys at rest; the first encrypts, all decrypt.
    encryption_keys: tuple[str, ...] = field(default=(), repr=False)

    # Webhooks (jobs/webhooks.py, clients/webhooks.py). Private, loopback and other non-public addresses
    # are refused unless allowed (tests, a receiver on the same private network).
    webhook_allow_private: bool = False
    webhook_connect_timeout_s: float = 3.0
    # One attempt's whole time, connect to the response's headers (a wall-clock deadline, not per read).
    webhook_timeout_s: float = 10.0
    # Sender threads per worker process, beside (never in) the task pool that runs items.
    webhook_senders: int = 4
    # Waits between tries: base × 2^(n-1), at most 2 h each, for this long after the job ended.
    webhook_retry_base_s: float = 10.0
    webhook_retry_for_s: float = 24 * 3600.0

    def __post_init__(self) -> None:
        """Refuse values that would silently mean something else, where the settings are made."""
        if self.session_idle_s <= 0 or self.session_max_s <= 0:
            raise ValueError("FACTGATE_SESSION_IDLE_S and FACTGATE_SESSION_MAX_S must be above 0")
        if self.max_exports_per_tenant < 0:
            raise ValueError(
                f"FACTGATE_MAX_EXPORTS_PER_TENANT is 0 (no bound) or more, got {self.max_exports_per_tenant}"
            )
        if self.body_grace_s <= 0 or self.body_min_bytes_per_s <= 0 or self.send_timeout_s <= 0:
            raise ValueError(
                "FACTGATE_BODY_GRACE_S, FACTGATE_BODY_MIN_BYTES_PER_S and FACTGATE_SEND_TIMEOUT_S must be "
                "above 0"
            )
        if self.trust_proxy < 0:
            raise ValueError(
                f"FACTGATE_TRUST_PROXY is a number of proxies (0 or more), got {self.trust_proxy}"
            )
        if not 1 <= self.retention_days <= self.retention_max_days:
            raise ValueError(
                f"FACTGATE_RETENTION_DAYS must be from 1 to FACTGATE_RETENTION_MAX_DAYS "
                f"({self.retention_max_days}), got {self.retention_days}"
            )
        if not 0 <= self.worker_nice <= 19:
            raise ValueError(f"FACTGATE_WORKER_NICE must be from 0 to 19, got {self.worker_nice}")
        if self.intake_defer_rows < 0:
            raise ValueError(f"FACTGATE_INTAKE_DEFER_ROWS must be 0 or more, got {self.intake_defer_rows}")
        if self.http_retry_base_s < 0:
            raise ValueError(f"FACTGATE_HTTP_RETRY_BASE_S must be 0 or more, got {self.http_retry_base_s}")
        if self.hsts_max_age_s < 0:
            raise ValueError(f"FACTGATE_HSTS_MAX_AGE_S must be 0 or more, got {self.hsts_max_age_s}")
        # A headroom of 1 or more would turn every limit into "0 requests/s", which the limiter reads as
        # unlimited: refuse it where the settings are made, not at the first upstream call.
        if not 0.0 <= self.limiter_arrival_margin_s < 1.0:
            raise ValueError(
                "FACTGATE_LIMITER_ARRIVAL_MARGIN_S must be at least 0 and below 1 (seconds), "
                f"got {self.limiter_arrival_margin_s}"
            )
        if not 0.0 <= self.limiter_headroom < 1.0:
            raise ValueError(
                f"FACTGATE_LIMITER_HEADROOM must be at least 0 and below 1, got {self.limiter_headroom}"
            )
        for name, value in (
            ("FACTGATE_WEBHOOK_CONNECT_TIMEOUT_S", self.webhook_connect_timeout_s),
            ("FACTGATE_WEBHOOK_TIMEOUT_S", self.webhook_timeout_s),
            ("FACTGATE_WEBHOOK_RETRY_BASE_S", self.webhook_retry_base_s),
            ("FACTGATE_WEBHOOK_RETRY_FOR_S", self.webhook_retry_for_s),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be above 0, got {value}")
        if self.webhook_senders < 1:
            raise ValueError(f"FACTGATE_WEBHOOK_SENDERS must be 1 or more, got {self.webhook_senders}")

    @property
    def embedded(self) -> bool:
        """True when neither a database nor a Redis URL is configured."""
        return self.database_url is None and self.redis_url is None

    @property
    def uses_simulator(self) -> bool:
        """True when no API key is set: the bundled simulator stands in for Perplexity."""
        return self.perplexity_api_key is None

    def effective_database_url(self) -> str:
        """The SQLAlchemy URL to use; embedded mode gets a SQLite file in the instance folder."""
        if self.database_url:
            url = self.database_url
            # Heroku-style and bare postgres URLs select psycopg 3, the driver we ship.
            if url.startswith("postgres://"):
                url = "postgresql+psycopg://" + url[len("postgres://") :]
            elif url.startswith("postgresql://"):
                url = "postgresql+psycopg://" + url[len("postgresql://") :]
            return url
        return f"sqlite:///{(self.instance_path / 'factgate.db').resolve()}"

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> Settings:
        """A copy with some fields replaced (unknown names are an error, not silently ignored)."""
        if not overrides:
            return self
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(sorted(unknown))}")
        return replace(self, **dict(overrides))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every setting from the environment (`os.environ` by default)."""
        e = os.environ if env is None else env
        return cls(
            database_url=_str(e, "DATABASE_URL"),
            redis_url=_str(e, "REDIS_URL"),
            instance_path=Path(_str(e, "FACTGATE_INSTANCE_PATH") or "instance"),
            perplexity_api_key=_str(e, "PERPLEXITY_API_KEY"),
            perplexity_api_base=(_str(e, "PERPLEXITY_API_BASE") or DEFAULT_API_BASE).rstrip("/"),
            http_timeout_s=_float(e, "FACTGATE_HTTP_TIMEOUT_S", 30.0),
            http_max_retries=_int(e, "FACTGATE_HTTP_MAX_RETRIES", 3),
            http_retry_base_s=_float(e, "FACTGATE_HTTP_RETRY_BASE_S", 1.0),
            decisions_rps=_float(e, "FACTGATE_DECISIONS_RPS", 10.0),
            search_rps=_float(e, "FACTGATE_SEARCH_RPS", 50.0),
            agent_rps=_float(e, "FACTGATE_AGENT_RPS", 3.0),
            limiter_max_wait_s=_float(e, "FACTGATE_LIMITER_MAX_WAIT_S", 60.0),
            limiter_headroom=_float(e, "FACTGATE_LIMITER_HEADROOM", 0.01),
            limiter_arrival_margin_s=_float(e, "FACTGATE_LIMITER_ARRIVAL_MARGIN_S", 0.010),
            max_rows_per_job=_int(e, "FACTGATE_MAX_ROWS_PER_JOB", 1_000_000),
            max_claim_bytes=_int(e, "FACTGATE_MAX_CLAIM_BYTES", 4_096),
            max_body_bytes=_int(e, "FACTGATE_MAX_BODY_BYTES", 256 * 1024 * 1024),
            max_json_body_bytes=_int(e, "FACTGATE_MAX_JSON_BODY_BYTES", 8 * 1024 * 1024),
            intake_defer_rows=_int(e, "FACTGATE_INTAKE_DEFER_ROWS", 50_000),
            max_exports_per_tenant=_int(e, "FACTGATE_MAX_EXPORTS_PER_TENANT", 4),
            body_grace_s=_float(e, "FACTGATE_BODY_GRACE_S", 30.0),
            body_min_bytes_per_s=_int(e, "FACTGATE_BODY_MIN_BYTES_PER_S", 16_384),
            send_timeout_s=_float(e, "FACTGATE_SEND_TIMEOUT_S", 60.0),
            chord_size=_int(e, "FACTGATE_CHORD_SIZE", 50),
            dispatch_interval_s=_float(e, "FACTGATE_DISPATCH_INTERVAL_S", 0.05),
            dispatch_max_in_flight=_int(e, "FACTGATE_DISPATCH_MAX_IN_FLIGHT", 64),
            dispatch_stale_s=_float(e, "FACTGATE_DISPATCH_STALE_S", 60.0),
            lease_s=_int(e, "FACTGATE_LEASE_S", 300),
            max_item_attempts=_int(e, "FACTGATE_MAX_ITEM_ATTEMPTS", 4),
            sweep_interval_s=_float(e, "FACTGATE_SWEEP_INTERVAL_S", 15.0),
            worker_concurrency=_int(e, "FACTGATE_WORKER_CONCURRENCY", 64),
            worker_nice=_int(e, "FACTGATE_WORKER_NICE", 3),
            retention_days=_int(e, "FACTGATE_RETENTION_DAYS", 30),
            retention_max_days=_int(e, "FACTGATE_RETENTION_MAX_DAYS", 365),
            purge_interval_s=_float(e, "FACTGATE_PURGE_INTERVAL_S", 300.0),
            purge_pause_ratio=_float(e, "FACTGATE_PURGE_PAUSE_RATIO", 1.0),
            secret_key=_str(e, "FACTGATE_SECRET_KEY"),
            encryption_keys=tuple(
                k.strip() for k in (_str(e, "FACTGATE_ENCRYPTION_KEYS") or "").split(",") if k.strip()
            ),
            session_idle_s=_int(e, "FACTGATE_SESSION_IDLE_S", 8 * 3600),
            session_max_s=_int(e, "FACTGATE_SESSION_MAX_S", 7 * 24 * 3600),
            trust_proxy=_int(e, "FACTGATE_TRUST_PROXY", 0),
            cookie_secure=_bool(e, "FACTGATE_COOKIE_SECURE", False),
            hsts_max_age_s=_int(e, "FACTGATE_HSTS_MAX_AGE_S", 365 * 24 * 3600),
            webhook_allow_private=_bool(e, "FACTGATE_WEBHOOK_ALLOW_PRIVATE", False),
            webhook_connect_timeout_s=_float(e, "FACTGATE_WEBHOOK_CONNECT_TIMEOUT_S", 3.0),
            webhook_timeout_s=_float(e, "FACTGATE_WEBHOOK_TIMEOUT_S", 10.0),
            webhook_senders=_int(e, "FACTGATE_WEBHOOK_SENDERS", 4),
            webhook_retry_base_s=_float(e, "FACTGATE_WEBHOOK_RETRY_BASE_S", 10.0),
            webhook_retry_for_s=_float(e, "FACTGATE_WEBHOOK_RETRY_FOR_S", 24 * 3600.0),
        )
