"""The product's Redis clients through a real Sentinel: they find the master, and keep working after
`SENTINEL FAILOVER` moves it to the replica.

The test starts its own redis-server master, a replica of it and one Sentinel (`redis-server --sentinel`)
on free ports from 26398 up, loopback only, nothing on disk, and stops them at the end. Waits are bounded;
nothing asserts how long a step took (the drill measures that: `redis-failover`).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis as redis_lib
from celery.backends.redis import RedisBackend

from config import Settings
from config.redis_url import redis_client
from workers.api import producer_celery
from workers.limiter import RateLimiter

MASTER = "fgtest"
FIRST_PORT = 26398
T = TypeVar("T")


def _free_ports(n: int) -> list[int]:
    ports: list[int] = []
    port = FIRST_PORT
    while len(ports) < n and port < FIRST_PORT + 200:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                ports.append(port)
            except OSError:
                pass
        port += 1
    assert len(ports) == n, "no free ports from 26398 up"
    return ports


def _until(what: str, fn: Callable[[], T | None], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            got = fn()
            if got:
                return got
        except redis_lib.RedisError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s (last error: {last!r})")


@dataclass
class Group:
    master_port: int
    replica_port: int
    sentinel_port: int

    @property
    def url(self) -> str:
        return f"sentinel://127.0.0.1:{self.sentinel_port}/0?master_name={MASTER}"

    def direct(self, port: int) -> redis_lib.Redis:
        return redis_lib.Redis(host="127.0.0.1", port=port, socket_timeout=2)

    def sentinel(self, *args: str) -> Any:
        """A Sentinel command (redis-py leaves `execute_command` unannotated)."""
        return self.direct(self.sentinel_port).execute_command(*args)  # type: ignore[no-untyped-call]

    def master_port_now(self) -> int:
        _host, port = self.sentinel("SENTINEL", "get-master-addr-by-name", MASTER)
        return int(port)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed")
    m, r, s = _free_ports(3)
    base = [exe, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {s}\nbind 127.0.0.1\ndir {tmp_path}\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {m} 1\n"
        f"sentinel down-after-milliseconds {MASTER} 1000\n"
        f"sentinel failover-timeout {MASTER} 5000\n"
    )
    procs = [
        subprocess.Popen([*base, "--port", str(m)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen(
            [*base, "--port", str(r), "--replicaof", "127.0.0.1", str(m)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    g = Group(m, r, s)
    try:
        _until("master up", lambda: g.direct(m).ping())
        _until("replica in sync", lambda: g.direct(r).info("replication").get("master_link_status") == "up")
        procs.append(
            subprocess.Popen(
                [exe, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        _until("sentinel sees the replica", lambda: g.sentinel("SENTINEL", "replicas", MASTER))
        yield g
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


def _on(client: redis_lib.Redis, key: str) -> Any:
    return client.get(key)


# Celery's Redis backend stores results with SETEX, which redis-py 8 marks deprecated.
@pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning")
def test_the_products_clients_follow_the_master_through_a_failover(group: Group, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    client = redis_client(group.url)
    limiter = RateLimiter(client, prefix=f"fgtest:{tag}:rl")
    app = producer_celery(Settings(redis_url=group.url, instance_path=tmp_path))
    backend = app.backend
    assert isinstance(backend, RedisBackend)  # Celery's SentinelBackend is one

    # Before: every client reaches the master the Sentinel names, and only it.
    client.set(f"{tag}:before", "1")
    assert _on(group.direct(group.master_port), f"{tag}:before") == b"1"
    limiter.acquire("k:decisions", 100.0, max_wait_s=5)
    backend.set(f"{tag}:result", "r1")
    assert _on(group.direct(group.master_port), f"{tag}:result") == b"r1"
    app.send_task("factgate.noop", queue=f"fgtest-{tag}")
    assert group.direct(group.master_port).llen(f"fgtest-{tag}") == 1

    # NOGOODSLAVE until the Sentinel has heard from the replica a few times: ask again until it starts.
    _until("a failover started", lambda: group.sentinel("SENTINEL", "FAILOVER", MASTER))
    _until("the replica promoted", lambda: group.master_port_now() == group.replica_port)
    # The old master is demoted to a replica of the new one: a client still writing there would get
    # READONLY for ever. Wait until it says so, so the writes below are a test of the clients.
    _until(
        "the old master demoted",
        lambda: group.direct(group.master_port).info("replication").get("role") == "slave",
    )
    new = group.direct(group.replica_port)

    # After: the same client objects write to the promoted master (their pooled connections to the old
    # one are dropped on READONLY and reconnect through the Sentinel).
    _until("redis-py client writes again", lambda: client.set(f"{tag}:after", "2"))
    assert _on(new, f"{tag}:after") == b"2"
    _until("limiter books again", lambda: limiter.acquire("k:decisions", 100.0, max_wait_s=5) >= 0 or True)
    assert new.exists(limiter.key("k:decisions"))

    def store_result() -> bool:
        backend.set(f"{tag}:result2", "r2")
        return True

    _until("result backend writes again", store_result)
    assert _on(new, f"{tag}:result2") == b"r2"
    _until(
        "broker publishes again", lambda: app.send_task("factgate.noop", queue=f"fgtest-{tag}-after") and True
    )
    # A queue of its own: the message from before the failover may not have reached the replica (Redis
    # replicates asynchronously; the database sends a lost message again), this one must be on the new master.
    assert new.llen(f"fgtest-{tag}-after") >= 1
