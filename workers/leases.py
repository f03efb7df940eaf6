"""The lease heartbeat: while a worker holds items, their leases keep moving forward.

A lease bounds how long a claimed item may look alive without a worker behind it; the sweeper hands an
expired one to another worker. An investigation (one Agent call, then several Decisions calls, each behind
a rate-limiter wait) can outlive any fixed lease, so each worker process runs one daemon thread that,
every third of a lease, pushes the leases of everything it holds in one UPDATE. Only a worker that stopped
(killed, frozen, cut off from the database) lets its leases run out — which is exactly when another worker
should take over.

A lease of minutes is right for handing an item to another worker (a worker that is only slow must never
lose an item it is still calling for), but wrong for counting what is in flight: the dispatcher keeps each
scope's target of items dispatched and unsettled, and the items of a host that went silent — frozen, cut
off, killed — kept their slots until their leases ran out, so one host left ran at a fraction of the
limit. So each process also beats, every HOST_BEAT_S, in Redis (`host_beat`): the items it holds and the
items it received and has not started, stamped with Redis's own clock (TIME, never a host's wall clock). A
host whose beat is older than HOST_SILENT_S is silent (`silent_hosts`): the dispatcher stops counting its
running items against the scope and sends its not-started items again (workers/hosts.py). Nothing is
taken from it: its running items stay its own, and the lease token still decides who writes, so an item is
never sent twice because a host went quiet; if the host comes back, its items count again.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis as redis_lib
from sqlalchemy.orm import Session, sessionmaker

from jobs.items import extend_leases
from models import session_scope
from workers.lua import lua

log = logging.getLogger("factgate.workers")

MIN_BEAT_S = 0.5
HOSTS_KEY = "factgate:hosts"  # sorted set: process id -> its last beat, in ms of Redis time
HOST_KEY = "factgate:host:{}"  # per process: JSON list of the item ids it holds or has received
HOST_BEAT_S = 0.5
# Silent after this long without a beat: four missed beats, longer than a garbage collection or a busy
# moment of a loaded host, shorter than the leader lock's expiry (workers/leadership.py), so that by the
# time another host leads, the silent one's slots are already free.
HOST_SILENT_S = 2.0
# A host silent this long, whose leases have also not been renewed for a renewal interval and
# REDRIVE_GRACE_S, is taken for dead: its running items are re-driven before their lease runs out
# (workers/hosts.py:HostWatch._redrive_dead). Longer than the pauses and cuts a host is expected to come back
# from (the drill's: 15 s and 20 s): a host that does come back after this finds its items taken, and
# the call it had in the air is made twice — the trade the lease makes, at a bound shorter than it.
HOST_DEAD_S = 30.0
REDRIVE_GRACE_S = 5.0

# Record this process's items, stamped with Redis time; the record outlives the beat (a silent host's items
# must stay known) for as long as a lease can.
_HOST_BEAT = lua("leases_host_beat")
# The hosts silent for more than ARGV[1] ms and their records; hosts silent for more than ARGV[2] ms are
# forgotten (their leases have run out: the sweeper has their items).
_SILENT = lua("leases_silent")


def process_id() -> str:
    """This process's name in the host registry: its pid (what an operator can find) and a random part."""
    return f"{os.getpid()}:{secrets.token_hex(4)}"


def silent_hosts(rds: redis_lib.Redis, silent_s: float, forget_s: float) -> dict[str, list[int]]:
    """Processes whose last beat is older than `silent_s` (by Redis's clock), with the items they held or had
    received then. Records older than `forget_s` are dropped on the way."""
    script = rds.register_script(_SILENT)
    flat = script(
        keys=[HOSTS_KEY],
        args=[int(silent_s * 1000), int(forget_s * 1000), HOST_KEY.format("")],
    )
    out: dict[str, list[int]] = {}
    for i in range(0, len(flat) - 1, 2):
        name = flat[i].decode() if isinstance(flat[i], bytes) else str(flat[i])
        try:
            out[name] = [int(x) for x in json.loads(flat[i + 1])]
        except (TypeError, ValueError):
            out[name] = []
    return out


# The items of every host that beat within the last ARGV[1] ms.
_BEATING = lua("leases_beating")


def beating_items(rds: redis_lib.Redis, within_s: float) -> set[int]:
    """Every item listed by a host whose last beat is at most `within_s` old (by Redis's clock)."""
    script = rds.register_script(_BEATING)
    out: set[int] = set()
    for raw in script(keys=[HOSTS_KEY], args=[int(within_s * 1000), HOST_KEY.format("")]):
        try:
            out.update(int(x) for x in json.loads(raw))
        except (TypeError, ValueError):
            continue
    return out


def host_items(rds: redis_lib.Redis, names: list[str]) -> dict[str, list[int]]:
    """The items the named processes last said they hold or have received (their beat's record)."""
    if not names:
        return {}
    out: dict[str, list[int]] = {}
    for name, raw in zip(names, rds.mget([HOST_KEY.format(n) for n in names]), strict=True):
        try:
            out[name] = [int(x) for x in json.loads(raw)] if raw is not None else []
        except (TypeError, ValueError):
            out[name] = []
    return out


class LeaseKeeper:
    """Registry of the items this process holds, and the thread that renews their leases."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        lease_s: float,
        *,
        beat_s: float | None = None,
        renew: Callable[[Session, list[tuple[int, int]], float], int] = extend_leases,
        redis: redis_lib.Redis | None = None,
        host_beat_s: float = HOST_BEAT_S,
    ) -> None:
        self._sessions = sessions
        self._lease_s = float(lease_s)
        self.beat_s = beat_s if beat_s is not None else max(MIN_BEAT_S, self._lease_s / 3.0)
        self._renew = renew
        self._held: dict[int, int] = {}  # item id -> lease token
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The host beat (module docstring): its own thread, so that a database outage that holds a lease
        # renewal does not silence the host, nor a Redis outage the renewals.
        self._redis = redis
        self.host_beat_s = host_beat_s
        self.name = process_id()
        self._waiting: Callable[[], list[int]] = list
        self._host_thread: threading.Thread | None = None
        self._host_beat = redis.register_script(_HOST_BEAT) if redis is not None else None

    def watch_waiting(self, waiting: Callable[[], list[int]]) -> None:
        """Where the ids of the items received and not started come from (workers/bootsteps.py)."""
        self._waiting = waiting

    def start(self) -> None:
        """Start beating as a host now (a worker does at start-up: its received items count from then)."""
        with self._lock:
            self._start_threads()

    def _start_threads(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="factgate-lease-keeper", daemon=True)
            self._thread.start()
        if self._host_thread is None and self._host_beat is not None:
            self._host_thread = threading.Thread(
                target=self._run_host, name="factgate-host-beat", daemon=True
            )
            self._host_thread.start()

    def host_beat(self) -> None:
        """Tell the other hosts, through Redis, that this one is alive and what it holds."""
        if self._host_beat is None:
            return
        items = sorted({i for i, _token in self.held()} | set(self._waiting()))
        record_ms = int(max(self._lease_s, 60.0) * 2000)
        keys = [HOSTS_KEY, HOST_KEY.format(self.name)]
        self._host_beat(keys=keys, args=[self.name, json.dumps(items), record_ms])

    def _run_host(self) -> None:
        while not self._stop.wait(self.host_beat_s):
            try:
                self.host_beat()
            except Exception:  # Redis away: the other hosts see this one silent, which is the truth
                log.debug("could not beat as a host", exc_info=True)

    @contextmanager
    def hold(self, item_id: int, token: int) -> Iterator[None]:
        """Keep this item's lease alive for the duration of the block."""
        with self._lock:
            self._held[item_id] = token
            if self._thread is None:
                self._start_threads()
        try:
            yield
        finally:
            with self._lock:
                if self._held.get(item_id) == token:
                    del self._held[item_id]

    def held(self) -> list[tuple[int, int]]:
        with self._lock:
            return sorted(self._held.items())

    def beat(self) -> int:
        """Renew every held lease once; returns how many rows moved (0 when nothing is held)."""
        held = self.held()
        if not held:
            return 0
        with session_scope(self._sessions) as session:
            return self._renew(session, held, self._lease_s)

    def _run(self) -> None:
        while not self._stop.wait(self.beat_s):
            try:
                self.beat()
            except Exception:  # the database may be away for a moment; the next beat tries again
                log.warning("could not renew item leases", exc_info=True)

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(self.beat_s + 1.0)
        if self._host_thread is not None:
            self._host_thread.join(self.host_beat_s + 1.0)
        if self._redis is not None:
            try:  # a stopped host leaves the registry (a killed one is forgotten after its leases)
                self._redis.zrem(HOSTS_KEY, self.name)
                self._redis.delete(HOST_KEY.format(self.name))
            except Exception:
                log.debug("could not leave the host registry", exc_info=True)
