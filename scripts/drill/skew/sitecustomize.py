"""Shifts this Python process's wall clock by FACTGATE_DRILL_CLOCK_OFFSET_S seconds (the drill's clock-skew
scenario puts this folder first on a worker's PYTHONPATH, so Python imports it at start-up).

Why not libfaketime: with it preloaded, every `time.sleep` of this Python failed with EINVAL (its
clock_nanosleep on an absolute monotonic deadline), so the worker could not wait for a limiter slot. Here
only the wall clock moves — `time.time`, `time.time_ns`, `datetime.now`/`utcnow` — and monotonic time and
sleeps stay true, which is what a host whose clock is off looks like to a program.
"""

from __future__ import annotations

import datetime as _dt
import os
import time as _time

_OFFSET_S = float(os.environ.get("FACTGATE_DRILL_CLOCK_OFFSET_S") or 0)

if _OFFSET_S:
    _real_time, _real_time_ns = _time.time, _time.time_ns
    _delta = _dt.timedelta(seconds=_OFFSET_S)

    def _time_shifted() -> float:
        return _real_time() + _OFFSET_S

    def _time_ns_shifted() -> int:
        return _real_time_ns() + int(_OFFSET_S * 1e9)

    _time.time = _time_shifted
    _time.time_ns = _time_ns_shifted

    class _ShiftedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz: _dt.tzinfo | None = None) -> _ShiftedDatetime:
            return super().now(tz) + _delta

        @classmethod
        def utcnow(cls) -> _ShiftedDatetime:
            return super().utcnow() + _delta

    _dt.datetime = _ShiftedDatetime  # type: ignore[misc]
