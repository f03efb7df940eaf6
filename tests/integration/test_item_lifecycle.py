"""Every item has a bounded life and exact accounting (jobs/items.py against real Postgres).

A try that may have cost money counts; a try given back before any POST does not; an item that has used
every try fails at its next claim with its last error; a heartbeat keeps a live item's lease; usage sums
every attempt of every try, and duplicates cost nothing; the one-statement settle of the worker's common
case stores exactly what the transactional one does.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from jobs.intake import UnitSpec, create_job, dedupe_key
from jobs.items import (
    Exhausted,
    claim_item,
    extend_leases,
    fail_item,
    fail_item_at_once,
    finish_item,
    finish_item_at_once,
    item_usage,
    release_item,
    settles_at_once,
    try_claim,
)
from jobs.records import CallRow, ClaimedItem
from jobs.scheduling import ready_items
from jobs.sweeper import expire_leases
from jobs.tenancy import get_or_create_tenant
from models import ApiCall, Item, utcnow


def _job(db: Session, texts: list[str], tenant: str = "life") -> list[int]:
    t = get_or_create_tenant(db, tenant)
    units = [
        UnitSpec(
            stage="claim", custom_id=f"c{i}", mode="grounded", input={"claim": x}, dedupe_key=dedupe_key(x)
        )
        for i, x in enumerate(texts)
    ]
    job, _ = create_job(db, tenant_id=t.id, kind="claims", options={}, units=units)
    return list(db.scalars(select(Item.id).where(Item.job_id == job.id).order_by(Item.position)))


def _call(
    attempt: int, status: int | None, request_id: str, *, searches: int = 1, tokens: int = 0
) -> CallRow:
    return CallRow(
        endpoint="decisions",
        attempt=attempt,
        status_code=status,
        request_id=request_id,
        latency_ms=200.0,
        wait_ms=50.0,
        input_tokens=tokens,
        searches=searches,
        cost_usd=0.001 * searches + tokens * 0.02 / 1_000_000,
    )


def _claim(db: Session, item_id: int, max_tries: int = 3) -> ClaimedItem:
    claimed = claim_item(db, item_id, lease_s=60, max_tries=max_tries)
    assert isinstance(claimed, ClaimedItem)
    return claimed


def test_an_item_fails_after_its_last_try_with_its_last_error(db: Session) -> None:
    (item_id,) = _job(db, ["a claim"])
    for n in range(3):
        held = _claim(db, item_id)
        assert release_item(db, held, f"503 number {n}", [_call(1, 503, f"r{n}")], retry_at=utcnow())
    # The fourth claim does not happen: the item fails, keeping what it cost.
    spent = claim_item(db, item_id, lease_s=60, max_tries=3)
    assert isinstance(spent, Exhausted) and spent.tries == 3
    item = db.get(Item, item_id)
    assert item is not None and item.status == "failed"
    assert item.error == "gave up after 3 tries; last error: 503 number 2"
    assert item.output is not None and item.output["usage"]["attempts"] == 3
    assert item.output["usage"]["searches"] == 3
    # Nothing more can happen to it.
    assert claim_item(db, item_id, lease_s=60, max_tries=3) is None


def test_a_try_that_sent_nothing_is_given_back(db: Session) -> None:
    (item_id,) = _job(db, ["b claim"])
    for _ in range(5):  # five infrastructure faults before any POST: none of them counts
        held = _claim(db, item_id, max_tries=2)
        assert release_item(db, held, "temporary infrastructure fault", [], retry_at=utcnow())
    item = db.get(Item, item_id)
    assert item is not None and item.status == "pending" and item.tries == 0 and item.attempts == 5
    held = _claim(db, item_id, max_tries=2)
    assert held.token == 6  # the lease token still moves on every claim
    assert finish_item(db, held, {"p": 0.9}, [_call(1, 200, "ok", tokens=100)])
    db.refresh(item)
    assert item.status == "done" and item.tries == 1


def test_expired_leases_count_as_tries(db: Session) -> None:
    """A worker that died mid-call may have been billed: its try counts, so re-drives are bounded."""
    (item_id,) = _job(db, ["c claim"])
    for _ in range(2):
        claim_item(db, item_id, lease_s=-1, max_tries=2)  # claimed, then its worker vanishes
        assert expire_leases(db) == 1
    assert isinstance(claim_item(db, item_id, lease_s=60, max_tries=2), Exhausted)
    item = db.get(Item, item_id)
    assert item is not None and item.status == "failed" and item.error is not None
    assert item.error.startswith("gave up after 2 tries; last error: lease expired")


def test_a_released_item_waits_for_its_time(db: Session) -> None:
    (item_id,) = _job(db, ["d claim"])
    job_id = db.get(Item, item_id).job_id  # type: ignore[union-attr]
    assert [r.id for r in ready_items(db, [job_id], "decisions", 10)[job_id]] == [item_id]
    held = _claim(db, item_id)
    release_item(db, held, "503", [_call(1, 503, "x")], retry_at=utcnow() + timedelta(minutes=5))
    assert ready_items(db, [job_id], "decisions", 10) == {}  # not due yet
    db.execute(update(Item).where(Item.id == item_id).values(not_before=utcnow() - timedelta(seconds=1)))
    assert [r.id for r in ready_items(db, [job_id], "decisions", 10)[job_id]] == [item_id]


def test_heartbeat_extends_only_leases_still_held(db: Session) -> None:
    first, second = _job(db, ["e claim", "f claim"])
    a = claim_item(db, first, lease_s=1)
    b = claim_item(db, second, lease_s=1)
    assert isinstance(a, ClaimedItem) and isinstance(b, ClaimedItem)
    # A stale token (the lease was taken over) is not extended.
    assert extend_leases(db, [(first, a.token), (second, b.token + 1)], lease_s=600) == 1
    lease_a = db.scalar(select(Item.lease_until).where(Item.id == first))
    lease_b = db.scalar(select(Item.lease_until).where(Item.id == second))
    assert lease_a is not None and lease_a > utcnow() + timedelta(seconds=500)
    assert lease_b is not None and lease_b < utcnow() + timedelta(seconds=5)
    assert extend_leases(db, [], lease_s=600) == 0


def test_usage_sums_every_try_and_duplicates_cost_nothing(db: Session) -> None:
    leader, dup = _job(db, ["same claim", "same claim"])
    held = _claim(db, leader)
    release_item(db, held, "503", [_call(1, 503, "t1a"), _call(2, 503, "t1b")], retry_at=utcnow())
    held = _claim(db, leader)
    assert fail_item(db, held, "400 bad", [_call(1, 400, "t2a", searches=0)])
    item = db.get(Item, leader)
    twin = db.get(Item, dup)
    assert item is not None and twin is not None
    usage = item.output["usage"]  # type: ignore[index]
    assert usage["attempts"] == 3 and usage["searches"] == 2
    assert usage["upstream_latency_s"] == 0.6 and usage["queue_wait_s"] == 0.15
    assert item_usage(db, leader).attempts == db.query(ApiCall).filter(ApiCall.item_id == leader).count() == 3
    # The repeat of the request settles with its leader but bills nothing.
    assert twin.status == "failed" and twin.output["usage"]["attempts"] == 0  # type: ignore[index]
    assert twin.output["duplicate_of_item"] == leader  # type: ignore[index]


def _calls_of(db: Session, item_id: int) -> list[tuple[object, ...]]:
    return [
        (
            c.attempt,
            c.status_code,
            c.request_id,
            c.latency_ms,
            c.wait_ms,
            c.input_tokens,
            c.searches,
            c.cost_usd,
        )
        for c in db.scalars(select(ApiCall).where(ApiCall.item_id == item_id).order_by(ApiCall.attempt))
    ]


def test_a_result_stored_at_once_equals_one_stored_in_a_transaction(db: Session) -> None:
    """The one-statement settle of the worker's common case keeps exactly what `finish_item` keeps."""
    first, second = _job(db, ["g claim", "h claim"])
    calls = [_call(1, 503, "a1"), _call(2, 200, "a2", tokens=120)]
    a, b = _claim(db, first), _claim(db, second)
    assert try_claim(db, first, lease_s=60) is None  # held: nobody else claims it
    assert settles_at_once("postgresql", b) and not settles_at_once("sqlite", b)
    assert finish_item(db, a, {"p": 0.7}, calls)
    assert finish_item_at_once(db, b, {"p": 0.7}, calls)
    one, other = db.get(Item, first), db.get(Item, second)
    assert one is not None and other is not None
    db.refresh(one)
    db.refresh(other)
    assert (other.status, other.output, other.error, other.lease_until) == ("done", one.output, None, None)
    assert other.finished_at is not None
    assert _calls_of(db, second) == _calls_of(db, first) and len(_calls_of(db, second)) == 2


def test_a_lost_lease_at_once_keeps_the_calls_and_not_the_result(db: Session) -> None:
    (item_id,) = _job(db, ["i claim"])
    stale = claim_item(db, item_id, lease_s=-1)
    assert isinstance(stale, ClaimedItem)
    assert expire_leases(db) == 1
    fresh = _claim(db, item_id)
    assert not finish_item_at_once(db, stale, {"p": 0.1}, [_call(1, 200, "late", tokens=5)])
    assert not fail_item_at_once(db, stale, "late failure", [])
    assert len(_calls_of(db, item_id)) == 1  # the stale worker's POST happened: it is recorded
    item = db.get(Item, item_id)
    assert item is not None and item.status == "running" and item.attempts == fresh.token
    assert not settles_at_once("postgresql", fresh)  # a second try's usage sums earlier rows: a transaction
    assert fail_item(db, fresh, "400 bad", [_call(1, 400, "now", searches=0)])
    db.refresh(item)
    assert item.status == "failed" and item.output["usage"]["attempts"] == 2  # type: ignore[index]


def test_a_failure_at_once_keeps_its_error_output_and_usage(db: Session) -> None:
    (item_id,) = _job(db, ["j claim"])
    held = try_claim(db.connection(), item_id, lease_s=60)  # a bare connection, as the worker uses
    assert held is not None and held.token == 1
    assert fail_item_at_once(
        db.connection(), held, "x" * 5_000, [_call(1, 400, "f1", searches=1)], {"kept": True}
    )
    item = db.get(Item, item_id)
    assert item is not None
    db.refresh(item)
    assert item.status == "failed" and item.error == "x" * 4_000
    assert item.output == {"kept": True, "usage": item.output["usage"]}  # type: ignore[index]
    assert item.output["usage"]["attempts"] == 1 and item.output["usage"]["searches"] == 1  # type: ignore[index]


def test_repeated_requests_settle_in_a_transaction(db: Session) -> None:
    leader, _dup = _job(db, ["k claim", "k claim"])
    held = _claim(db, leader)
    assert held.dedupe_key is not None and not settles_at_once("postgresql", held)
