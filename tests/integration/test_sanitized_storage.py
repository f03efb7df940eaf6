"""Hostile upstream answers, once cleaned by the client, commit to Postgres through the real models.

The simulator's hostile faults stand in for the upstream; the client's answers and call records are
written as the workers write them (`workers.calls.call_rows` for `api_calls`, search results in an
item's JSONB `output`) into a database of this module's own, and committed. The raw values, for
contrast, are refused: that is the write that used to leave items `running` forever.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session

from clients import PerplexityClient, UpstreamError
from clients.records import CallRecord
from models import ApiCall, Item, Job, Tenant, make_engine
from simulator.app import create_app
from simulator.config import SimConfig
from simulator.fake_engine import FakeEngine
from tests.services import create_pg_database, drop_pg_database, unavailable
from workers.calls import call_rows

pytestmark = pytest.mark.integration

QUESTION = {"type": "noul", "instructions": "Is the claim true?"}
GROUNDED = {
    "model": "pplx-decider-v1.2",
    "state": "Water boils at 100 C.",
    "questions": {"is_true": QUESTION},
    "mode": "web_grounding",
}
AGENT = {"input": "Why is the sky blue?", "preset": "fast", "tools": [{"type": "web_search"}]}
SEARCH = {"query": "sky colour", "max_results": 3}


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    """A throwaway database at the head migration, dropped when the module is done."""
    try:
        url = create_pg_database("factgate_sanitize", migrated=True)
    except Exception as exc:
        unavailable("PostgreSQL", exc)
        raise
    try:
        engine = make_engine(url)
        yield engine
        engine.dispose()
    finally:
        drop_pg_database(url)


def hostile(kind: str) -> PerplexityClient:
    config = SimConfig(decisions_rps=0, search_rps=0, agent_rps=0, fault_rate=1.0, faults=(kind,))
    transport = httpx.WSGITransport(app=create_app(config, FakeEngine()))
    return PerplexityClient("http://simulator", "test-key", transport=transport, sleep=lambda _s: None)


def api_calls(record: CallRecord, **owner: Any) -> list[ApiCall]:
    rows = call_rows(record, search_cost_usd=0.005, token_cost_per_m=1.0)
    return [ApiCall(**owner, **dataclasses.asdict(row)) for row in rows]


def test_sanitized_hostile_results_commit(engine: Engine) -> None:
    with hostile("surrogate") as c:
        decision = c.decide(GROUNDED)
    with hostile("model_long") as c:
        long_model = c.decide(GROUNDED)
    with hostile("request_id_long") as c:
        long_id = c.agent(AGENT)
    with hostile("result_nul") as c:
        found = c.search(SEARCH)
    with hostile("error_nul") as c, pytest.raises(UpstreamError) as info:
        c.decide(GROUNDED)
    failed = info.value
    assert decision.sanitized and long_model.sanitized == ["model"] and found.sanitized
    assert long_id.record.sanitized == ["attempt[1].request_id"]
    assert failed.record.sanitized == ["attempt[1].error"]

    output = {
        "model": decision.model,
        "search_results": [dataclasses.asdict(r) for r in [*decision.search_results, *found.results]],
        "answer": long_id.text,
        "sanitized": [*decision.sanitized, *found.sanitized],
    }
    with Session(engine, expire_on_commit=False) as session:
        tenant = Tenant(name=f"sanitize-{uuid.uuid4().hex[:8]}")
        session.add(tenant)
        session.flush()
        job = Job(tenant_id=tenant.id, kind="claims", status="in_progress", options={})
        session.add(job)
        session.flush()
        item = Item(job_id=job.id, stage="claim", position=0, custom_id="c0", input={}, output=output)
        bad = Item(job_id=job.id, stage="claim", position=1, custom_id="c1", input={}, error=str(failed))
        session.add_all([item, bad])
        session.flush()
        owner = {"tenant_id": tenant.id, "job_id": job.id}
        for record in (decision.record, long_model.record, long_id.record, found.record):
            session.add_all(api_calls(record, item_id=item.id, **owner))
        session.add_all(api_calls(failed.record, item_id=bad.id, **owner))
        session.commit()
        item_id, job_id = item.id, job.id

    with Session(engine) as session:
        stored = session.get(Item, item_id)
        assert stored is not None and stored.output == output
        calls = session.scalars(select(ApiCall).where(ApiCall.job_id == job_id).order_by(ApiCall.id)).all()
    assert [c.model for c in calls[:2]] == [decision.model, long_model.model]
    assert calls[2].request_id == long_id.record.request_id and len(calls[2].request_id or "") == 128
    assert calls[-1].error == failed.message and calls[-1].status_code == 400


@pytest.mark.parametrize(
    "column",
    [
        {"model": "m" * 100_000},
        {"request_id": "r" * 6_000},
        {"model": "pplx-decider\x00-simulated"},
        {"error": "state contains an unsupported character: '\x00'"},
    ],
)
def test_the_raw_values_are_refused(engine: Engine, column: dict[str, str]) -> None:
    """The contrast that makes the test above mean something: unclean values do not commit."""
    with Session(engine) as session:
        tenant = Tenant(name=f"raw-{uuid.uuid4().hex[:8]}")
        session.add(tenant)
        session.flush()
        job = Job(tenant_id=tenant.id, kind="claims", options={})
        session.add(job)
        session.flush()
        session.add(ApiCall(tenant_id=tenant.id, job_id=job.id, endpoint="decisions", **column))
        with pytest.raises(DataError):
            session.flush()
        session.rollback()


def test_a_nul_in_jsonb_output_is_refused(engine: Engine) -> None:
    with Session(engine) as session:
        tenant = Tenant(name=f"raw-{uuid.uuid4().hex[:8]}")
        session.add(tenant)
        session.flush()
        job = Job(tenant_id=tenant.id, kind="claims", options={})
        session.add(job)
        session.flush()
        output = {"search_results": [{"url": "https://e.com", "snippet": "scraped\x00text"}]}
        session.add(Item(job_id=job.id, stage="claim", position=0, custom_id="c0", input={}, output=output))
        with pytest.raises(DataError):
            session.flush()
        session.rollback()
