"""The lease heartbeat: while a worker holds items, their leases keep moving forward.

A lease bounds how long a claimed item may look alive without a worker behind it; the sweeper hands an
expired one to another worker. An investigation (one Agent call, then several Decisions calls, each behind
a rate-limiter wait) can outlive any fixed lease, so each worker process runs one daemon thread that,
every third of a lease, pushes the leases of everything it holds in one UPDATE. Only a worker that stopped
(killed, frozen, cut off from the database) lets its leases run out — which is exactly when another worker
should take over.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

from jobs.items import extend_leases
from models import session_scope

log = logging.getLogger("factgate.workers")

MIN_BEAT_S = 0.5


class LeaseKeeper:
    """Registry of the items this process holds, and the thread that renews their leases."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        lease_s: float,
        *,
        beat_s: float | None = None,
        renew: Callable[[Session, list[tuple[int, int]], float], int] = extend_leases,
    ) -> None:
        self._sessions = sessions
        self._lease_s = float(lease_s)
        self.beat_s = beat_s if beat_s is not None else max(MIN_BEAT_S, self._lease_s / 3.0)
        self._renew = renew
        self._held: dict[int, int] = {}  # item id -> lease token
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def hold(self, item_id: int, token: int) -> Iterator[None]:
        """Keep this item's lease alive for the duration of the block."""
        with self._lock:
            self._held[item_id] = token
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="factgate-lease-keeper", daemon=True)
                self._thread.start()
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
