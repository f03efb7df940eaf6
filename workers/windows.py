"""A window's join on Redis: the last `run_item` of a window to return sends its `after_window`.

Why not Celery's chord: on the Redis backend every item task of a chord ran the backend's chord script on
its way out (encode a result nobody reads, a uuid, a Lua script over six keys: 6 % of a worker's CPU at the
ceiling, bench/ceiling.py), and every item message carried the whole body signature in its headers, to be
serialised by the dispatcher and parsed again by the worker. Here the dispatcher gives each window a key and
its size, and each item message carries only those with the body's arguments (`Window.as_arg`); an item
counts itself with one INCR (the first also sets the expiry) whatever became of it — claimed, refused, a
duplicate, a crash — so the window closes once every message of it returned, as a chord does.

Redis stays a hint, as for Celery's counters: a counter lost with Redis, or a message lost before it ran,
leaves a window that never closes; the dispatcher finalizes a job with no open item every few seconds, and
the sweep moves stalled questions on (docs/architecture.md). A message delivered twice counts twice and can
close its window early; `after_window` is idempotent (it moves on only questions whose children are all
settled and finalizes only a job with nothing open), and a counter passes its size only once, so the body
is sent at most once per window.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("factgate.workers")

KEY_PREFIX = "factgate:window:"
# A window left open (a lost message) is forgotten after this long, as Celery's chord counters were after
# `result_expires`; a window closes within seconds otherwise.
TTL_S = 24 * 3600


@dataclass(frozen=True)
class Window:
    """One window the dispatcher sent: its counter's key, how many items it has, and its body's arguments."""

    key: str
    size: int
    job_id: str
    question_ids: tuple[int, ...] = ()

    @classmethod
    def new(cls, job_id: uuid.UUID, size: int, question_ids: Sequence[int] = ()) -> Window:
        return cls(f"{KEY_PREFIX}{uuid.uuid4().hex}", size, str(job_id), tuple(question_ids))

    def as_arg(self) -> list[Any]:
        """What an item message carries (JSON: a list, read back by `from_arg`)."""
        return [self.key, self.size, self.job_id, list(self.question_ids)]

    @classmethod
    def from_arg(cls, raw: Any) -> Window | None:
        """The window of a message, or None for one without (or with a malformed one: logged, not raised —
        an item must run whatever its join says)."""
        if raw is None:
            return None
        try:
            key, size, job_id, question_ids = raw
            return cls(str(key), int(size), str(job_id), tuple(int(q) for q in question_ids))
        except (TypeError, ValueError):
            log.warning("an item message with a malformed window %r; it joins nothing", raw)
            return None


def count_part(rds: Any, window: Window, send_body: Callable[[str, list[int]], None]) -> bool:
    """Count one item of `window` as returned; the one that makes it whole sends the body. True then.

    Never raises: Redis or the broker away leaves the window open, and the dispatcher's finalize and the
    sweep do the body's work (module docstring)."""
    try:
        count = int(rds.incr(window.key))
        if count == 1:
            # The first part sets the expiry: one command for every other part (a pipeline of INCR and
            # EXPIRE cost a worker as much CPU as Celery's chord script did).
            rds.expire(window.key, TTL_S)
        if count != window.size:
            return False
        send_body(window.job_id, list(window.question_ids))
    except Exception:
        log.warning("window %s of job %s: could not count or close it; the sweep moves it on", window.key,
                    window.job_id, exc_info=True)  # fmt: skip
        return False
    try:
        rds.delete(window.key)
    except Exception:
        log.debug("window %s: counter not deleted (it expires)", window.key, exc_info=True)
    return True
