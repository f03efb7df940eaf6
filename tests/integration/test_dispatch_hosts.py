"""A host that goes silent gives its in-flight slots back (workers/leases.py, workers/hosts.py).

The dispatcher runs against real Postgres with its sends recorded (no worker); "hosts" are LeaseKeepers
beating into the context's Redis store, and a host is made silent by moving its last beat back in time,
so nothing here waits on a clock."""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select, update

import jobs.items
from config import Settings
from jobs.finalize import maybe_finalize
from jobs.intake import UnitSpec, create_job
from jobs.items import extend_leases, try_claim
from jobs.scheduling import Ready
from jobs.sweeper import expire_leases
from jobs.tenancy import get_or_create_tenant
from models import Item, Job, JobStatus, autocommit_scope, session_scope, utcnow
from models.db import make_session_factory
from tests.integration.stack import fresh_database
from workers.app import make_celery
from workers.context import build_context
from workers.dispatcher import FITNESS_KEY, LEADER_KEY, Dispatcher, DispatcherConfig, refuse_stale_dispatch
from workers.fitness import FitnessConfig
from workers.leases import HOST_DEAD_S, HOST_SILENT_S, HOSTS_KEY, REDRIVE_GRACE_S, LeaseKeeper

pytestmark = [pytest.mark.integration]

TARGET = 4


@pytest.fixture
def db() -> Iterator[tuple[str, Engine]]:
    with fresh_database() as pair:
        yield pair


def _job(engine: Engine, n: int) -> uuid.UUID:
    with session_scope(make_session_factory(engine)) as s:
        tenant = get_or_create_tenant(s, "hosts")
        units = [
            UnitSpec(stage="claim", custom_id=f"c{i}", mode="ungrounded", input={"claim": f"claim {i}"})
            for i in range(n)
        ]
        job, _ = create_job(s, tenant_id=tenant.id, kind="claims", options={}, units=units)
        return job.id


class Harness:
    """A leading dispatcher with a fixed target whose sends are recorded (item ids, in order)."""

    def __init__(self, url: str) -> None:
        settings = Settings(database_url=url)
        self.ctx = build_context(settings)
        self.sent: list[int] = []
        self.finalized: list[uuid.UUID] = []  # the jobs whose finalize the dispatcher asked for
        self.dispatcher = Dispatcher(
            self.ctx, make_celery(settings, with_tasks=False), send=self._record, finalize=self._finalize
        )
        self.dispatcher.target = lambda endpoint: TARGET  # type: ignore[method-assign]
        self.ctx.redis.delete(LEADER_KEY)  # the process's embedded store: another module's leader may remain
        assert self.dispatcher.lead()

    def _record(self, _job_id: uuid.UUID, window: list[Ready], _producer: object) -> None:
        self.sent.extend(r.id for r in window)

    def _finalize(self, job_id: uuid.UUID) -> None:
        """What `after_window` with no questions does on a worker: the job's finalize."""
        self.finalized.append(job_id)
        with session_scope(self.ctx.sessions) as s:
            maybe_finalize(s, job_id)

    def tick(self) -> list[int]:
        """One round, looking at the host registry afresh; the ids this round sent."""
        before = len(self.sent)
        self.dispatcher.hosts.lost_at = 0.0  # the registry is read every HOSTS_REFRESH_S; tests do not wait
        self.dispatcher.tick()
        return self.sent[before:]

    def close(self) -> None:
        self.dispatcher.stop()  # releases the lock: the embedded store lives as long as the process
        self.ctx.close()

    def host(self) -> LeaseKeeper:
        return LeaseKeeper(self.ctx.sessions, 300, redis=self.ctx.redis)

    def silence(self, host: LeaseKeeper) -> None:
        """Move the host's last beat back past HOST_SILENT_S, by the store's own clock."""
        seconds, micros = self.ctx.redis.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        self.ctx.redis.zadd(HOSTS_KEY, {host.name: now_ms - int((HOST_SILENT_S + 5) * 1000)})


def _rows(engine: Engine, ids: list[int]) -> dict[int, tuple[str, int]]:
    with session_scope(make_session_factory(engine)) as s:
        return {
            i: (str(st), int(a))
            for i, st, a in s.execute(select(Item.id, Item.status, Item.attempts).where(Item.id.in_(ids)))
        }


def test_a_silent_hosts_running_items_free_their_slots_and_stay_its_own(db: tuple[str, Engine]) -> None:
    url, engine = db
    _job(engine, 20)
    harness = Harness(url)
    host = harness.host()
    try:
        first = harness.tick()
        assert len(first) == TARGET
        with contextlib.ExitStack() as holding:
            for item_id in first:  # host A claims and runs them
                with autocommit_scope(harness.ctx.engine) as c:
                    claimed = try_claim(c, item_id, 300)
                assert claimed is not None
                holding.enter_context(host.hold(claimed.id, claimed.token))
            host.host_beat()
            assert harness.tick() == []  # a live host's running items fill the scope

            harness.silence(host)
            freed = harness.tick()
            assert len(freed) == TARGET and not set(freed) & set(first)  # new items in the freed slots
            # Nothing was taken from the silent host: its items are still running under its token.
            assert _rows(engine, first) == {i: ("running", 1) for i in first}

            host.host_beat()  # it comes back: its items count again, so the scope is over its target
            assert harness.tick() == []
    finally:
        host.close()
        harness.close()


def test_a_silent_hosts_items_not_started_are_sent_again(db: tuple[str, Engine]) -> None:
    url, engine = db
    _job(engine, 20)
    harness = Harness(url)
    host = harness.host()
    try:
        first = harness.tick()
        host.watch_waiting(lambda: list(first))  # received by host A, never started
        host.host_beat()
        assert harness.tick() == []
        harness.silence(host)
        again = harness.tick()
        assert sorted(again) == sorted(first)  # the same items, sent again at once
        assert _rows(engine, first) == {i: ("pending", 0) for i in first}  # one claim each, later
    finally:
        host.close()
        harness.close()


# --- fencing: a leader that lost its lock sends nothing that counts ------------------------------------


def _dispatched(engine: Engine) -> int:
    with session_scope(make_session_factory(engine)) as s:
        return len(list(s.scalars(select(Item.id).where(Item.enqueued_at.is_not(None)))))


def test_a_leader_whose_lock_may_have_lapsed_marks_and_sends_nothing(
    db: tuple[str, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, engine = db
    _job(engine, 20)
    harness = Harness(url)
    try:
        harness.dispatcher.leadership.valid_until = 0.0  # paused past its lock's expiry, as a tick begins
        assert harness.tick() == [] and _dispatched(engine) == 0
        assert harness.dispatcher.lead()  # still the holder: renewing makes it valid again
        assert len(harness.tick()) == TARGET

        # The lock lapses between marking and sending: nothing goes out and the marks are undone.
        answers = iter([True, False])
        monkeypatch.setattr(harness.dispatcher, "still_leading", lambda: next(answers, False))
        harness.dispatcher.hosts.lost = set()
        with session_scope(harness.ctx.sessions) as s:  # free the slots: settle what is in flight
            for item in s.scalars(select(Item).where(Item.enqueued_at.is_not(None))):
                item.status = "done"
        assert harness.tick() == [] and _dispatched(engine) == TARGET  # only the settled ones, marked before
    finally:
        harness.close()


def test_a_dispatch_of_an_older_term_is_refused_and_sent_again(db: tuple[str, Engine]) -> None:
    url, engine = db
    _job(engine, 20)
    first = Harness(url)
    try:
        sent = first.tick()
        old_term = first.dispatcher.term
        first.ctx.redis.delete(LEADER_KEY)  # its lock expired while it was away
        second = Dispatcher(
            first.ctx, make_celery(Settings(database_url=url), with_tasks=False), send=first._record
        )
        assert second.lead() and second.term > old_term
        assert refuse_stale_dispatch(first.ctx, sent[0], old_term, max_age_s=0)
        assert not refuse_stale_dispatch(first.ctx, sent[1], second.term, max_age_s=0)
        assert not refuse_stale_dispatch(first.ctx, sent[2], None, max_age_s=0)  # sent before terms existed
        with session_scope(first.ctx.sessions) as s:
            marks = dict(s.execute(select(Item.id, Item.enqueued_at).where(Item.id.in_(sent[:2]))).all())
        assert marks[sent[0]] is None and marks[sent[1]] is not None  # the refused one is dispatchable again
        second.stop()
    finally:
        first.close()


# --- one clock: a worker's wall clock decides nothing --------------------------------------------------


def test_a_worker_whose_clock_runs_behind_keeps_its_lease(
    db: tuple[str, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim and the heartbeat count the lease by the database's clock: a worker 90 s behind, with a
    60 s lease, used to write leases the sweeper found already run out, and its items ran twice."""
    _url, engine = db
    _job(engine, 3)
    sessions = make_session_factory(engine)
    with session_scope(sessions) as s:
        item_id = int(s.scalars(select(Item.id).order_by(Item.id).limit(1)).one())
    behind = utcnow() - timedelta(seconds=90)
    monkeypatch.setattr(jobs.items, "utcnow", lambda: behind)  # the worker's clock only
    with autocommit_scope(engine) as c:
        claimed = try_claim(c, item_id, 60)
    assert claimed is not None
    with session_scope(sessions) as s:
        assert extend_leases(s, [(claimed.id, claimed.token)], 60) == 1
    with session_scope(sessions) as s:
        assert expire_leases(s) == 0  # the sweeper, on a true clock, finds the lease alive
    with session_scope(sessions) as s:
        assert s.scalar(select(Item.status).where(Item.id == item_id)) == "running"


# --- a slow leader steps aside -------------------------------------------------------------------------

SLOWED_S = 0.3  # the slowed host's added round trip (a 256 kbit/s link queues its queries this long)


class _Slowed(Dispatcher):
    """A dispatcher whose every probe of Postgres and Redis waits an injected delay first."""

    def probe_rtt(self) -> float:
        started = time.monotonic()
        time.sleep(SLOWED_S)
        super().probe_rtt()
        return time.monotonic() - started


def _contenders(harness: Harness, url: str) -> tuple[Dispatcher, Dispatcher]:
    """The harness's leader, slowed, and a healthy second host; no tenure or unfit period to wait out."""
    at_once = DispatcherConfig(fitness=FitnessConfig(min_tenure_s=0.0, unfit_for_s=0.0))
    slow = _Slowed(
        harness.ctx,
        make_celery(Settings(database_url=url), with_tasks=False),
        send=harness._record,
        config=at_once,
    )
    fast = Dispatcher(
        harness.ctx,
        make_celery(Settings(database_url=url), with_tasks=False),
        send=harness._record,
        config=at_once,
    )
    harness.dispatcher.stop()
    harness.ctx.redis.delete(FITNESS_KEY)
    for d in (slow, fast):
        d.target = lambda endpoint: TARGET  # type: ignore[method-assign]
    assert slow.lead()
    return slow, fast


def _round(*dispatchers: Dispatcher) -> None:
    """One pass of each host's loop (`Dispatcher._run` without its waits): beat, lead or not, tick, assess."""
    for d in dispatchers:
        d.fitness.beat_at = -1e9  # beat every round: tests do not wait for FITNESS_BEAT_S
        d.beat_fitness()
        if d.lead():
            d.tick()
            d.assess()


def test_a_slowed_leader_hands_the_lock_to_the_fit_host_once(db: tuple[str, Engine]) -> None:
    url, engine = db
    _job(engine, 40)
    harness = Harness(url)
    slow, fast = _contenders(harness, url)
    holders: list[object] = []
    try:
        for _ in range(8):
            _round(slow, fast)
            holders.append(harness.ctx.redis.get(LEADER_KEY))
        changes = sum(1 for a, b in itertools.pairwise(holders) if a != b)
        assert changes == 1, holders  # moved once, and never back
        assert holders[-1] == fast.leadership.token.encode() and fast.leading and not slow.leading
        assert slow.stepped_aside == 1 and fast.stepped_aside == 0
        assert fast.term > slow.term  # a new reign: the slow one's messages are refused (fenced)
    finally:
        slow.stop()
        fast.stop()
        harness.close()


def test_a_slowed_leader_keeps_the_lock_with_nobody_fitter(db: tuple[str, Engine]) -> None:
    url, engine = db
    _job(engine, 40)
    harness = Harness(url)
    slow, fast = _contenders(harness, url)
    try:
        for _ in range(3):
            _round(slow)  # alone: a slow leader is better than none
        assert slow.leading and slow.stepped_aside == 0
        for _ in range(3):
            _round(slow, fast)
        assert fast.leading and slow.stepped_aside == 1
        fast.stop()  # the fit host goes away during the slow one's hold-off: the slow one leads again
        _round(slow)
        assert slow.leading
    finally:
        slow.stop()
        fast.stop()
        harness.close()


# --- a dead host's running items come back before their lease -------------------------------------------


def _age(harness: Harness, host: LeaseKeeper, silent_s: float, ids: list[int], unrenewed_s: float) -> None:
    """The host's last beat `silent_s` ago (the store's clock), its items' leases last renewed
    `unrenewed_s` ago (the database's: a lease is renewed to now + the lease's length)."""
    seconds, micros = harness.ctx.redis.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    harness.ctx.redis.zadd(HOSTS_KEY, {host.name: now_ms - int(silent_s * 1000)})
    lease_s = harness.ctx.settings.lease_s
    with session_scope(harness.ctx.sessions) as s:
        s.execute(
            update(Item)
            .where(Item.id.in_(ids))
            .values(lease_until=func.now() + timedelta(seconds=lease_s - unrenewed_s))
        )


@pytest.mark.parametrize(
    ("silent_s", "unrenewed_by", "redriven"),
    [
        (HOST_DEAD_S + 5, 5.0, True),  # killed: silent, and nobody renews its leases
        (HOST_SILENT_S + 1, 5.0, False),  # paused a moment: its slots are free, its items still its own
        (HOST_DEAD_S + 5, -5.0, False),  # cut off from Redis only: it still renews, so it still runs them
    ],
)
def test_a_dead_hosts_running_items_are_re_driven_before_their_lease(
    db: tuple[str, Engine], silent_s: float, unrenewed_by: float, redriven: bool
) -> None:
    url, engine = db
    _job(engine, 20)
    harness = Harness(url)
    host, alive = harness.host(), harness.host()
    lease_s = harness.ctx.settings.lease_s
    try:
        first = harness.tick()
        claims = []
        for item_id in first:
            with autocommit_scope(harness.ctx.engine) as c:
                claimed = try_claim(c, item_id, lease_s)
            assert claimed is not None
            claims.append(claimed)
        with contextlib.ExitStack() as holding:
            # The host beats with all but the last: that one it claimed after its last beat (no record).
            for claimed in claims[:-2]:
                holding.enter_context(host.hold(claimed.id, claimed.token))
            host.host_beat()
        with contextlib.ExitStack() as holding:  # a live host holds one, listed in its fresh beat
            holding.enter_context(alive.hold(claims[-2].id, claims[-2].token))
            alive.host_beat()
        unrenewed = harness.ctx.leases.beat_s + REDRIVE_GRACE_S + unrenewed_by
        _age(harness, host, silent_s, first, unrenewed)
        harness.dispatcher.hosts.dead_at = (
            0.0  # dead hosts are looked for every DEAD_REFRESH_S; tests do not wait
        )
        again = harness.tick()
        rows = _rows(engine, first)
        assert rows[claims[-2].id] == (
            "running",
            1,
        )  # a beating host's item stays its own, whatever its lease
        if not redriven:
            assert rows == {i: ("running", 1) for i in first}
            assert not set(again) & set(first)
            return
        gone = set(first) - {claims[-2].id}
        assert gone <= set(again)  # pending, and sent again at once — the unrecorded one too
        # The dead host's late settle loses: the new claim holds a new token.
        with autocommit_scope(harness.ctx.engine) as c:
            retaken = try_claim(c, first[0], lease_s)
        assert retaken is not None and retaken.token != claims[0].token
        with session_scope(harness.ctx.sessions) as s:
            assert not jobs.items.finish_item(s, claims[0], {"zombie": True})
        assert _rows(engine, [first[0]]) == {first[0]: ("running", 2)}
    finally:
        host.close()
        alive.close()
        harness.close()


# --- finalize does not wait on a chord ---------------------------------------------------------------------


def test_a_finished_job_is_finalized_without_its_chords(db: tuple[str, Engine]) -> None:
    """Every item settled, but a window's chord never joins (its first copy of an item died with a killed
    host, and the copy that settled it ran elsewhere): the leader asks for the finalize itself."""
    url, engine = db
    job_id = _job(engine, 6)
    harness = Harness(url)
    try:
        sent = harness.tick()
        assert harness.finalized == []  # work left: nothing to finalize
        with session_scope(harness.ctx.sessions) as s:
            s.execute(update(Item).where(Item.job_id == job_id).values(status="done", finished_at=utcnow()))
        harness.dispatcher.schedules.at = 0.0  # the finished jobs are looked for every SCHEDULE_REFRESH_S
        harness.tick()
        assert sent and harness.finalized == [job_id]
        with session_scope(harness.ctx.sessions) as s:
            # Ended (failed here: items marked done without outputs make no scorecard): finalized.
            status = s.scalar(select(Job.status).where(Job.id == job_id))
            assert status in {str(st) for st in JobStatus.ended()}
    finally:
        harness.close()


@pytest.mark.parametrize(("rtt_us", "freed"), [(600_000, True), (2_000, False)])
def test_a_slow_hosts_running_items_take_no_slot(db: tuple[str, Engine], rtt_us: int, freed: bool) -> None:
    """A host whose fitness figure is far above the leader's (a 256 kbit/s link) runs its items slowly:
    they take no slot, so the other hosts keep the scope busy; a host as quick as the leader counts."""
    url, engine = db
    _job(engine, 20)
    harness = Harness(url)
    host = harness.host()
    try:
        first = harness.tick()
        with contextlib.ExitStack() as holding:
            for item_id in first:
                with autocommit_scope(harness.ctx.engine) as c:
                    claimed = try_claim(c, item_id, 300)
                assert claimed is not None
                holding.enter_context(host.hold(claimed.id, claimed.token))
            host.host_beat()
            seconds, micros = harness.ctx.redis.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            harness.ctx.redis.hset(FITNESS_KEY, f"{host.name} other-token", f"{rtt_us}:{now_ms}")
            harness.dispatcher.fitness.beat_at = -1e9
            harness.dispatcher.beat_fitness()
            again = harness.tick()
            assert (len(again) == TARGET) is freed and not set(again) & set(first)
            assert _rows(engine, first) == {i: ("running", 1) for i in first}  # still the slow host's
    finally:
        host.close()
        harness.close()
