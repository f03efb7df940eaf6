"""Entries of a stage that calls nothing upstream (the citations answer, which only splits) go several to a
`factgate.run_items` task, and that task must do for each what `factgate.run_item` does.

Why: a re-run whose rows the verdict store answers cost a message, a claim transaction, a settle transaction
and a finalize per row; `run_items` carries up to 16 (`PublishingConfig.batch_sending_nothing`), stores their
outcomes in one transaction and moves their questions on together (jobs/stages.py:`advance_questions`). What
may not change is the result: every entry claimed and settled once (a duplicate delivery is a no-op), the
same children, pack heads and reports as entries run one by one, and a job never finished while its
children wait.

- The leader's side (workers/publishing.py:`Publisher.send_chord`) against real Postgres and Redis and no
  worker, as tests/integration/test_dispatch_send.py reads the messages back from the Redis queue.
- The worker's side (workers/run.py:`run_items_now`) through Celery's `apply`, in this process, with the
  worker context a worker has and the upstream simulated in process, as
  tests/integration/test_after_window.py runs its tasks: nothing but the tasks run here moves anything on.
  A re-run of the same rows by the same tenant, the case the batching is for, ends with the `run_items`
  task alone: every sentence is answered from the verdict store as it is created.
- `advance_questions` of several questions against `advance_question` one by one, on two identical jobs.
"""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
from celery import Celery
from sqlalchemy import Engine, select

from checks.citation_rows import validate_citation_rows
from checks.kinds.citations import parse_options
from config import Settings
from jobs.citations import citation_units
from jobs.intake import UnitSpec, create_job
from jobs.items import claim_item, fail_item, finish_item
from jobs.records import ClaimedItem
from jobs.stages import Step, advance_question, advance_questions
from jobs.tenancy import get_or_create_tenant
from models import Item, make_session_factory, session_scope
from tests.integration.stack import fresh_database
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    web,
    web_settings,
)
from tests.services import redis_db_url
from workers.app import make_celery
from workers.context import build_context, get_context, reset_contexts
from workers.dispatcher import Dispatcher
from workers.outcomes import Done, Failed
from workers.publishing import PublishingConfig
from workers.run import execute

pytestmark = pytest.mark.integration

# This xdist worker's own flushed database (as test_dispatch_send.py uses; both flush it before and after).
REDIS_URL = redis_db_url(12)
BATCH = PublishingConfig().batch_sending_nothing

SOURCES: list[dict[str, Any]] = [
    {"id": "1", "text": "The river is long. The river is wide. The river is old."}
]
GOOD_TWO: dict[str, Any] = {
    "id": "two",
    "answer": "The river is long [1]. The river is wide [1].",
    "sources": SOURCES,
}
# Markers alone in a first paragraph belong to no sentence: the answer handler refuses to split it.
UNSPLITTABLE: dict[str, Any] = {"id": "markers", "answer": "[1]\n\nThe river is long.", "sources": SOURCES}
GOOD_THREE: dict[str, Any] = {
    "id": "three",
    "answer": "The river is old [1]. The river is wide [1]. It is blue [1].",
    "sources": SOURCES,
}
ANSWERS: list[dict[str, Any]] = [GOOD_TWO, UNSPLITTABLE, GOOD_THREE]
SENTENCES = {"two": 2, "markers": 0, "three": 3}

# What differs between two runs of the same rows: upstream request ids, clocks, measured latencies, row ids.
VARYING = frozenset(
    {"id", "item_id", "head", "request_id", "request_ids", "built_at", "started_at", "queue_wait_s",
     "upstream_latency_s", "latency_s", "answered_at"}
)  # fmt: skip


def _stable(value: Any) -> Any:
    """`value` without the fields that differ between two runs of the same rows."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


# --- the leader: what goes on the queue -----------------------------------------------------------------


@pytest.fixture
def dispatch_setup() -> Iterator[tuple[Engine, Dispatcher, redis_lib.Redis]]:
    rds = redis_lib.Redis.from_url(REDIS_URL)
    rds.flushdb()
    with fresh_database() as (url, engine):
        settings = Settings.from_env(
            {
                "DATABASE_URL": url,
                "REDIS_URL": REDIS_URL,
                "PERPLEXITY_API_KEY": "run-items-test-key",
                "FACTGATE_DECISIONS_RPS": "0",
                "FACTGATE_CHORD_SIZE": "50",  # a window may hold more entries than one run_items carries
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


def _citations_job(engine: Engine, answers: Sequence[dict[str, Any]]) -> list[int]:
    """A citations job created as the in-memory intake makes it; its entry item ids."""
    options = parse_options({})
    units, warnings = citation_units(validate_citation_rows(list(answers)), options)
    with session_scope(make_session_factory(engine)) as s:
        tenant = get_or_create_tenant(s, "run-items")
        job, _ = create_job(
            s,
            tenant_id=tenant.id,
            kind="citations",
            options=options.as_dict(),
            units=units,
            warnings=warnings,
        )
        return list(s.scalars(select(Item.id).where(Item.job_id == job.id).order_by(Item.id)))


def _claims_job(engine: Engine, n: int) -> list[int]:
    with session_scope(make_session_factory(engine)) as s:
        tenant = get_or_create_tenant(s, "run-items-claims")
        units = [
            UnitSpec(stage="claim", custom_id=f"c{i}", mode="ungrounded", input={"claim": f"x{i}"})
            for i in range(n)
        ]
        job, _ = create_job(s, tenant_id=tenant.id, kind="claims", options={}, units=units)
        return list(s.scalars(select(Item.id).where(Item.job_id == job.id).order_by(Item.id)))


def _queued(rds: redis_lib.Redis) -> list[tuple[dict[str, Any], list[Any], dict[str, Any]]]:
    """Every message in the queue: (headers, args, kwargs)."""
    out = []
    for raw in rds.lrange("celery", 0, -1):
        message = json.loads(raw)
        args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        out.append((message["headers"], args, kwargs))
    return out


def _dispatched(engine: Engine, ids: list[int]) -> set[int]:
    with session_scope(make_session_factory(engine)) as s:
        return set(s.scalars(select(Item.id).where(Item.id.in_(ids), Item.enqueued_at.is_not(None))))


def test_citation_entries_go_sixteen_to_a_run_items_message_and_claims_one_to_a_run_item(
    dispatch_setup: tuple[Engine, Dispatcher, redis_lib.Redis],
) -> None:
    engine, dispatcher, rds = dispatch_setup
    answers = [{**GOOD_TWO, "id": f"a{n}"} for n in range(20)]
    entries = _citations_job(engine, answers)
    claims = _claims_job(engine, 5)
    assert dispatcher.lead()
    for _ in range(5):  # as many ticks as the in-flight bound needs (one, at this size)
        dispatcher.tick()
        if _dispatched(engine, entries + claims) == set(entries + claims):
            break
    assert _dispatched(engine, entries + claims) == set(entries + claims)
    messages = _queued(rds)
    by_task: dict[str, list[tuple[dict[str, Any], list[Any], dict[str, Any]]]] = {}
    for message in messages:
        by_task.setdefault(message[0]["task"], []).append(message)
    assert set(by_task) == {"factgate.run_items", "factgate.run_item"}

    batches = by_task["factgate.run_items"]
    carried = [item_id for _h, (ids,), _k in batches for item_id in ids]
    assert sorted(carried) == sorted(entries)  # every entry once, in a run_items message only
    for headers, args, kwargs in batches:
        (ids,) = args
        assert isinstance(ids, list) and 1 <= len(ids) <= BATCH
        assert kwargs == {"epoch": dispatcher.term}
        assert headers["ignore_result"] is True and headers["argsrepr"] == f"({ids!r},)"
    # The leader's windows of the citations job, each cut into messages of at most BATCH entries.
    windows = [w for ws in dispatcher.windows.open.values() for w in ws if w.items <= set(entries)]
    assert sum(len(w.items) for w in windows) == len(entries)
    assert len(batches) == sum(math.ceil(len(w.items) / BATCH) for w in windows)
    assert max(len(args[0]) for _h, args, _k in batches) == BATCH  # a window of 20 fills one message

    singles = by_task["factgate.run_item"]
    assert sorted(args[0] for _h, args, _k in singles) == claims  # a claim goes on its own, as before
    assert all(kwargs == {"epoch": dispatcher.term} for _h, _a, kwargs in singles)
    assert len({h["id"] for h, _a, _k in messages}) == len(messages)  # every message its own task id
    dispatcher.stop()


# --- the worker: what run_items does --------------------------------------------------------------------


@pytest.fixture
def worker_app(pg_url: str, tmp_path: Path) -> Iterator[Celery]:
    """A worker's Celery app (tasks registered) on the test database, upstream simulated in-process."""
    settings = Settings().with_overrides(
        {"database_url": pg_url, "redis_url": None, "perplexity_api_key": None, "instance_path": tmp_path}
    )
    app = make_celery(settings)
    yield app
    reset_contexts()


def _run(app: Celery, task: str, *args: object) -> None:
    app.set_current()
    result = app.tasks[task].apply(args=args)
    assert result.successful(), result.traceback


def _submit(web: WebEnv, who: Caller, answers: Sequence[dict[str, Any]] = ANSWERS) -> uuid.UUID:
    body = "\n".join(json.dumps(a) for a in answers)
    resp = web.client.post(
        "/v1/jobs?kind=citations&audit_share=0",  # its sentences alone (no audit items)
        data=body,
        headers={**who.headers, "Content-Type": "application/x-ndjson"},
    )
    assert resp.status_code == 202, resp.get_data(as_text=True)
    return uuid.UUID(resp.get_json()["id"])


def _items(web: WebEnv, job_id: uuid.UUID) -> list[Item]:
    with session_scope(web.sessions) as session:
        return list(session.scalars(select(Item).where(Item.job_id == job_id).order_by(Item.id)))


def _entries(web: WebEnv, job_id: uuid.UUID) -> dict[str, Item]:
    return {i.custom_id: i for i in _items(web, job_id) if i.parent_id is None}


def _children(web: WebEnv, job_id: uuid.UUID, parent: int) -> list[Item]:
    return [i for i in _items(web, job_id) if i.parent_id == parent]


def _status(web: WebEnv, job_id: uuid.UUID) -> str:
    return web.job(job_id).status


def _run_children_and_windows(web: WebEnv, app: Celery, job_id: uuid.UUID) -> None:
    """Run every pending pack head (its claim takes its members), then the window body that moves the
    questions on; again while that made new children."""
    for _ in range(5):
        pending = [i for i in _items(web, job_id) if i.parent_id is not None and i.status == "pending"]
        if not pending:
            break
        for child in pending:
            if child.pack_of is None:
                _run(app, "factgate.run_item", child.id)
        _run(app, "factgate.after_window", str(job_id), sorted({c.parent_id for c in pending if c.parent_id}))


def _pack_shape(children: Sequence[Item]) -> list[int | None]:
    """Each child's pack head as its index among the children (None: it heads or runs alone)."""
    index = {c.id: n for n, c in enumerate(children)}
    return [None if c.pack_of is None else index[c.pack_of] for c in children]


def test_run_items_settles_each_entry_once_makes_its_children_and_ends_as_entries_run_one_by_one(
    web: WebEnv, caller: Caller, worker_app: Celery
) -> None:
    job_id = _submit(web, caller)
    # The same rows from another tenant (no verdict of the first is reused), run the old way.
    alone_id = _submit(web, web.new_caller())
    _run(worker_app, "factgate.start_job", str(job_id))
    _run(worker_app, "factgate.start_job", str(alone_id))
    entries = _entries(web, job_id)
    ids = [entries[a["id"]].id for a in ANSWERS]
    _run(worker_app, "factgate.run_items", [*ids, ids[0]])  # the first one delivered twice

    entries = _entries(web, job_id)
    for answer in ANSWERS:
        entry = entries[answer["id"]]
        assert (entry.attempts, entry.tries) == (1, 1), answer["id"]  # claimed once, the repeat a no-op
        assert entry.lease_until is None and entry.finished_at is not None
    bad = entries["markers"]
    assert bad.status == "failed" and bad.error is not None and "could not be split" in bad.error
    assert bad.output is not None and bad.output["report"]["status"] == "failed"
    assert "could not be split into sentences" in bad.output["report"]["error"]
    assert _children(web, job_id, bad.id) == []
    for name in ("two", "three"):
        entry = entries[name]
        assert entry.status == "done" and entry.output is not None
        assert entry.output["sentences"] == SENTENCES[name] and "report" not in entry.output
        children = _children(web, job_id, entry.id)
        assert [c.stage for c in children] == ["cited_sentence"] * SENTENCES[name]
        assert all(c.status == "pending" and c.attempts == 0 and c.enqueued_at is None for c in children)
        assert _pack_shape(children) == [None] + [0] * (SENTENCES[name] - 1)  # one pack, its head first
    assert _status(web, job_id) != "completed"  # the failed answer's report alone does not end the job

    for entry_id in [e.id for e in _entries(web, alone_id).values()]:
        _run(worker_app, "factgate.run_item", entry_id)
    alone = _entries(web, alone_id)
    for name in ("two", "three"):
        assert _pack_shape(_children(web, job_id, entries[name].id)) == _pack_shape(
            _children(web, alone_id, alone[name].id)
        )
    assert [(e.status, e.attempts, e.tries, e.error) for e in alone.values()] == [
        (e.status, e.attempts, e.tries, e.error) for e in entries.values()
    ]

    _run_children_and_windows(web, worker_app, job_id)
    _run_children_and_windows(web, worker_app, alone_id)
    assert _status(web, job_id) == "completed" and _status(web, alone_id) == "completed"
    together, one_by_one = _entries(web, job_id), _entries(web, alone_id)
    for answer in ANSWERS:
        mine, theirs = together[answer["id"]].output, one_by_one[answer["id"]].output
        assert mine is not None and theirs is not None
        assert _stable(mine["report"]) == _stable(theirs["report"]), answer["id"]
        assert mine["children"] == theirs["children"]
    assert len(together["two"].output["report"]["sentences"]) == 2  # type: ignore[index]
    for job in (job_id, alone_id):
        assert all(i.status == "done" for i in _items(web, job) if i.parent_id is not None)


def test_run_items_of_two_jobs_whose_answers_all_fail_finalizes_both(
    web: WebEnv, caller: Caller, worker_app: Celery
) -> None:
    first = _submit(web, caller, [UNSPLITTABLE, {**UNSPLITTABLE, "id": "again"}])
    second = _submit(web, web.new_caller(), [UNSPLITTABLE])
    for job_id in (first, second):
        _run(worker_app, "factgate.start_job", str(job_id))
    ids = [i.id for job_id in (first, second) for i in _items(web, job_id)]
    _run(worker_app, "factgate.run_items", ids)
    for job_id in (first, second):
        assert _status(web, job_id) == "completed"  # every report built: each job finalized by the task
        assert all(i.status == "failed" and i.output and i.output.get("report") for i in _items(web, job_id))


def _verdicts(report: dict[str, Any]) -> list[tuple[object, ...]]:
    """What a report says of each sentence, whether its verdict was asked for or reused."""
    return [
        (s["number"], s["claim"], s["status"], s["label"], s["checkable"], _stable(s["passages"]))
        for s in report["sentences"]
    ]


def test_a_rerun_through_run_items_is_answered_from_the_verdict_store_and_ends_the_job(
    web: WebEnv, caller: Caller, worker_app: Celery
) -> None:
    first = _submit(web, caller)
    _run(worker_app, "factgate.start_job", str(first))
    for entry in _entries(web, first).values():
        _run(worker_app, "factgate.run_item", entry.id)
    _run_children_and_windows(web, worker_app, first)
    assert _status(web, first) == "completed"

    again = _submit(web, caller)  # the same rows, the same tenant: every sentence's verdict is stored
    _run(worker_app, "factgate.start_job", str(again))
    _run(worker_app, "factgate.run_items", [e.id for e in _entries(web, again).values()])
    assert _status(web, again) == "completed"  # no sentence was sent, no window body was needed
    children = [i for i in _items(web, again) if i.parent_id is not None]
    assert len(children) == sum(SENTENCES.values())
    assert all(c.status == "done" and c.attempts == 1 and c.enqueued_at is None for c in children)
    before, after = _entries(web, first), _entries(web, again)
    for answer in ANSWERS:
        old, new = before[answer["id"]].output, after[answer["id"]].output
        assert old is not None and new is not None
        assert new["report"]["status"] == old["report"]["status"]
        assert _verdicts(new["report"]) == _verdicts(old["report"]), answer["id"]
        assert new["children"] == old["children"]


# --- advance_questions against advance_question ---------------------------------------------------------


def _settle_entries(app: Celery, web: WebEnv, job_id: uuid.UUID, names: Sequence[str]) -> None:
    """Run the named entries' handler and store the outcome as a worker does, without moving the
    question on (that is what the test does next)."""
    ctx = get_context(app)
    entries = _entries(web, job_id)
    for name in names:
        with session_scope(web.sessions) as session:
            claim = claim_item(session, entries[name].id, lease_s=300)
        assert isinstance(claim, ClaimedItem)
        outcome = execute(ctx, claim)
        with session_scope(web.sessions) as session:
            if isinstance(outcome, Done):
                assert finish_item(session, claim, outcome.output, outcome.calls)
            else:
                assert isinstance(outcome, Failed)
                assert fail_item(session, claim, outcome.error, outcome.calls, outcome.output)


def _shape(step: Step, job_id: uuid.UUID, names: dict[int, str]) -> tuple[object, ...]:
    """A Step in terms both jobs share: its job as a flag, its question by name, how many it spawned."""
    return (
        None if step.job_id is None else step.job_id == job_id,
        names[step.question_id],
        len(step.spawned),
        step.reported,
    )


def _names(web: WebEnv, job_id: uuid.UUID) -> dict[int, str]:
    """Every item of the job by a name both jobs share: an entry's custom id, a child's custom id."""
    return {i.id: i.custom_id for i in _items(web, job_id)}


def _state(web: WebEnv, job_id: uuid.UUID) -> list[tuple[object, ...]]:
    """What the job's rows hold, as both jobs would have it."""
    names = _names(web, job_id)
    return [
        (
            i.custom_id,
            None if i.parent_id is None else names[i.parent_id],
            i.stage,
            i.status,
            i.attempts,
            None if i.pack_of is None else names[i.pack_of],
            _stable(i.output),
        )
        for i in _items(web, job_id)
    ]


def test_advance_questions_together_does_what_advance_question_does_one_by_one(
    web: WebEnv, caller: Caller, worker_app: Celery
) -> None:
    answers = [*ANSWERS, {**GOOD_TWO, "id": "waiting"}]  # one entry is never run: not terminal
    together = _submit(web, caller, answers)
    one_by_one = _submit(web, web.new_caller(), answers)
    for job_id in (together, one_by_one):
        _run(worker_app, "factgate.start_job", str(job_id))
        _settle_entries(worker_app, web, job_id, ["two", "markers", "three"])

    def advance(job_id: uuid.UUID, order: Sequence[str], *, batched: bool) -> list[tuple[object, ...]]:
        by_name = {name: item_id for item_id, name in _names(web, job_id).items()}
        ids = [by_name[name] for name in order]
        with session_scope(web.sessions) as session:
            if batched:
                steps = advance_questions(session, ids)
            else:
                steps = [advance_question(session, item_id) for item_id in ids]
        names = _names(web, job_id)
        return [_shape(step, job_id, names) for step in steps]

    first = ["three", "waiting", "markers", "two"]
    steps = advance(together, first, batched=True)
    assert steps == advance(one_by_one, first, batched=False)
    assert steps == [
        (True, "three", 3, False),  # its sentences made
        (True, "waiting", 0, False),  # not settled: nothing to do
        (True, "markers", 0, True),  # refused: reported at once
        (True, "two", 2, False),
    ]
    assert _state(web, together) == _state(web, one_by_one)

    for job_id in (together, one_by_one):  # every sentence scored, as the dispatcher would have them run
        for item in _items(web, job_id):
            if item.parent_id is not None and item.pack_of is None:
                _run(worker_app, "factgate.run_item", item.id)
    child = "three:s1"
    assert child in _names(web, together).values(), _names(web, together)
    second = [child, "two", "waiting", "markers", "three"]
    steps = advance(together, second, batched=True)
    assert steps == advance(one_by_one, second, batched=False)
    assert steps == [
        (None, child, 0, False),  # a child is not a question
        (True, "two", 0, True),  # every sentence settled: its report
        (True, "waiting", 0, False),
        (True, "markers", 0, False),  # reported already, and current
        (True, "three", 0, True),
    ]
    assert _state(web, together) == _state(web, one_by_one)
    reports = [
        e.output["report"] for e in _entries(web, together).values() if e.output and "report" in e.output
    ]
    assert sorted(len(r["sentences"]) for r in reports) == [0, 2, 3]
