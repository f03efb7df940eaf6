"""A grounded claim's sources stored once per job and list (migration 0012, jobs/source_lists.py) read back
exactly as they were stored inline: every settle path writes the reference and the list, and result
lines, export pages, report pages and request lookups of such a job are the bytes of a job whose outputs
hold their sources inline (as every job before 0012 does). The purge removes a job's lists, and the
downgrade puts them back into the outputs."""

# ruff: noqa: F811

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select, text, update
from sqlalchemy.orm import Session, sessionmaker

import migrations
from checks.claim_sources import REF_KEY, join_sources, sources_digest
from jobs.claims import claim_results_of, claim_results_page, iter_claim_results
from jobs.intake import UnitSpec, create_job
from jobs.items import claim_item, finish_item, finish_item_at_once
from jobs.keyset import START
from jobs.purge import purge_step
from jobs.queries import lookup_request
from jobs.records import CallRow, ClaimedItem
from jobs.tenancy import get_or_create_tenant
from models import Item, Job, SourceList, make_engine, session_scope, utcnow
from tests.integration.web_fixtures import (  # noqa: F401 - fixtures
    Caller,
    WebEnv,
    caller,
    memory_celery,
    other_caller,
    web,
    web_settings,
)
from tests.services import create_pg_database, drop_pg_database, unavailable

pytestmark = pytest.mark.integration

SOURCES_A: list[dict[str, Any]] = [
    {"title": "Aconcagua", "url": "https://a.example", "date": "2023-05-02", "snippet": "é \u2028 6,961 m"},
    {"title": "Everest", "url": "https://e.example", "date": None, "snippet": "8,848.86 metres"},
]
SOURCES_B: list[dict[str, Any]] = [
    {"title": "Amazon", "url": "https://b.example", "date": "2022-08-30", "snippet": "by volume"}
]
# (custom id, the list its grounded answer cites): c1 and c3 found the same pages.
CLAIMS: list[tuple[str, list[dict[str, Any]]]] = [
    ("c1", SOURCES_A),
    ("c2", SOURCES_B),
    ("c3", SOURCES_A),
    ("c4", []),
]


def output_of(custom_id: str, sources: list[dict[str, Any]]) -> dict[str, Any]:
    """What the claim handler returns for a grounded claim (workers/claims.py)."""
    return {
        "p": 0.0132,
        "verdict": "contradicted",
        "request_id": f"req-{custom_id}",
        "request_ids": [f"req-{custom_id}"],
        "sanitized": [],
        "input_tokens": 298,
        "output_tokens": 1,
        "model": "pplx-decider-latest",
        "n_search_results": len(sources),
        "sources": sources,
    }


def call_of(custom_id: str) -> CallRow:
    return CallRow(
        endpoint="decisions",
        attempt=1,
        status_code=200,
        request_id=f"req-{custom_id}",
        latency_ms=120.0,
        model="pplx-decider-latest",
        input_tokens=298,
        searches=1,
        cost_usd=0.001,
    )


def claims_job(db: Session, tenant: str) -> Job:
    t = get_or_create_tenant(db, tenant)
    units = [
        UnitSpec(stage="claim", custom_id=cid, mode="grounded", input={"claim": f"claim {cid}"})
        for cid, _ in CLAIMS
    ]
    job, _ = create_job(db, tenant_id=t.id, kind="claims", options={"modes": ["grounded"]}, units=units)
    return job


def settle(db: Session, job: Job) -> None:
    """Each item through another settle path: the transaction's, the one statement's on a session
    (SQLAlchemy's CTE) and on a bare psycopg connection (the worker's), in turn; SQLite has only the
    transaction's."""
    paths = 3 if db.get_bind().dialect.name == "postgresql" else 1
    items = list(db.scalars(select(Item.id).where(Item.job_id == job.id).order_by(Item.position)))
    for n, (item_id, (cid, sources)) in enumerate(zip(items, CLAIMS, strict=True)):
        held = claim_item(db, item_id, lease_s=60)
        assert isinstance(held, ClaimedItem)
        path = n % paths
        if path == 0:
            assert finish_item(db, held, output_of(cid, sources), [call_of(cid)])
        else:
            assert finish_item_at_once(
                db if path == 1 else db.connection(), held, output_of(cid, sources), [call_of(cid)]
            )
    db.expire_all()


def inline(db: Session, job: Job) -> None:
    """Rewrite the job's outputs as every job before 0012 holds them: the sources inside the output."""
    lists = {d.hex: s for d, s in db.execute(select(SourceList.digest, SourceList.sources))}
    for item in db.scalars(select(Item).where(Item.job_id == job.id)):
        assert item.output is not None
        db.execute(update(Item).where(Item.id == item.id).values(output=join_sources(item.output, lists)))
    db.execute(delete(SourceList).where(SourceList.job_id == job.id))
    db.expire_all()


def test_each_list_is_stored_once_per_job_and_named_in_place(db: Session) -> None:
    first, second = claims_job(db, "src-a"), claims_job(db, "src-b")
    settle(db, first)
    settle(db, second)
    for job in (first, second):  # each job its own lists: A once though two claims cite it, B, no empty one
        digests = set(db.scalars(select(SourceList.digest).where(SourceList.job_id == job.id)))
        assert {d.hex for d in digests} == {sources_digest(SOURCES_A), sources_digest(SOURCES_B)}
    outputs = [
        i.output for i in db.scalars(select(Item).where(Item.job_id == first.id).order_by(Item.position))
    ]
    for output, (_cid, sources) in zip(outputs, CLAIMS, strict=True):
        assert output is not None
        if sources:
            assert "sources" not in output and output[REF_KEY] == sources_digest(sources)
        else:
            assert output["sources"] == [] and REF_KEY not in output


def test_results_exports_and_report_rows_are_those_of_inline_sources(db: Session) -> None:
    stored_apart, stored_inline = claims_job(db, "src-c"), claims_job(db, "src-d")
    settle(db, stored_apart)
    settle(db, stored_inline)
    inline(db, stored_inline)
    assert db.scalar(select(func.count()).where(SourceList.job_id == stored_apart.id)) == 2

    def lines(job: Job) -> dict[str, list[str]]:
        return {
            "stream": [r.model_dump_json() for r in iter_claim_results(db, job)],
            "page": [r.model_dump_json() for _c, r in claim_results_page(db, job, START, 1_000)],
            "report": [r.model_dump_json() for r in claim_results_of(db, job, ["c3", "c1", "c2"])[0]],
        }

    got, want = lines(stored_apart), lines(stored_inline)
    assert got == want
    assert '"title":"Aconcagua"' in got["stream"][0] and '"sources":[]' in got["stream"][3]


def test_a_request_lookup_shows_the_output_as_it_was_written(db: Session) -> None:
    apart_job, inline_job = claims_job(db, "src-e"), claims_job(db, "src-f")
    settle(db, apart_job)
    settle(db, inline_job)
    inline(db, inline_job)
    for job in (apart_job, inline_job):
        (found,) = lookup_request(db, job.tenant_id, "req-c3")  # one per tenant: the other's is not seen
        assert found.job_id == job.id and found.item is not None
        original = json.dumps(output_of("c3", SOURCES_A))
        written = db.scalar(text("SELECT CAST(CAST(:o AS jsonb) AS text)"), {"o": original})
        shown = {k: v for k, v in found.item["output"].items() if k != "usage"}
        assert json.dumps(shown) == json.dumps(json.loads(written))  # JSONB's key order, sources in place


def test_the_purge_removes_a_jobs_lists_and_no_others(db: Session) -> None:
    gone, kept = claims_job(db, "src-g"), claims_job(db, "src-h")
    settle(db, gone)
    settle(db, kept)
    db.execute(update(Job).where(Job.id == gone.id).values(status="completed", completed_at=utcnow()))
    steps = 0
    expired = utcnow() + timedelta(days=31)  # past the default retention of 30 days
    while purge_step(db, gone.id, limit=1, now=expired):
        steps += 1
    # 4 calls, 4 items, 2 lists, then purged_at: one row a step. The job row stays (purged, not deleted),
    # so no cascade removed the lists: the purge did.
    assert steps == 11
    assert db.scalar(select(func.count()).where(SourceList.job_id == gone.id)) == 0
    assert db.scalar(select(func.count()).where(SourceList.job_id == kept.id)) == 2
    row = db.get(Job, gone.id)
    assert row is not None and row.purged_at is not None


def test_the_results_api_and_export_bytes_match_inline_sources(
    web: WebEnv, caller: Caller, other_caller: Caller
) -> None:
    jobs: dict[str, str] = {}
    for who in (caller, other_caller):
        with session_scope(web.sessions) as s:
            job = claims_job(s, who.tenant_name)
            settle(s, job)
            if who is other_caller:
                inline(s, job)
            jobs[who.tenant_name] = str(job.id)
    bodies: dict[str, tuple[bytes, bytes, str, str]] = {}
    for who in (caller, other_caller):
        jid = jobs[who.tenant_name]
        ndjson = web.client.get(f"/v1/jobs/{jid}/results", headers=who.headers).get_data()
        csv = web.client.get(f"/v1/jobs/{jid}/results?format=csv", headers=who.headers).get_data()
        lookup = web.client.get("/v1/requests/req-c1", headers=who.headers).get_json()
        item = lookup["calls"][0]["item"]
        bodies[who.tenant_name] = (ndjson, csv, json.dumps(item["output"]), item["custom_id"])
    apart, inline_ = bodies[caller.tenant_name], bodies[other_caller.tenant_name]
    assert apart == inline_
    assert b"Aconcagua" in apart[0]


def _migrate_roundtrip(url: str) -> None:
    """0012 down puts every list back into the outputs that name it; up again, old outputs still read."""
    engine = make_engine(url)
    try:
        with session_scope(sessionmaker(engine)) as s:
            job = claims_job(s, f"m-{uuid.uuid4().hex[:8]}")
            settle(s, job)
            job_id = job.id
        with Session(engine) as s:
            before = {i.custom_id: i.output for i in s.scalars(select(Item).where(Item.job_id == job_id))}
        migrations.downgrade(url, "0011")
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT custom_id, output FROM items")).all()
            assert "source_lists" not in {r[0] for r in conn.execute(text(
                "SELECT name FROM sqlite_master WHERE type = 'table'" if engine.dialect.name == "sqlite"
                else "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ))}  # fmt: skip
        outputs = {cid: out if isinstance(out, dict) else json.loads(out) for cid, out in rows}
        for cid, sources in CLAIMS:
            was = before[cid]
            assert was is not None
            assert REF_KEY not in outputs[cid] and outputs[cid]["sources"] == sources
            assert {k: v for k, v in outputs[cid].items() if k != "sources"} == {
                k: v for k, v in was.items() if k != REF_KEY and k != "sources"
            }
        migrations.upgrade(url)
        with Session(engine) as s:
            again = s.get(Job, job_id)
            assert again is not None
            results = list(iter_claim_results(s, again))
            assert [r.results["grounded"].sources for r in results] == [s_ for _c, s_ in CLAIMS]
    finally:
        engine.dispose()


def test_0012_downgrade_inlines_the_lists_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    migrations.upgrade(url)
    _migrate_roundtrip(url)


def test_0012_downgrade_inlines_the_lists_on_postgres() -> None:
    try:
        url = create_pg_database("factgate_m12", migrated=True)
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    try:
        _migrate_roundtrip(url)
    finally:
        drop_pg_database(url)
