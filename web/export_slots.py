"""At most FACTGATE_MAX_EXPORTS_PER_TENANT streamed exports of one tenant at once; past it, a 429.

An export (a job's results as NDJSON or CSV, its errors, the downloadable report) holds a web thread for as
long as its reader takes, and a reader can take as long as it likes: without a bound, one tenant opening
downloads and reading them slowly could hold every thread of every web process. Each export takes a slot
of its tenant before its first byte and gives it back on every way out: its last piece sent, an error while
streaming, or the server closing the response (a client that hung up mid-stream; the response is closed
even when its iterable was never started). Giving a slot back twice is harmless.

The slots are counted in Redis in server mode, so the bound holds across web processes: a sorted set per
tenant of the live exports' leases, scored by when each lease lapses (`LEASE_S`, renewed as the export
streams), so a process that died mid-export frees its slots when their leases lapse. Taking a slot is one
Lua script (drop lapsed leases, count, add), atomic in Redis. Without Redis (embedded mode: one process),
or while Redis cannot be reached, they are counted in this process.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import redis.exceptions
from flask import Response
from redis import Redis

from web.auth import current_tenant
from web.session import resources

log = logging.getLogger("factgate.web")

# How long a slot outlives its last renewal: a process that died mid-export frees it after this.
LEASE_S = 120.0
# An export renews its lease at most this often (once per piece sent would be a Redis call per 16 KiB).
RENEW_EVERY_S = 30.0
# What a refused export is told to wait (`Retry-After`): exports are long, so soon enough to be useful.
RETRY_AFTER_S = 10
KEY_PREFIX = "factgate:exports:"

# KEYS[1] the tenant's set; ARGV: now, lease expiry, the limit, the new lease's id. 1 when taken, else 0.
_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil((tonumber(ARGV[2]) - tonumber(ARGV[1])) * 1000))
return 1
"""
_REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


class ExportsBusy(Exception):  # noqa: N818 - read as "the tenant's exports are busy"
    """The tenant already has as many exports streaming as it may."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"{limit} downloads of your jobs are already being streamed, the most at once; try again when "
            "one has finished"
        )
        self.limit = limit
        self.retry_after_s = RETRY_AFTER_S


@dataclass
class ExportSlot:
    """One export's hold on a slot: `renew` while streaming, `release` on every way out (idempotent)."""

    _release: Callable[[], None]
    _renew: Callable[[], None] = lambda: None
    _released: bool = False
    _renewed_at: float = field(default_factory=time.monotonic)

    def renew(self) -> None:
        now = time.monotonic()
        if now - self._renewed_at >= RENEW_EVERY_S:
            self._renewed_at = now
            self._renew()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._release()


class LocalSlots:
    """The slots counted in this process (embedded mode, or while Redis is away)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: Counter[uuid.UUID] = Counter()

    def take(self, tenant_id: uuid.UUID, limit: int) -> ExportSlot | None:
        with self._lock:
            if self._taken[tenant_id] >= limit:
                return None
            self._taken[tenant_id] += 1

        def release() -> None:
            with self._lock:
                self._taken[tenant_id] -= 1
                if self._taken[tenant_id] <= 0:
                    del self._taken[tenant_id]

        return ExportSlot(release)

    def in_use(self, tenant_id: uuid.UUID) -> int:
        with self._lock:
            return self._taken[tenant_id]


LOCAL = LocalSlots()


def _take_in_redis(rds: Redis, tenant_id: uuid.UUID, limit: int) -> ExportSlot | None:
    key = f"{KEY_PREFIX}{tenant_id}"
    lease = uuid.uuid4().hex
    now = time.time()
    taken = rds.eval(_TAKE, 1, key, now, now + LEASE_S, limit, lease)
    if not taken:
        return None

    def release() -> None:
        try:
            rds.zrem(key, lease)
        except _REDIS_DOWN:
            log.warning("could not give back an export slot of tenant %s; its lease lapses", tenant_id)

    def renew() -> None:
        try:
            rds.zadd(key, {lease: time.time() + LEASE_S}, xx=True)
            rds.expire(key, math.ceil(LEASE_S))
        except _REDIS_DOWN:
            log.warning("could not renew an export slot of tenant %s", tenant_id)

    return ExportSlot(release, renew)


def take_export_slot(rds: Redis | None, tenant_id: uuid.UUID, limit: int) -> ExportSlot:
    """A slot for one export of the tenant, or ExportsBusy. A limit of 0 means no bound."""
    if limit <= 0:
        return ExportSlot(lambda: None)
    slot: ExportSlot | None
    if rds is None:
        slot = LOCAL.take(tenant_id, limit)
    else:
        try:
            slot = _take_in_redis(rds, tenant_id, limit)
        except _REDIS_DOWN:
            log.warning(
                "Redis is unreachable: exports of tenant %s are bounded in this process only", tenant_id
            )
            slot = LOCAL.take(tenant_id, limit)
    if slot is None:
        raise ExportsBusy(limit)
    return slot


def holding(slot: ExportSlot, body: Iterator[str]) -> Iterator[str]:
    """`body`, renewing `slot` as it streams and releasing it when it ends, fails or is closed."""
    try:
        for piece in body:
            slot.renew()
            yield piece
    finally:
        slot.release()


def export_response(
    body: Iterator[str], mimetype: str, *, job_status: str, disposition: str | None = None
) -> Response:
    """The streamed response of one export of this request's tenant, holding one of its slots until the
    response ends or is closed; ExportsBusy when none is free. Call it last in the view: nothing may be
    refused after the slot is taken. `X-Job-Status` says the job's status when the stream started;
    `disposition` is the Content-Disposition, if any."""
    res = resources()
    slot = take_export_slot(res.redis, current_tenant().id, res.settings.max_exports_per_tenant)
    resp = Response(holding(slot, body), mimetype=mimetype)
    # Closed by the server however the response ends, even before its first piece (a hung-up client).
    resp.call_on_close(slot.release)
    if disposition is not None:
        resp.headers["Content-Disposition"] = disposition
    resp.headers["X-Job-Status"] = job_status
    return resp
