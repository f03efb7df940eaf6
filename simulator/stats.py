"""Request counters served at `GET /stats`, so load drills can check what the simulator answered."""

from __future__ import annotations

import threading
from collections import Counter


class Stats:
    """Counts per endpoint and status (a status code, or `dropped`), and injected faults per kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_endpoint: dict[str, Counter[str]] = {}
        self._faults: Counter[str] = Counter()

    def record(self, endpoint: str, status: int | str) -> None:
        with self._lock:
            self._by_endpoint.setdefault(endpoint, Counter())[str(status)] += 1

    def record_fault(self, kind: str) -> None:
        with self._lock:
            self._faults[kind] += 1

    def reset(self) -> None:
        with self._lock:
            self._by_endpoint.clear()
            self._faults.clear()

    def snapshot(self) -> dict[str, object]:
        """A JSON-ready copy: `{"total", "endpoints": {endpoint: {status: n}}, "faults": {kind: n}}`."""
        with self._lock:
            endpoints = {
                name: dict(sorted(counts.items())) for name, counts in sorted(self._by_endpoint.items())
            }
            faults = dict(sorted(self._faults.items()))
        total = sum(sum(counts.values()) for counts in endpoints.values())
        return {"total": total, "endpoints": endpoints, "faults": faults}
