"""The dispatcher's rounds against real Postgres, one free slot at a time (no workers: its sends are
recorded and items are settled by hand), so what it decides can be counted exactly."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from config import Settings
from jobs import scheduling
from jobs.intake import UnitSpec, create_job
from jobs.scheduling import Ready
from jobs.tenancy import get_or_create_tenant, set_tenant
from models import ApiCall, Item, Job, session_scope, utcnow
from models.db import make_session_factory
from tests.integration.stack import fresh_database
from workers import dispatcher as dispatcher_module
from workers.app import make_celery
from workers.context import build_context
from workers.dispatcher import Dispatcher

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def db() -> Iterator[tuple[str, Engine]]:
    with fresh_database() as pair:
        yield pair


def _job(engine: Engine, tenant: str, n: int, *, weight: float = 1.0, priority: str = "batch") -> uuid.UUID:
    with session_scope(make_session_factory(engine)) as s:
        get_or_create_tenant(s, tenant)
        set_tenant(s, tenant, weight=weight)
        t = get_or_create_tenant(s, tenant)
        units = [
            UnitSpec(
                stage="claim", custom_id=f"{tenant}{i}", mode="ungrounded", input={"claim": f"{tenant} {i}"}
            )
            for i in range(n)
        ]
        job, _ = create_job(s, tenant_id=t.id, kind="claims", options={"priority": priority}, units=units)
        return job.id


class Harness:
    """A dispatcher whose sends are recorded; `settle_one` finishes the oldest item in flight. A test that
    ticks by hand renews the lock first (`lead()`), as the loop does: a tick over 1.5 s after the last
    renewal sends nothing (`still_leading`)."""

    def __init__(self, url: str, in_flight: int, decisions_rps: float = 10.0) -> None:
        settings = Settings(database_url=url, decisions_rps=decisions_rps)
        self.ctx = build_context(settings)
        self.sent: list[uuid.UUID] = []
        self.dispatcher = Dispatcher(self.ctx, make_celery(settings, with_tasks=False), send=self._record)
        self.dispatcher.target = lambda endpoint: in_flight  # type: ignore[method-assign]
        self.dispatcher.lead()

    def _record(self, job_id: uuid.UUID, window: list[Ready], _producer: object) -> None:
        self.sent.extend([job_id] * len(window))

    def settle_one(self) -> None:
        with session_scope(self.ctx.sessions) as s:
            oldest = s.scalar(
                select(Item.id)
                .where(Item.enqueued_at.is_not(None), Item.status == "pending")
                .order_by(Item.enqueued_at, Item.id)
                .limit(1)
            )
            if oldest is not None:
                s.execute(update(Item).where(Item.id == oldest).values(status="done", finished_at=utcnow()))

    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            # Renew the lock each round, as the loop does: a tick more than the lock's validity after the
            # last renewal sends nothing (still_leading), which on a loaded runner skewed the shares.
            assert self.dispatcher.lead()
            self.dispatcher.tick()
            self.settle_one()

    def close(self) -> None:
        self.dispatcher.stop()  # releases the lock: the embedded store outlives the test
        self.ctx.close()


def test_weights_hold_when_slots_free_up_one_at_a_time(db: tuple[str, Engine]) -> None:
    url, engine = db
    jobs = {name: _job(engine, name, 200, weight=w) for name, w in (("a", 1.0), ("b", 1.0), ("c", 2.0))}
    harness = Harness(url, in_flight=3)
    try:
        harness.run(126)
    finally:
        harness.close()
    # Past the first fill of the in-flight slots, 120 sends: deficit round robin is exact to one item per job
    # and round, so 120 sends put each share within 1/120 of its weight, well inside ±2 % (each round costs a
    # dozen queries: 400 took long on a busy runner, 240 took 55 s under coverage here).
    window = harness.sent[6:126]
    counts = Counter(window)
    shares = {name: counts[job] / len(window) for name, job in jobs.items()}
    assert shares["a"] == pytest.approx(0.25, abs=0.02) and shares["b"] == pytest.approx(0.25, abs=0.02)
    assert shares["c"] == pytest.approx(0.50, abs=0.02)


@pytest.mark.parametrize(("rps", "batch"), [(0.0, 4), (10.0, 1)])
def test_an_unlimited_scope_sends_in_batches_and_a_rated_one_at_every_free_slot(
    db: tuple[str, Engine], rps: float, batch: int
) -> None:
    """Unlimited (a free upstream): the scope waits for half its target before it sends again, so windows
    are few and large; with a rate every freed slot is filled at the next tick (the limiter must never
    find nobody waiting)."""
    url, engine = db
    job = _job(engine, "big", 40)
    harness = Harness(url, in_flight=8, decisions_rps=rps)
    try:
        assert harness.dispatcher.lead() and harness.dispatcher.tick()
        assert len(harness.sent) == 8  # nothing in flight: the first fill goes at once, whole
        for settled in range(1, 6):
            harness.settle_one()
            assert harness.dispatcher.lead() and harness.dispatcher.tick()
            # Sent once `batch` slots are free, then waiting for `batch` more.
            assert len(harness.sent) == 8 + (settled // batch) * batch
        assert harness.dispatcher.batch_of("decisions", 8) == batch
        assert set(harness.sent) == {job}
    finally:
        harness.close()


def test_a_lone_small_job_is_sent_at_once_on_an_unlimited_scope(db: tuple[str, Engine]) -> None:
    url, engine = db
    small = _job(engine, "small", 3)  # fewer than the batch: with nothing in flight it need not wait
    harness = Harness(url, in_flight=64, decisions_rps=0.0)
    try:
        assert harness.dispatcher.lead() and harness.dispatcher.tick()
        assert harness.sent == [small] * 3
    finally:
        harness.close()


def test_an_empty_scope_is_looked_at_again_only_later_or_for_a_new_job(
    db: tuple[str, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claims job has no Agent or Search items: those scopes are read once, then left alone for
    QUIET_RECHECK_S — unless a new job arrives, which is looked for at once."""
    url, engine = db
    _job(engine, "a", 40)
    harness = Harness(url, in_flight=8)
    asked: list[str] = []
    real = scheduling.ready_items

    def ready_items(session: Any, job_ids: Any, endpoint: str, cap: int, now: Any = None) -> Any:
        asked.append(endpoint)
        return real(session, job_ids, endpoint, cap, now)

    monkeypatch.setattr(scheduling, "ready_items", ready_items)
    try:
        assert harness.dispatcher.lead() and harness.dispatcher.tick()
        assert sorted(asked) == ["agent", "decisions", "search"]
        asked.clear()
        harness.settle_one()
        assert harness.dispatcher.lead() and harness.dispatcher.tick()
        assert asked == ["decisions"]  # the empty scopes wait
        _job(engine, "b", 3)
        asked.clear()
        harness.settle_one()
        assert harness.dispatcher.lead() and harness.dispatcher.tick()
        assert sorted(asked) == ["agent", "decisions", "search"]  # a new job: every scope looked at
        asked.clear()
        time.sleep(dispatcher_module.QUIET_RECHECK_S)
        harness.settle_one()
        assert harness.dispatcher.lead() and harness.dispatcher.tick()
        assert sorted(asked) == ["agent", "decisions", "search"]  # looked at again once the wait is over
    finally:
        harness.close()


def test_the_in_flight_bound_holds_and_a_new_job_is_served_at_the_next_free_slot(
    db: tuple[str, Engine],
) -> None:
    url, engine = db
    big = _job(engine, "big", 300)
    harness = Harness(url, in_flight=4)
    try:
        harness.dispatcher.tick()
        assert len(harness.sent) == 4  # the broker holds the scope's target, not the job
        harness.dispatcher.tick()
        assert len(harness.sent) == 4  # nothing is free: nothing more is sent
        small = _job(engine, "small", 3)
        harness.settle_one()
        harness.dispatcher.tick()
        assert harness.sent[-1] == small  # the first freed slot goes to the newcomer
        harness.run(10)
    finally:
        harness.close()
    assert Counter(harness.sent)[small] == 3 and Counter(harness.sent)[big] >= 10


def test_a_scope_answered_from_the_verdict_store_keeps_more_in_flight(db: tuple[str, Engine]) -> None:
    """While most of the latest Decisions answers were reused (no limiter slot, settled in milliseconds),
    the in-flight bound follows the item rate they allow, rate / (1 - share); sent answers bring it back."""
    url, engine = db
    job = _job(engine, "rerun", 1)
    settings = Settings(database_url=url, decisions_rps=10.0)
    ctx = build_context(settings)
    dispatcher = Dispatcher(ctx, make_celery(settings, with_tasks=False))
    try:
        dispatcher.allocation.refresh_latency(time.monotonic())
        plain = dispatcher.target("decisions")
        with session_scope(make_session_factory(engine)) as s:
            tenant_id = s.scalar(select(Job.tenant_id).where(Job.id == job))
            s.add_all(
                ApiCall(tenant_id=tenant_id, job_id=job, endpoint="decisions", attempt=1, reused=True)
                for _ in range(20)
            )
        dispatcher.allocation.refresh_latency(time.monotonic() + 60)
        assert dispatcher.target("decisions") > 2 * plain
        with session_scope(make_session_factory(engine)) as s:
            assert scheduling.reused_share(s, "decisions") == 1.0
            s.add_all(
                ApiCall(
                    tenant_id=tenant_id, job_id=job, endpoint="decisions", status_code=200, latency_ms=300.0
                )
                for _ in range(50)
            )
        dispatcher.allocation.refresh_latency(time.monotonic() + 120)
        assert dispatcher.target("decisions") <= plain
    finally:
        dispatcher.stop()
        ctx.close()
