"""`REDIS_URL` in one place: a plain Redis URL or the Sentinels of a replicated one, and the clients for it.

Why one parser: the Celery broker (kombu), the result backend (Celery), and every redis-py client of the
product (the limiter, the dispatcher's lock, the host beats, the metrics, `/readyz`) must reach the same
Redis; with Sentinel, the same *current master*. Each library spells Sentinel differently — kombu and
Celery take `sentinel://…;sentinel://…` plus a `master_name` transport option, redis-py takes a list of
(host, port) and `Sentinel.master_for(name)` — so the one string the operator writes is translated here.

The syntax (one string, kombu's own list plus the master's name as a query parameter):

    redis://[[user]:password@]host[:port][/db]                 one Redis, as before
    sentinel://[[user]:password@]host[:port][/db];sentinel://host2[:port];…?master_name=NAME

The database number and the credentials may sit on any chunk (the first that has them wins) and are the
*master's*: the Sentinels themselves are asked without a password. The Sentinel port defaults to 26379.

Why these timeouts: when Redis goes away (a restart, a failover) a client must notice and try again in
steps of about a second, so that work resumes within 2 s of Redis answering again. redis-py's default
retry (three retries, exponential backoff with jitter from 1 s up to 10 s) kept a caller stuck for
seconds after Redis was back; a connect to a host that does not answer would wait for the OS's TCP
timeout. So connects give up after `CONNECT_TIMEOUT_S`, a failed command is retried twice within half a
second (`retry_policy`), and an idle pooled connection is checked before use (`HEALTH_CHECK_S`), which
also drops connections to a former master that is now a replica.

The password never leaves this module in a log line: `RedisURL.redacted` is what may be shown, and the
dataclass's repr hides the original string and the password.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, NotRequired, TypedDict
from urllib.parse import parse_qs, quote, unquote, urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

SENTINEL_SCHEME: Final = "sentinel"
SENTINEL_PORT: Final = 26379
REDIS_PORT: Final = 6379
# Seconds a TCP connect to Redis or a Sentinel may take before it counts as a failure and is retried.
CONNECT_TIMEOUT_S: Final = 1.0
# Seconds a command may wait for its answer (none of ours blocks on the server).
SOCKET_TIMEOUT_S: Final = 5.0
# Seconds a pooled connection may sit idle before it is PINGed on its next use.
HEALTH_CHECK_S: Final = 10
# A failed command is retried this many times, after 0.1 s then 0.2 s (capped at 0.5 s): a caller learns
# within about a second that Redis is away, and a reconnect to a promoted master happens on the retry.
COMMAND_RETRIES: Final = 2
RETRY_BASE_S: Final = 0.1
RETRY_CAP_S: Final = 0.5
# kombu's reconnect steps for the worker's broker connection (workers/consumer.py): the first try at once,
# then 0.25 s, 0.5 s, 0.75 s and 1 s apart, instead of kombu's 2 s, 4 s, 6 s, … up to 30 s.
RECONNECT_INTERVAL_START_S: Final = 0.25
RECONNECT_INTERVAL_STEP_S: Final = 0.25
RECONNECT_INTERVAL_MAX_S: Final = 1.0


@dataclass(frozen=True)
class RedisURL:
    """A parsed `REDIS_URL`: one Redis, or Sentinels and the name of the master they watch."""

    raw: str = field(repr=False)
    sentinels: tuple[tuple[str, int], ...] = ()  # empty: a plain redis:// (or rediss://, unix://) URL
    master_name: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def is_sentinel(self) -> bool:
        return bool(self.sentinels)

    def kombu_url(self) -> str:
        """The URL for kombu's broker and Celery's result backend.

        A plain URL is passed on unchanged. A Sentinel URL is rewritten without the query (kombu and Celery
        take the master's name as a transport option, and Celery's backend rejects unknown parameters), each
        chunk carrying the database number and credentials, since kombu reads them from the first chunk and
        Celery's backend from each.
        """
        if not self.is_sentinel:
            return self.raw
        cred = ""
        if self.password is not None or self.username is not None:
            cred = f"{quote(self.username or '', safe='')}:{quote(self.password or '', safe='')}@"
        return ";".join(f"{SENTINEL_SCHEME}://{cred}{_hostport(h, p)}/{self.db}" for h, p in self.sentinels)

    def redacted(self) -> str:
        """The URL with any password replaced by `***`: what a log line or an error message may show."""
        if not self.is_sentinel:
            parts = urlsplit(self.raw)
            if parts.password is None:
                return self.raw
            user = parts.username or ""
            host = parts.netloc.rsplit("@", 1)[1]
            return parts._replace(netloc=f"{user}:***@{host}").geturl()
        hosts = ";".join(f"{SENTINEL_SCHEME}://{_hostport(h, p)}" for h, p in self.sentinels)
        cred = "***@" if self.password is not None else ""
        return f"{hosts.replace('://', '://' + cred, 1)}/{self.db}?master_name={self.master_name}"


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_redis_url(url: str) -> RedisURL:
    """Parse `REDIS_URL`; a `sentinel://` URL needs `?master_name=` and at least one host.

    Raises ValueError with a message that never contains the password.
    """
    text = url.strip()
    if not text.lower().startswith(SENTINEL_SCHEME + "://"):
        if ";" in text:
            raise ValueError("REDIS_URL: only a sentinel:// URL may list several hosts (separated by ';')")
        return RedisURL(raw=text)
    body, _, query = text.partition("?")
    params = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"master_name"})
    if unknown:
        raise ValueError(f"REDIS_URL: unknown Sentinel URL parameter(s) {', '.join(unknown)}")
    names = [n.strip() for n in params.get("master_name", []) if n.strip()]
    if len(names) != 1:
        raise ValueError(
            "REDIS_URL: a sentinel:// URL names its master once, e.g. "
            "sentinel://host1:26379;sentinel://host2:26379/0?master_name=mymaster"
        )
    sentinels: list[tuple[str, int]] = []
    db: int | None = None
    username: str | None = None
    password: str | None = None
    for chunk in body.split(";"):
        if not chunk.strip():
            continue
        parts = urlsplit(chunk.strip())
        if parts.scheme.lower() != SENTINEL_SCHEME:
            raise ValueError("REDIS_URL: every host of a Sentinel URL is written sentinel://host:port")
        try:
            port = parts.port or SENTINEL_PORT
        except ValueError as exc:
            raise ValueError("REDIS_URL: a Sentinel's port must be a number") from exc
        if not parts.hostname:
            raise ValueError("REDIS_URL: a sentinel:// chunk has no host")
        sentinels.append((parts.hostname, port))
        path = parts.path.strip("/")
        if path:
            if not path.isdigit():
                raise ValueError("REDIS_URL: the database of a Sentinel URL is a number (/0)")
            if db is None:
                db = int(path)
        if password is None and parts.password is not None:
            password = unquote(parts.password)
        if username is None and parts.username:
            username = unquote(parts.username)
    if not sentinels:
        raise ValueError("REDIS_URL: a sentinel:// URL needs at least one host")
    return RedisURL(
        raw=text,
        sentinels=tuple(sentinels),
        master_name=names[0],
        db=db or 0,
        username=username,
        password=password,
    )


def retry_policy() -> Retry:
    """What a redis-py client does when a command fails on the connection: retry twice, 0.1 s then 0.2 s."""
    return Retry(ExponentialBackoff(cap=RETRY_CAP_S, base=RETRY_BASE_S), COMMAND_RETRIES)


class ClientOptions(TypedDict):
    """The keyword arguments a redis-py client is made with."""

    socket_timeout: float
    socket_connect_timeout: float
    socket_keepalive: bool
    health_check_interval: float
    retry: Retry
    retry_on_error: list[type[Exception]]


class SentinelOptions(TypedDict):
    """The keyword arguments of the connections to the Sentinels themselves (`sentinel_kwargs`)."""

    socket_timeout: float
    socket_connect_timeout: float


class TransportOptions(TypedDict):
    """kombu's Redis transport options for the broker; a Sentinel URL adds the master's name and how the
    Sentinels are asked."""

    visibility_timeout: int
    socket_connect_timeout: float
    socket_keepalive: bool
    master_name: NotRequired[str | None]
    sentinel_kwargs: NotRequired[SentinelOptions]


class BackendOptions(TypedDict):
    """The result backend's transport options (a Sentinel URL adds the same two as the broker's)."""

    retry_policy: dict[str, float]
    master_name: NotRequired[str | None]
    sentinel_kwargs: NotRequired[SentinelOptions]


class CeleryRedisSettings(TypedDict):
    """The Celery settings `celery_redis_settings` gives, by Celery's own names."""

    broker_url: str
    result_backend: str
    broker_transport: str
    broker_connection_retry: bool
    broker_connection_max_retries: int | None
    redis_socket_connect_timeout: float
    redis_retry_on_timeout: bool
    redis_backend_health_check_interval: int
    broker_transport_options: TransportOptions
    result_backend_transport_options: BackendOptions


def client_options(
    *, socket_timeout: float = SOCKET_TIMEOUT_S, connect_timeout: float = CONNECT_TIMEOUT_S
) -> ClientOptions:
    """The connection settings every redis-py client of the product gets (the master's connections)."""
    return {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_S,
        "retry": retry_policy(),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }


def sentinel_options(connect_timeout: float = CONNECT_TIMEOUT_S) -> SentinelOptions:
    """How the Sentinels themselves are asked: a Sentinel that does not answer within the connect timeout
    is skipped for the next one."""
    return {"socket_timeout": connect_timeout, "socket_connect_timeout": connect_timeout}


def redis_client(
    url: str | RedisURL,
    *,
    socket_timeout: float = SOCKET_TIMEOUT_S,
    connect_timeout: float = CONNECT_TIMEOUT_S,
) -> redis.Redis:
    """A redis-py client for `REDIS_URL`: `Redis.from_url`, or the Sentinels' current master.

    Through Sentinel every new connection asks the Sentinels for the master, so after a failover the
    client's next connection (the retry of the failed command) goes to the promoted replica; a connection
    that finds the former master demoted (READONLY) is dropped and retried the same way.
    """
    target = parse_redis_url(url) if isinstance(url, str) else url
    options = client_options(socket_timeout=socket_timeout, connect_timeout=connect_timeout)
    if not target.is_sentinel:
        return redis.Redis.from_url(target.raw, **options)
    from redis.sentinel import Sentinel  # noqa: PLC0415 - only Sentinel deployments need it

    # redis-py leaves Sentinel unannotated.
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels), sentinel_kwargs=sentinel_options(connect_timeout), **options
    )
    assert target.master_name is not None  # a Sentinel URL always names its master (parse_redis_url)
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.master_name, db=target.db, username=target.username, password=target.password
    )
    return client


def celery_redis_settings(url: str, *, visibility_timeout: int) -> CeleryRedisSettings:
    """The Celery settings for a Redis broker and result backend at `url` (plain or Sentinel).

    The worker's reconnect steps are not a setting Celery reads (its consumer calls kombu with kombu's
    defaults); workers/consumer.py applies the `RECONNECT_*` intervals above.
    """
    target = parse_redis_url(url)
    transport: TransportOptions = {
        # A message must stay invisible for longer than the longest task (workers/api.py).
        "visibility_timeout": visibility_timeout,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_keepalive": True,
        # No `retry_on_timeout` here: kombu publishes a producer's batch as one Redis pipeline only on a
        # connection that never retries a command (a retried pipeline could send a message twice), and the
        # dispatcher sends each tick's windows in one batch (tests/integration/test_dispatch_send.py).
        # A publish that times out fails the tick's send, and its items are dispatched again.
    }
    backend: BackendOptions = {"retry_policy": {"timeout": 5.0}}
    conf: CeleryRedisSettings = {
        "broker_url": target.kombu_url(),
        "result_backend": target.kombu_url(),
        # Tasks are consumed without acknowledgements (workers/broker.py says why).
        "broker_transport": "workers.broker:Transport",
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,  # retry for ever: Redis coming back is the only way on
        "redis_socket_connect_timeout": CONNECT_TIMEOUT_S,
        "redis_retry_on_timeout": True,
        "redis_backend_health_check_interval": 30,
        "broker_transport_options": transport,
        "result_backend_transport_options": backend,
    }
    if target.is_sentinel:
        for options in (transport, backend):
            options["master_name"] = target.master_name
            options["sentinel_kwargs"] = sentinel_options()
        conf["broker_transport"] = "workers.broker:SentinelTransport"
    return conf
