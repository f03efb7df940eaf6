"""How the dispatcher sends (workers/dispatcher.py), against real Postgres and Redis and no worker: one
producer batch per tick, one window per job and FACTGATE_CHORD_SIZE items whose item tasks store no result
and carry nothing of their window (the leader closes it once its items have left flight, and sends its
body then), and a failed send leaves every item of the tick dispatchable again."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis as redis_lib
from kombu.transport.redis import PublishBatch
from sqlalchemy import Engine, select, update

from config import Settings
from jobs.intake import UnitSpec, create_job
from jobs.tenancy import get_or_create_tenant
from models import Item, make_session_factory, session_scope, utcnow
from tests.integration.stack import fresh_database
from tests.services import redis_db_url
from workers.app import make_celery
from workers.context import build_context
from workers.dispatcher import Dispatcher

pytestmark = pytest.mark.integration

# A flushed database of this xdist worker's own (the one the metrics test and shared stacks use, in other
# modules). A fixed number here was another worker's database: this test flushed it mid-test, and failed
# when that worker wrote to it.
REDIS_URL = redis_db_url(12)


@pytest.fixture
def setup() -> Iterator[tuple[Engine, Dispatcher, redis_lib.Redis]]:
    rds = redis_lib.Redis.from_url(REDIS_URL)
    rds.flushdb()
    with fresh_database() as (url, engine):
        settings = Settings.from_env(
            {
                "DATABASE_URL": url,
                "REDIS_URL": REDIS_URL,
                "PERPLEXITY_API_KEY": "dispatch-test-key",
                "FACTGATE_DECISIONS_RPS": "0",
                "FACTGATE_CHORD_SIZE": "4",
            }
        )
        app = make_celery(settings, with_tasks=False)
        ctx = build_context(settings)
        try:
            yield engine, Dispatcher(ctx, app), rds
        finally:
            ctx.close()
            app.close()
            rds.flushdb()
            rds.close()


def _job(engine: Engine, n: int) -> list[int]:
    with session_scope(make_session_factory(engine)) as s:
        tenant = get_or_create_tenant(s, "dispatch")
        units = [
            UnitSpec(stage="claim", custom_id=f"c{i}", mode="ungrounded", input={"claim": f"x{i}"})
            for i in range(n)
        ]
        job, _ = create_job(s, tenant_id=tenant.id, kind="claims", options={}, units=units)
        return list(s.scalars(select(Item.id).where(Item.job_id == job.id).order_by(Item.id)))


def _dispatched(engine: Engine, ids: list[int]) -> list[bool]:
    with session_scope(make_session_factory(engine)) as s:
        marks = {i: at for i, at in s.execute(select(Item.id, Item.enqueued_at).where(Item.id.in_(ids)))}
    return [marks[i] is not None for i in ids]


def test_a_tick_sends_its_windows_in_one_batch_and_stores_no_item_result(
    setup: tuple[Engine, Dispatcher, redis_lib.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, dispatcher, rds = setup
    ids = _job(engine, 10)
    flushes: list[int] = []
    real_flush = PublishBatch.flush

    def flush(batch: PublishBatch) -> Any:
        flushes.append(rds.llen("celery"))  # what was in the queue before this flush
        return real_flush(batch)

    monkeypatch.setattr(PublishBatch, "flush", flush)
    assert dispatcher.lead() and dispatcher.tick()
    assert flushes == [0]  # every message of the tick went out in one pipeline
    assert _dispatched(engine, ids) == [True] * 10
    messages = [json.loads(raw) for raw in rds.lrange("celery", 0, -1)]
    assert len(messages) == 10
    for message in messages:
        headers = message["headers"]
        assert headers["task"] == "factgate.run_item" and headers["ignore_result"] is True
        assert headers["group"] is None  # no Celery chord: no per-item chord script on the way out
        (item_id,), kwargs, embed = json.loads(base64.b64decode(message["body"]))
        assert embed["chord"] is None  # the body does not ride in every message's headers
        assert kwargs == {"epoch": dispatcher.term} and headers["argsrepr"] == f"({item_id},)"
    (windows,) = dispatcher.windows.open.values()  # one scope's windows, kept by the leader
    assert sorted(len(w.items) for w in windows) == [2, 4, 4]  # windows of FACTGATE_CHORD_SIZE
    assert {i for w in windows for i in w.items} == set(ids) and len({w.job_id for w in windows}) == 1
    assert len({m["headers"]["id"] for m in messages}) == 10  # every message its own task id
    dispatcher.stop()


def test_a_failed_send_leaves_the_ticks_items_dispatchable(
    setup: tuple[Engine, Dispatcher, redis_lib.Redis],
) -> None:
    engine, dispatcher, rds = setup
    ids = _job(engine, 10)
    sent: list[int] = []
    real_send = dispatcher.send

    def send(job_id: Any, window: Any, producer: Any) -> None:
        if sent:
            raise ConnectionError("broker went away")
        sent.append(len(window))
        real_send(job_id, window, producer)

    dispatcher.send = send
    assert dispatcher.lead() and dispatcher.tick()
    assert sent == [4]
    assert rds.llen("celery") == 0  # the batch was dropped: not even the first window went out
    assert _dispatched(engine, ids) == [False] * 10  # all of them are sent again at the next tick
    dispatcher.send = real_send
    dispatcher.tick()
    assert rds.llen("celery") == 10 and _dispatched(engine, ids) == [True] * 10
    dispatcher.stop()


def _settle(engine: Engine, ids: list[int], status: str = "done") -> None:
    with session_scope(make_session_factory(engine)) as s:
        s.execute(update(Item).where(Item.id.in_(ids)).values(status=status, finished_at=utcnow()))


def _bodies(rds: redis_lib.Redis) -> list[list[Any]]:
    """The `after_window` messages in the queue: their (job, questions) arguments."""
    out = []
    for raw in rds.lrange("celery", 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == "factgate.after_window":
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            out.append(args)
    return out


def test_a_window_closes_once_its_items_have_left_flight_and_its_body_goes_out_once(
    setup: tuple[Engine, Dispatcher, redis_lib.Redis],
) -> None:
    engine, dispatcher, rds = setup
    _job(engine, 6)  # windows of 4 and 2
    assert dispatcher.lead() and dispatcher.tick()
    dispatcher.schedules.at = math.inf  # no finalize of the finished job meanwhile: only window bodies
    (job_id,) = {w.job_id for ws in dispatcher.windows.open.values() for w in ws}
    first, second = sorted(next(iter(dispatcher.windows.open.values())), key=lambda w: -len(w.items))
    _settle(engine, sorted(first.items)[:3])  # one item of the first window still in flight
    _settle(engine, sorted(second.items), status="failed")  # a failed item has left flight too
    dispatcher.tick()
    assert _bodies(rds) == [[str(job_id), []]]  # the second window closed: its body, once
    assert [len(w.items) for ws in dispatcher.windows.open.values() for w in ws] == [4]
    _settle(engine, sorted(first.items)[3:])
    dispatcher.tick()
    dispatcher.tick()
    assert _bodies(rds) == [[str(job_id), []], [str(job_id), []]]  # the first one's, once
    assert dispatcher.windows.open == {}
    dispatcher.stop()


def test_windows_closed_in_one_tick_send_one_body_per_job_with_their_questions(
    setup: tuple[Engine, Dispatcher, redis_lib.Redis],
) -> None:
    engine, dispatcher, rds = setup
    ids = _job(engine, 8)
    assert dispatcher.lead() and dispatcher.tick()
    dispatcher.schedules.at = math.inf
    (job_id,) = {w.job_id for ws in dispatcher.windows.open.values() for w in ws}
    # As a staged kind's children would be: each window names the questions its items belong to.
    (scope,) = dispatcher.windows.open
    dispatcher.windows.open[scope] = [
        replace(w, questions=(n + 7,)) for n, w in enumerate(dispatcher.windows.open[scope])
    ]
    _settle(engine, ids)
    dispatcher.tick()
    assert _bodies(rds) == [[str(job_id), [7, 8]]]
    dispatcher.stop()
