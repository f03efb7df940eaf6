"""Packs against real Postgres (jobs/packs.py, jobs/intake.py, jobs/claims.py): only a pack's head is
ready; claiming it takes its members; one try is billed once on the head and every item gets its share;
members whose answers were missing leave the pack and are sent alone; a failed try gives the pack back
whole; members a head left behind are freed by the sweep; a request id resolves to every item it answered.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from checks.claims import ClaimRow
from checks.options import parse_claims_options
from jobs.claims import claim_units
from jobs.intake import create_job
from jobs.items import try_claim
from jobs.packs import MemberResult, claim_members, free_orphaned_members, settle_pack
from jobs.queries import lookup_request
from jobs.records import CallRow, ClaimedItem
from jobs.scheduling import ready_items
from jobs.tenancy import get_or_create_tenant
from models import ApiCall, Item, Job, utcnow


def _packed_job(db: Session, n: int, pack_size: int, tenant: str = "packs") -> Job:
    t = get_or_create_tenant(db, tenant)
    options = parse_claims_options({"mode": "ungrounded", "pack_size": pack_size})
    rows = [ClaimRow(id=f"c{i}", claim=f"Claim number {i} is true.") for i in range(n)]
    rows.append(ClaimRow(id="repeat", claim="Claim number 0 is true."))  # a repeat is never in a pack
    units, _ = claim_units(rows, options)
    job, _ = create_job(db, tenant_id=t.id, kind="claims", options=options.as_dict(), units=units)
    db.flush()
    return job


def _items(db: Session, job: Job) -> list[Item]:
    return list(db.scalars(select(Item).where(Item.job_id == job.id).order_by(Item.position)))


def _call(request_id: str, tokens: int = 1000) -> CallRow:
    return CallRow(
        endpoint="decisions",
        attempt=1,
        status_code=200,
        request_id=request_id,
        latency_ms=900.0,
        input_tokens=tokens,
        output_tokens=5,
        cost_usd=0.02,
    )


def test_only_heads_are_ready_and_a_head_claims_its_members(db: Session) -> None:
    job = _packed_job(db, 7, 3)
    items = _items(db, job)
    heads = [i for i in items if i.pack_of is None and i.duplicate_of is None]
    assert [i.custom_id for i in heads] == ["c0", "c3", "c6"]
    assert [i.pack_of for i in items[:3]] == [None, items[0].id, items[0].id]
    repeat = items[-1]
    assert repeat.duplicate_of == items[0].id and repeat.pack_of is None
    db.execute(update(Job).where(Job.id == job.id).values(status="in_progress"))
    ready = {r.id for r in ready_items(db, [job.id], "decisions", 50).get(job.id, [])}
    assert ready == {h.id for h in heads}

    head = try_claim(db, items[0].id, 60.0)
    assert head is not None
    members = claim_members(db, head, 60.0, 4)
    assert [m.custom_id for m in members] == ["c1", "c2"]
    assert all(m.token == 1 and m.options == head.options for m in members)
    assert db.scalar(select(func.count()).where(Item.job_id == job.id, Item.status == "running")) == 3


def _claimed(db: Session, job: Job) -> tuple[ClaimedItem, list[ClaimedItem]]:
    db.execute(update(Job).where(Job.id == job.id).values(status="in_progress"))
    first = _items(db, job)[0]
    head = try_claim(db, first.id, 60.0)
    assert head is not None
    return head, claim_members(db, head, 60.0, 4)


def test_one_try_is_billed_once_and_each_item_gets_its_share(db: Session) -> None:
    job = _packed_job(db, 3, 3)
    head, members = _claimed(db, job)
    pack = [head, *members]
    results = [MemberResult(i, "done", {"p": 0.9, "request_id": "req-pack"}) for i in pack]
    settled = settle_pack(db, head, results, [_call("req-pack", tokens=1001)])
    assert [s.id for s in settled] == [i.id for i in pack]
    calls = list(db.scalars(select(ApiCall).where(ApiCall.job_id == job.id)))
    assert len(calls) == 1 and calls[0].item_id == head.id and calls[0].pack_items == [i.id for i in pack]
    items = {i.id: i for i in _items(db, job)}
    usage = [items[i.id].output["usage"] for i in pack]  # type: ignore[index]
    assert sum(u["input_tokens"] for u in usage) == 1001 and sum(u["attempts"] for u in usage) == 1
    assert round(sum(u["cost_usd"] for u in usage), 8) == 0.02
    assert [items[i.id].output["pack"]["position"] for i in pack] == [0, 1, 2]  # type: ignore[index]
    # the repeat of c0 took its answer, at no cost
    repeat = next(i for i in items.values() if i.custom_id == "repeat")
    assert repeat.status == "done" and repeat.output["usage"]["attempts"] == 0  # type: ignore[index]

    found = lookup_request(db, job.tenant_id, "req-pack")
    assert len(found) == 1
    assert [i["custom_id"] for i in found[0].items] == ["c0", "c1", "c2"]
    assert found[0].item is not None and found[0].item["custom_id"] == "c0"


def test_members_without_answers_leave_the_pack_and_are_sent_alone(db: Session) -> None:
    job = _packed_job(db, 3, 3)
    head, members = _claimed(db, job)
    results = [
        MemberResult(head, "done", {"p": 0.9}),
        MemberResult(members[0], "alone", error="left out", retry_at=utcnow()),
        MemberResult(members[1], "done", {"p": 0.1}),
    ]
    settle_pack(db, head, results, [_call("req-2")])
    alone = db.get(Item, members[0].id)
    assert alone is not None
    db.refresh(alone)
    assert alone.status == "pending" and alone.pack_of is None and alone.tries == 1  # the try counted
    ready = {r.id for r in ready_items(db, [job.id], "decisions", 50).get(job.id, [])}
    assert alone.id in ready


def test_a_failed_try_gives_the_pack_back_whole(db: Session) -> None:
    job = _packed_job(db, 3, 3)
    head, members = _claimed(db, job)
    later = utcnow() + timedelta(seconds=30)
    results = [MemberResult(i, "released", error="503", retry_at=later) for i in [head, *members]]
    settle_pack(db, head, results, [_call("req-3")])
    rows = _items(db, job)[:3]
    for row in rows:
        db.refresh(row)
    assert [r.status for r in rows] == ["pending"] * 3
    assert [r.pack_of for r in rows] == [None, head.id, head.id]  # still one pack, tried again as one
    assert all(r.tries == 1 for r in rows)
    # the next claim of the head takes the whole pack again
    db.execute(update(Item).where(Item.job_id == job.id).values(not_before=None))
    again = try_claim(db, head.id, 60.0)
    assert again is not None and len(claim_members(db, again, 60.0, 4)) == 2


def test_members_left_behind_by_an_ended_head_are_freed(db: Session) -> None:
    job = _packed_job(db, 3, 3)
    first = _items(db, job)[0]
    db.execute(update(Item).where(Item.id == first.id).values(status="failed", error="gave up"))
    assert free_orphaned_members(db) == 2
    rows = _items(db, job)[1:3]
    for row in rows:
        db.refresh(row)
    assert [r.pack_of for r in rows] == [None, None]


def test_members_out_of_tries_leave_the_pack_instead_of_being_claimed(db: Session) -> None:
    job = _packed_job(db, 3, 3)
    items = _items(db, job)
    db.execute(update(Item).where(Item.id == items[2].id).values(tries=4))
    _head, members = _claimed(db, job)
    assert [m.custom_id for m in members] == ["c1"]
    spent = db.get(Item, items[2].id)
    assert spent is not None
    db.refresh(spent)
    assert spent.pack_of is None and spent.status == "pending"
