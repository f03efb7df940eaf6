"""A list of running jobs reads their counts from what the dispatcher already counted (each job's schedule
view, `jobs.schedule["counts"]`), not from their items, on real Postgres with a dispatcher ticking by hand:
the figures match an exact count taken at the same moment, they say when they were counted, and building
the list (the API's objects) runs no statement on `items`. A stale view, or one older than a retry, is not
trusted: those jobs are counted exactly, as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, select, update

from jobs.progress import SHARED_COUNTS_MAX_AGE_S, RequestCounts, counts_of, jobs_counts
from jobs.serialize import job_objects
from models import Item, Job, make_session_factory, session_scope, utcnow
from tests.integration.stack import fresh_database
from tests.integration.test_dispatcher import Harness, _job
from web.pages_jobs import counts_note
from workers.schedules import ScheduleConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def db() -> Iterator[tuple[str, Engine]]:
    with fresh_database() as (url, engine):
        yield url, engine


class Statements:
    """The SQL statements an engine runs while `recording`."""

    def __init__(self, engine: Engine) -> None:
        self.seen: list[str] = []
        self.on = False
        event.listen(engine, "before_cursor_execute", self._note)

    def _note(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if self.on:
            self.seen.append(" ".join(statement.lower().split()))

    def touching_items(self) -> list[str]:
        return [s for s in self.seen if " items" in s or "items." in s]


def listed(
    engine: Engine, ids: list[uuid.UUID]
) -> tuple[dict[uuid.UUID, RequestCounts], list[dict[str, Any]]]:
    with session_scope(make_session_factory(engine)) as s:
        jobs = list(s.scalars(select(Job).where(Job.id.in_(ids)).order_by(Job.created_at)))
        return jobs_counts(s, jobs), job_objects(s, jobs)


def exact(engine: Engine, ids: list[uuid.UUID]) -> dict[uuid.UUID, RequestCounts]:
    with session_scope(make_session_factory(engine)) as s:
        return counts_of(s, ids)


def test_a_list_of_running_jobs_reads_the_dispatchers_counts_not_their_items(
    db: tuple[str, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, engine = db
    ids = [_job(engine, name, n) for name, n in (("a", 30), ("b", 20), ("c", 10))]
    harness = Harness(url, in_flight=4)
    harness.dispatcher.schedules.config = ScheduleConfig(refresh_s=0.0)  # every tick writes the views
    try:
        harness.run(8)  # sends and settles items: the jobs are part done
        assert harness.dispatcher.lead()
        harness.dispatcher.tick()  # the views as of now (nothing settles after this)
    finally:
        harness.close()

    truth = exact(engine, ids)
    assert sum(c.completed for c in truth.values()) >= 4  # progress to show
    statements = Statements(engine)
    statements.on = True
    counts, objects = listed(engine, ids)
    statements.on = False

    assert statements.seen  # the listener works: the jobs and tenants were read
    assert statements.touching_items() == []
    assert counts == truth  # the same figures (as_of aside)
    assert all(c.as_of is not None for c in counts.values())
    for obj in objects:
        job_id = uuid.UUID(obj["id"])
        assert obj["request_counts"] == truth[job_id].as_dict()
        assert obj["request_counts_as_of"] == obj["schedule"]["updated_at"]
        assert obj["schedule"]["counts"] == truth[job_id].as_dict()
    some = next(iter(counts.values()))
    assert counts_note(some).startswith("Counts as of ")
    assert counts_note(truth[ids[0]]) == ""

    # A view older than SHARED_COUNTS_MAX_AGE_S (no dispatcher writing), or older than the job's last
    # queueing (a retry), is not used: those jobs are counted from their items, exactly.
    stale, retried, fresh = ids
    with session_scope(make_session_factory(engine)) as s:
        job = s.get(Job, stale)
        assert job is not None and job.schedule is not None
        old = (utcnow() - timedelta(seconds=SHARED_COUNTS_MAX_AGE_S + 5)).isoformat()
        s.execute(update(Job).where(Job.id == stale).values(schedule={**job.schedule, "updated_at": old}))
        s.execute(update(Job).where(Job.id == retried).values(queued_at=utcnow() + timedelta(seconds=1)))
        s.execute(update(Item).where(Item.job_id == retried).values(status="pending"))
    statements.seen.clear()
    statements.on = True
    counts, _ = listed(engine, ids)
    statements.on = False
    # One grouped count per list (the counts, then the objects), each of the two jobs it could not trust.
    touching = statements.touching_items()
    assert len(touching) == 2 and all(s.count("::uuid") == 2 for s in touching), touching
    truth = exact(engine, ids)
    assert counts == truth
    assert counts[stale].as_of is None and counts[retried].as_of is None
    assert counts[fresh].as_of is not None
