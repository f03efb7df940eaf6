"""REDIS_URL parsing (plain or Sentinel) and the settings each Redis client of the product gets from it.

Nothing here connects: the clients are built and inspected (a real Sentinel is in
tests/integration/test_redis_sentinel.py).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import redis
from celery.backends.redis import SentinelBackend
from kombu import Connection
from redis.sentinel import SentinelConnectionPool

from config import Settings
from config.redis_url import (
    CONNECT_TIMEOUT_S,
    RECONNECT_INTERVAL_MAX_S,
    parse_redis_url,
    redis_client,
)
from workers.api import celery_config, producer_celery
from workers.broker import SentinelTransport, Transport
from workers.consumer import Consumer

# The drill's REDIS_URL (scripts/drill/stack.py): the database after the last host, the master as a query.
DRILL = "sentinel://10.231.0.2:26391;sentinel://10.231.0.2:26392;sentinel://10.231.0.2:26393/0?master_name=fgmaster"
SECRET = "s3cr3t-pw"


def test_a_plain_url_is_kept_as_it_is() -> None:
    url = parse_redis_url("redis://127.0.0.1:6379/2")
    assert not url.is_sentinel
    assert url.kombu_url() == "redis://127.0.0.1:6379/2"


def test_the_drills_sentinel_url_names_three_sentinels_and_the_master() -> None:
    url = parse_redis_url(DRILL)
    assert url.is_sentinel
    assert url.sentinels == (("10.231.0.2", 26391), ("10.231.0.2", 26392), ("10.231.0.2", 26393))
    assert url.master_name == "fgmaster"
    assert url.db == 0
    # kombu reads the database from the first chunk, Celery's backend from each: every chunk carries it,
    # and no query is left for Celery's backend to reject.
    assert url.kombu_url() == (
        "sentinel://10.231.0.2:26391/0;sentinel://10.231.0.2:26392/0;sentinel://10.231.0.2:26393/0"
    )


def test_database_credentials_and_default_port() -> None:
    url = parse_redis_url(f"sentinel://:{SECRET}@s1;sentinel://s2:26380/5?master_name=m")
    assert url.sentinels == (("s1", 26379), ("s2", 26380))
    assert url.db == 5
    assert url.password == SECRET
    assert url.kombu_url() == f"sentinel://:{SECRET}@s1:26379/5;sentinel://:{SECRET}@s2:26380/5"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("sentinel://s1:26379;sentinel://s2:26379", "names its master"),
        ("sentinel://s1:26379?master_name=", "names its master"),
        ("sentinel://s1?master_name=a&master_name=b", "names its master"),
        ("sentinel://s1?master_name=m&db=2", "unknown"),
        ("sentinel://s1;redis://s2?master_name=m", "sentinel://host:port"),
        ("sentinel://s1/zero?master_name=m", "a number"),
        ("sentinel://s1:port?master_name=m", "port"),
        ("redis://a:6379;redis://b:6379", "several hosts"),
    ],
)
def test_malformed_urls_are_refused_without_showing_the_password(raw: str, says: str) -> None:
    raw = raw.replace("://s1", f"://:{SECRET}@s1", 1)
    with pytest.raises(ValueError, match=says) as err:
        parse_redis_url(raw)
    assert SECRET not in str(err.value)


def test_what_may_be_logged_hides_the_password() -> None:
    url = parse_redis_url(f"sentinel://:{SECRET}@s1;sentinel://s2/1?master_name=m")
    assert SECRET not in url.redacted()
    assert SECRET not in repr(url)
    assert url.redacted() == "sentinel://***@s1:26379;sentinel://s2:26379/1?master_name=m"
    plain = parse_redis_url(f"redis://user:{SECRET}@h:1/2")
    assert plain.redacted() == "redis://user:***@h:1/2"
    assert SECRET not in repr(plain)


def _sentinel_pool(client: redis.Redis) -> SentinelConnectionPool:
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    return pool


def test_the_redis_py_client_asks_the_sentinels_for_the_master() -> None:
    client = redis_client(f"sentinel://:{SECRET}@s1:1;sentinel://s2:2/3?master_name=fgmaster")
    pool = _sentinel_pool(client)
    assert pool.service_name == "fgmaster"
    assert pool.is_master
    kwargs = pool.connection_kwargs
    assert kwargs["db"] == 3
    assert kwargs["password"] == SECRET
    assert kwargs["socket_connect_timeout"] == CONNECT_TIMEOUT_S
    assert kwargs["health_check_interval"] > 0
    # A failed command is retried a couple of times within a second, not redis-py's 1 s, 2 s, 4 s backoff.
    retry = kwargs["retry"]
    assert retry.get_retries() == 2
    assert sum(retry._backoff.compute(n) for n in range(1, 3)) <= 1.0
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
            for s in sentinels] == [("s1", 1), ("s2", 2)]  # fmt: skip
    for s in sentinels:
        assert s.connection_pool.connection_kwargs["socket_timeout"] == CONNECT_TIMEOUT_S
        assert s.connection_pool.connection_kwargs.get("password") is None  # the password is the master's


def test_a_plain_client_gets_the_same_timeouts_and_retries() -> None:
    client = redis_client("redis://127.0.0.1:1/4", socket_timeout=2.0, connect_timeout=2.0)
    kwargs = client.connection_pool.connection_kwargs
    assert not isinstance(client.connection_pool, SentinelConnectionPool)
    assert (kwargs["db"], kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (4, 2.0, 2.0)
    assert kwargs["retry"].get_retries() == 2


def test_celery_gets_the_sentinel_transport_and_backend_with_the_master_name(tmp_path: Path) -> None:
    settings = Settings(redis_url=DRILL, instance_path=tmp_path)
    conf = celery_config(settings)
    assert conf["broker_url"] == parse_redis_url(DRILL).kombu_url()
    assert conf["result_backend"] == conf["broker_url"]
    assert conf["broker_transport"] == "workers.broker:SentinelTransport"
    assert conf["broker_transport_options"]["master_name"] == "fgmaster"
    assert conf["broker_transport_options"]["visibility_timeout"] >= 3600
    assert conf["result_backend_transport_options"]["master_name"] == "fgmaster"
    assert conf["worker_consumer"] == "workers.consumer:Consumer"
    app = producer_celery(settings)
    assert isinstance(app.backend, SentinelBackend)
    with app.connection_for_write() as conn:
        assert isinstance(conn.transport, SentinelTransport)
        assert (conn.transport_options or {}).get("master_name") == "fgmaster"
        assert len(conn.alt) == 3  # kombu tries the next Sentinel when one does not answer


def test_celery_with_a_plain_url_keeps_the_plain_transport(tmp_path: Path) -> None:
    conf = celery_config(Settings(redis_url="redis://127.0.0.1:1/0", instance_path=tmp_path))
    assert conf["broker_url"] == conf["result_backend"] == "redis://127.0.0.1:1/0"
    assert conf["broker_transport"] == "workers.broker:Transport"
    assert "master_name" not in conf["broker_transport_options"]
    assert conf["broker_transport_options"]["socket_connect_timeout"] == CONNECT_TIMEOUT_S
    assert conf["worker_consumer"] == "workers.consumer:Consumer"
    assert Transport.Channel is not SentinelTransport.Channel


def test_embedded_mode_has_no_redis_settings(tmp_path: Path) -> None:
    conf = celery_config(Settings(instance_path=tmp_path))
    assert conf["broker_url"] == "memory://"
    assert "worker_consumer" not in conf


def test_the_web_processs_redis_goes_through_the_sentinels(tmp_path: Path) -> None:
    from web.app import HEALTH_TIMEOUT_S, create_app
    from web.session import EXTENSION

    app = create_app({"redis_url": DRILL, "database_url": None, "instance_path": tmp_path})
    pool = _sentinel_pool(app.extensions[EXTENSION].redis)
    assert pool.service_name == "fgmaster"
    assert pool.connection_kwargs["socket_timeout"] == HEALTH_TIMEOUT_S


def test_the_workers_redis_goes_through_the_sentinels(tmp_path: Path) -> None:
    from workers.context import build_context

    ctx = build_context(Settings(redis_url=DRILL, instance_path=tmp_path))
    try:
        assert _sentinel_pool(ctx.redis).service_name == "fgmaster"
    finally:
        ctx.close()


def test_the_worker_reconnects_to_the_broker_in_steps_of_at_most_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Celery's consumer calls kombu's ensure_connection without intervals (kombu's: 2 s, 4 s, … 30 s);
    ours adds them, and kombu then sleeps at most RECONNECT_INTERVAL_MAX_S between tries."""
    consumer = Consumer.__new__(Consumer)  # only what ensure_connected reads
    conf = SimpleNamespace(
        broker_connection_retry_on_startup=True, broker_connection_retry=True, broker_connection_max_retries=5
    )
    consumer.app = cast(Any, SimpleNamespace(conf=conf))
    consumer.first_connection_attempt = False
    consumer.broker_connection_retry_attempt = 0
    slept: list[float] = []
    conn = Connection("redis://127.0.0.1:1/0", transport_options={"socket_connect_timeout": 0.2})
    errors: list[float] = []

    def record(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr("kombu.utils.functional.sleep", record)  # retry_over_time's sleep
    try:
        wrapped = conn.ensure_connection

        def spy(*args: Any, **kwargs: Any) -> Any:
            errors.append(kwargs["interval_max"])
            return wrapped(*args, **kwargs)

        conn.ensure_connection = spy  # type: ignore[method-assign]
        with pytest.raises(Exception, match=r"Connection refused|Error 111"):
            consumer.ensure_connected(conn)
    finally:
        conn.release()
    assert errors == [RECONNECT_INTERVAL_MAX_S]
    assert slept, "kombu never waited between tries"
    assert max(slept) <= RECONNECT_INTERVAL_MAX_S
