"""A cancel costs the caller one UPDATE of the job row: it never waits for a `validating` job's item build,
and a large job's pending items are skipped afterwards in bounded batches (jobs/control.py:cancel_step), with
nothing new dispatched meanwhile. The real worker's `finish_cancel` and the sweeper's backstop are in
test_queue_validating.py."""

# Fixtures are imported from web_fixtures (conftest.py is not ours), so their names reappear as
# test parameters: that is how pytest injects them, not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from flask.testing import FlaskClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import jobs.bulk_load as bulk_load
from jobs import control
from jobs.bulk_load import Built, build_staged
from jobs.control import cancel_step, cancelling_with_pending
from jobs.finalize import maybe_finalize
from jobs.scheduling import live_jobs, mark_dispatched
from models import Item, Job, intake_rows, session_scope
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    ROWS,
    Caller,
    WebEnv,
    caller,
    make_env,
    memory_celery,
    ndjson,
    web,
    web_settings,
)
from workers.api import FINISH_CANCEL

pytestmark = pytest.mark.integration

MANY_ROWS: list[dict[str, Any]] = [{"id": f"r{n}", "claim": f"Claim number {n} is true."} for n in range(12)]


@pytest.fixture
def deferring(web_settings: dict[str, Any], memory_celery: Celery) -> Iterator[WebEnv]:
    """The app deferring the item build of any body of more than 2 rows (as a 1,000,000-row body is)."""
    env = make_env({**web_settings, "intake_defer_rows": 2}, memory_celery)
    yield env
    env.app.extensions["factgate"].engine.dispose()


def count(web: WebEnv, table: Any, job_id: uuid.UUID) -> int:
    with web.sessions() as s:
        return int(s.scalar(select(func.count()).select_from(table).where(table.c.job_id == job_id)) or 0)


def statuses(web: WebEnv, job_id: uuid.UUID) -> dict[str, int]:
    with web.sessions() as s:
        rows = s.execute(
            select(Item.status, func.count()).where(Item.job_id == job_id).group_by(Item.status)
        ).all()
    return {str(k): int(n) for k, n in rows}


def test_a_cancel_during_the_build_answers_at_once_and_the_build_rolls_back(
    deferring: WebEnv, caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel is sent while the build's transaction has inserted every item and not committed (so it
    holds the build lock and the key-share locks of the items' foreign key). It must answer without waiting
    for that transaction — it runs in a thread the build waits on, so a cancel that waited would never
    answer — and the build then rolls its items back: none is ever materialised."""
    job = deferring.client.post(
        "/v1/jobs?kind=claims&mode=both", data=ndjson(MANY_ROWS), headers=caller.ndjson_headers()
    ).get_json()
    assert job["status"] == "validating"
    jid = uuid.UUID(job["id"])
    answers: list[dict[str, Any]] = []
    built_items = bulk_load.build_items

    def cancel(client: FlaskClient) -> None:
        resp = client.post(f"/v1/jobs/{jid}/cancel", headers=caller.headers)
        answers.append({"code": resp.status_code, **resp.get_json()})

    def build_then_cancel(session: Session, target: Job) -> int:
        made = built_items(session, target)
        thread = threading.Thread(target=cancel, args=(deferring.app.test_client(),))
        thread.start()
        thread.join(60)  # a guard against a hang, not a timing figure
        assert not thread.is_alive(), "the cancel waited for the build's transaction"
        return made

    monkeypatch.setattr(bulk_load, "build_items", build_then_cancel)
    with session_scope(deferring.sessions) as s:
        assert build_staged(s, jid) is Built.CANCELLED
    [answer] = answers
    assert answer["code"] == 200 and answer["status"] == "cancelling"
    assert statuses(deferring, jid) == {} and count(deferring, intake_rows, jid) == len(MANY_ROWS)
    assert FINISH_CANCEL in {task for task, _ in deferring.drain_messages()}
    # finish_cancel's steps: the staged rows in batches, then nothing left; finalize ends it with none.
    handled = []
    with session_scope(deferring.sessions) as s:
        handled.append(cancel_step(s, jid, limit=5))
    while handled[-1]:
        with session_scope(deferring.sessions) as s:
            handled.append(cancel_step(s, jid, limit=5))
    assert handled == [5, 5, 2, 0] and count(deferring, intake_rows, jid) == 0
    with session_scope(deferring.sessions) as s:
        assert maybe_finalize(s, jid)
    ended = deferring.job(jid)
    assert ended.status == "cancelled" and (ended.request_counts or {})["total"] == 0


def test_a_build_holding_the_job_makes_the_cancel_batches_and_finalize_wait_for_it(
    deferring: WebEnv, caller: Caller
) -> None:
    """While a build holds the job (its advisory lock), neither the cancel's batches nor finalize touch the
    staged rows the build is reading: they leave it to the build, which rolls back and finishes the cancel."""
    job = deferring.client.post(
        "/v1/jobs?kind=claims", data=ndjson(MANY_ROWS), headers=caller.ndjson_headers()
    ).get_json()
    jid = uuid.UUID(job["id"])
    assert deferring.client.post(f"/v1/jobs/{jid}/cancel", headers=caller.headers).status_code == 200
    with session_scope(deferring.sessions) as holder:
        assert bulk_load.try_build_lock(holder, jid)
        with session_scope(deferring.sessions) as s:
            assert cancel_step(s, jid) is None
        with session_scope(deferring.sessions) as s:
            assert not maybe_finalize(s, jid)
    assert count(deferring, intake_rows, jid) == len(MANY_ROWS) and deferring.job(jid).status == "cancelling"


def test_a_large_cancel_dispatches_nothing_and_skips_in_batches(
    web: WebEnv, caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above SKIP_INLINE items the cancel leaves every item pending for the batches; the dispatcher sees no
    work of the job and cannot mark its items; the sweeper lists it until its batches are done."""
    monkeypatch.setattr(control, "SKIP_INLINE", 4)
    jid = uuid.UUID(web.submit(caller, MANY_ROWS[:5], mode="both")["id"])  # 10 items
    with session_scope(web.sessions) as s:
        ids = list(s.scalars(select(Item.id).where(Item.job_id == jid).order_by(Item.id)))
        assert jid in {j.id for j in live_jobs(s)}
    web.drain_messages()
    resp = web.client.post(f"/v1/jobs/{jid}/cancel", headers=caller.headers)
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["status"] == "cancelling" and body["request_counts"]["pending"] == 10
    assert [task for task, args in web.drain_messages() if args == [str(jid)]] == [FINISH_CANCEL]
    with session_scope(web.sessions) as s:
        assert jid not in {j.id for j in live_jobs(s)}
        assert mark_dispatched(s, ids[:3], "nokey:decisions") == set()
        assert jid in cancelling_with_pending(s)
    handled = []
    while not handled or handled[-1]:
        with session_scope(web.sessions) as s:
            handled.append(cancel_step(s, jid, limit=4))
    assert handled == [4, 4, 2, 0]
    assert statuses(web, jid) == {"skipped": 10}
    with session_scope(web.sessions) as s:
        assert jid not in cancelling_with_pending(s)
        assert maybe_finalize(s, jid)
    ended = web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).get_json()
    assert ended["status"] == "cancelled" and ended["request_counts"]["skipped"] == 10


def test_a_small_cancel_skips_at_once_and_a_step_after_the_end_does_nothing(
    web: WebEnv, caller: Caller
) -> None:
    jid = uuid.UUID(web.submit(caller, ROWS, mode="both")["id"])
    assert (
        web.client.post(f"/v1/jobs/{jid}/cancel", headers=caller.headers).get_json()["request_counts"][
            "skipped"
        ]
        == 6
    )
    with session_scope(web.sessions) as s:
        assert maybe_finalize(s, jid)
        assert cancel_step(s, jid) == 0  # a late finish_cancel of an ended job changes nothing
    assert web.job(jid).status == "cancelled"


def test_a_cancel_committed_while_finalize_holds_an_older_copy_of_the_job_still_ends_it_cancelled(
    web: WebEnv, caller: Caller
) -> None:
    """The embedded `factgate check` finalizes in its worker while `factgate cancel` runs in another process:
    the finalizing session read the job (in progress) before the cancel committed, and found every item
    ended after it (the cancel skipped them). The job is cancelled, however stale that session's copy."""
    jid = uuid.UUID(web.submit(caller, ROWS, mode="both")["id"])
    with session_scope(web.sessions) as s:
        held = s.get(Job, jid)
        assert held is not None and held.status != "cancelling"  # the copy the finalizing session holds
        with session_scope(web.sessions) as other:  # the cancel, committed on another connection
            other_job = other.get(Job, jid)
            assert other_job is not None and control.cancel_job(other, other_job)
        assert held.status != "cancelling"  # still the older copy
        assert maybe_finalize(s, jid)
    ended = web.client.get(f"/v1/jobs/{jid}", headers=caller.headers).get_json()
    assert ended["status"] == "cancelled" and ended["request_counts"]["skipped"] == 6
