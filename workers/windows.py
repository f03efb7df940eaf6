"""The windows a leader has sent and not closed yet, and the bodies of those it closed.

Why the leader closes windows itself (server mode, a Redis result backend): Celery's chord on Redis ran
the backend's chord script on every item's way out (a result nobody reads encoded, a uuid, a Lua script
over six keys) and carried the body in every message; a window's own Redis counter still cost each item an
INCR. The leader reads each scope's items in flight at every tick anyway (to count them), so a window whose
items have all left flight — settled, or given back for a later try — is closed there, and its body,
`after_window(job, questions)`, goes out with the tick: nothing per item. A window sent by an earlier
leader is closed by nobody; the leader's finalize of jobs with nothing open (workers/dispatcher.py) and
the sweep's advance of stalled questions do its work, as they did for a counter lost with Redis.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True)
class OpenWindow:
    """A window the leader sent: its job, the questions its items belong to, and its items."""

    job_id: uuid.UUID
    questions: tuple[int, ...]
    items: frozenset[int]


@dataclass
class WindowBook:
    """The open windows by scope, the windows closed this tick, and the scopes whose items in flight this
    tick read (the others are closed at its end, `unlooked`)."""

    open: dict[str, list[OpenWindow]] = field(default_factory=dict)
    closed: list[OpenWindow] = field(default_factory=list)
    looked: set[str] = field(default_factory=set)

    def add(self, scope: str, window: OpenWindow) -> None:
        self.open.setdefault(scope, []).append(window)

    def close(self, scope: str, flying: set[int]) -> None:
        """Close the scope's windows none of whose items is in flight any more."""
        open_windows = self.open.get(scope)
        if not open_windows:
            return
        still = [w for w in open_windows if not w.items.isdisjoint(flying)]
        if len(still) < len(open_windows):
            self.closed += [w for w in open_windows if w.items.isdisjoint(flying)]
        if still:
            self.open[scope] = still
        else:
            del self.open[scope]

    def unlooked(self) -> list[str]:
        """The scopes with open windows that this tick did not look at."""
        return [s for s in self.open if s not in self.looked]

    def take_closed(self) -> dict[uuid.UUID, list[int]]:
        """The bodies to send for the windows closed this tick: per job, its questions merged and sorted;
        the closed list starts afresh."""
        closed, self.closed = self.closed, []
        per_job: dict[uuid.UUID, set[int]] = {}
        for window in closed:
            per_job.setdefault(window.job_id, set()).update(window.questions)
        return {job_id: sorted(questions) for job_id, questions in per_job.items()}
