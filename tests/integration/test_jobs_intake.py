"""jobs/ against real Postgres: bulk intake (COPY), duplicate linking, idempotency, leases."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobs.intake import UnitSpec, create_job, dedupe_key
from jobs.items import claim_item, finish_item, release_item
from jobs.sweeper import expire_leases
from jobs.tenancy import get_or_create_tenant
from models import Item, make_engine, make_session_factory, session_scope

TRICKY = 'tab\there, newline\nthere, back\\slash \\N, quote " and ünïcode ✓'


def _units(texts: list[str]) -> list[UnitSpec]:
    return [
        UnitSpec(
            stage="claim", custom_id=f"c{i}", mode="ungrounded", input={"claim": t}, dedupe_key=dedupe_key(t)
        )
        for i, t in enumerate(texts)
    ]


def _roundtrip(session: Session) -> None:
    tenant = get_or_create_tenant(session, "intake-test")
    units = _units([TRICKY, "plain", TRICKY, "other", "plain"])
    job, created = create_job(session, tenant_id=tenant.id, kind="claims", options={}, units=units)
    assert created
    items = list(session.scalars(select(Item).where(Item.job_id == job.id).order_by(Item.position)))
    assert [i.input["claim"] for i in items] == [u.input["claim"] for u in units]
    assert [i.custom_id for i in items] == ["c0", "c1", "c2", "c3", "c4"]
    assert [i.status for i in items] == ["pending"] * 5
    # Repeats point at the first item with the same request; leaders point nowhere.
    assert [i.duplicate_of for i in items] == [None, None, items[0].id, None, items[1].id]


def test_bulk_intake_postgres_copy_roundtrip(db: Session) -> None:
    _roundtrip(db)


def test_bulk_intake_sqlite_roundtrip(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            _roundtrip(session)
    finally:
        engine.dispose()


def test_idempotency_key_returns_the_same_job(db: Session) -> None:
    tenant = get_or_create_tenant(db, "idem-test")
    first, created = create_job(
        db, tenant_id=tenant.id, kind="claims", options={}, units=_units(["a"]), idempotency_key="k1"
    )
    again, created_again = create_job(
        db, tenant_id=tenant.id, kind="claims", options={}, units=_units(["b", "c"]), idempotency_key="k1"
    )
    assert created and not created_again and again.id == first.id
    assert db.query(Item).filter(Item.job_id == first.id).count() == 1


def test_lease_token_rejects_a_stale_worker(db: Session) -> None:
    tenant = get_or_create_tenant(db, "lease-test")
    job, _ = create_job(db, tenant_id=tenant.id, kind="claims", options={}, units=_units(["x"]))
    item_id = db.scalar(select(Item.id).where(Item.job_id == job.id))
    assert item_id is not None
    stale = claim_item(db, item_id, lease_s=-1)  # already expired
    assert stale is not None
    assert claim_item(db, item_id, lease_s=60) is None  # running: nobody else can claim it
    assert expire_leases(db) >= 1
    fresh = claim_item(db, item_id, lease_s=60)
    assert fresh is not None and fresh.token == stale.token + 1
    assert finish_item(db, stale, {"p": 0.1}) is False  # the old holder's write is refused
    assert release_item(db, stale, "late") is False
    assert finish_item(db, fresh, {"p": 0.9}) is True
    item = db.get(Item, item_id)
    assert item is not None and item.status == "done" and item.output is not None
    assert item.output["p"] == 0.9 and item.output["usage"]["attempts"] == 0
