"""Tenants govern their spend and their upstream key — through the real queue (Postgres, Redis, `celery
worker` processes, the simulator over HTTP).

A daily budget reached mid-job holds the tenant's remaining items (none fails) until it is raised; a tenant
with its own key gets its own rate limit, so two tenants together go past one key's limit without a 429; and
the key is in no database dump and no log line.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from jobs.keyring import Keyring
from jobs.tenancy import get_or_create_tenant, set_tenant
from models import ApiCall, Item, Job, session_scope
from models.db import make_session_factory
from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.stack import SharedStack, Stack, shared_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENCRYPTION_KEY = Fernet.generate_key().decode()
TENANT_KEY = "pplx-tenant-b-own-key-5f1e0c2a9d"
RATE = 5  # requests/s per key, at the simulator and in our limiter


def _claims(n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {"id": f"{tag}{i}", "claim": f"{tag} claim {i}: Rust 1.0 was released in May 2015."} for i in range(n)
    ]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SharedStack, str]]:
    """One simulator, database and worker for the module's two tests (their settings are the same; their
    tenants are their own)."""
    with (
        run_in_thread(SimConfig(decisions_rps=RATE, latency_s=0.05)) as sim,
        shared_stack(
            sim.base_url,
            tmp_path_factory.mktemp("tenants"),
            FACTGATE_DECISIONS_RPS=str(RATE),
            FACTGATE_ENCRYPTION_KEYS=ENCRYPTION_KEY,
            # Each key is paced at 4/s (250 ms apart) against the simulator's 5 per any second: a 429 would
            # need five arrivals squeezed by 250 ms in all, so the test holds while the rest of the suite
            # loads both cores beside it (it runs in the parallel run, not alone).
            FACTGATE_LIMITER_HEADROOM="0.2",
        ) as st,
    ):
        st.start_worker(concurrency=8)
        yield st, sim.base_url


def _job(stack: Stack, job_id: uuid.UUID) -> Job:
    with Session(stack.engine) as s:
        job = s.get(Job, job_id)
        assert job is not None
        s.expunge(job)
        return job


def _wait(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise TimeoutError("condition not met in time")


def _statuses(stack: Stack, job_id: uuid.UUID) -> Counter[str]:
    with Session(stack.engine) as s:
        return Counter(st for (st,) in s.execute(select(Item.status).where(Item.job_id == job_id)))


def _calls(stack: Stack, job_id: uuid.UUID) -> int:
    with Session(stack.engine) as s:
        return int(s.scalar(select(func.count()).where(ApiCall.job_id == job_id)) or 0)


def test_a_daily_budget_reached_mid_job_holds_the_rest_until_it_is_raised(
    stack: tuple[SharedStack, str],
) -> None:
    st, _sim = stack
    factory = make_session_factory(st.engine)
    with session_scope(factory) as s:
        get_or_create_tenant(s, "thrifty")
        # A grounded claim costs $0.001 per search attempt plus its tokens: ~8 calls fit.
        set_tenant(s, "thrifty", daily_budget_usd=0.008)
    job_id = st.submit_claims(_claims(40, "t"), {"mode": "grounded"}, tenant="thrifty")
    _wait(lambda: (_job(st, job_id).schedule or {}).get("state") == "held")
    held = _job(st, job_id)
    assert held.status == "in_progress"
    assert "daily budget of $0.01 is spent" in (held.schedule or {})["held_reason"]
    calls_when_held = _calls(st, job_id)
    time.sleep(2.0)  # the scheduler keeps holding: nothing new is sent, nothing fails
    counts = _statuses(st, job_id)
    assert counts["failed"] == 0 and counts["skipped"] == 0
    # Most of the job waits: only what the budget paid for (~8 calls) and what was in flight or running when
    # it was crossed (the scope's few plus the worker's 8 threads) left `pending`. 20 was the exact edge of
    # those bounds and failed once (19) on a busy machine.
    assert counts["pending"] >= 15
    assert _calls(st, job_id) - calls_when_held <= 12  # only what was already in flight
    with session_scope(factory) as s:
        set_tenant(s, "thrifty", daily_budget_usd=10.0)
    done = st.wait_job(job_id, timeout=120)
    assert done.status == "completed"
    assert _statuses(st, job_id) == Counter({"done": 40})


def test_a_tenant_with_its_own_key_has_its_own_rate_limit(stack: tuple[SharedStack, str]) -> None:
    st, sim = stack
    factory = make_session_factory(st.engine)
    with session_scope(factory) as s:
        get_or_create_tenant(s, "own-key")
        set_tenant(s, "own-key", upstream_key=TENANT_KEY, keyring=Keyring((ENCRYPTION_KEY,)))
    n = 40
    a = st.submit_claims(_claims(n, "a"), {"mode": "grounded"}, tenant="operator-key")
    b = st.submit_claims(_claims(n, "b"), {"mode": "grounded"}, tenant="own-key")
    for job_id in (a, b):
        assert st.wait_job(job_id, timeout=120).status == "completed"
    with Session(st.engine) as s:
        first, last = s.execute(
            select(func.min(ApiCall.created_at), func.max(ApiCall.created_at)).where(
                ApiCall.job_id.in_([a, b]), ApiCall.status_code == 200
            )
        ).one()
        total = (
            s.scalar(select(func.count()).where(ApiCall.job_id.in_([a, b]), ApiCall.status_code == 200)) or 0
        )
    rate = (total - 1) / (last - first).total_seconds()
    stats = httpx.get(f"{sim}/stats", timeout=5).json()
    throttled = stats["endpoints"].get("decisions", {}).get("429", 0)
    print(
        f"\ntwo keys: {total} calls at {rate:.2f} req/s = {rate / RATE:.2f} × one key's limit; "
        f"429s {throttled}"
    )
    # The simulator runs in this test's process, so on a loaded host it can stamp arrivals late and bunch
    # them (bench/at_limit.py runs it at real-time priority for that reason): a stray 429 is its jitter,
    # and is retried. The proof of two limits does not rest on it: one key alone cannot get more than RATE
    # answered calls through in any second (the simulator refuses the rest), so 1.25 × RATE of answered
    # calls proves two limits; the two keys' pace allows 1.6 × (the 20 % headroom). How close the limiter
    # gets to a key's limit, with no 429, is bench/at_limit.py's figure.
    assert throttled <= 2
    assert rate >= 1.25 * RATE

    # The key is stored encrypted: no dump of the database holds it, nor any worker log line.
    url = make_url(st.pg_url)
    dump = subprocess.run(
        ["pg_dump", "-h", url.host or "127.0.0.1", "-p", str(url.port or 5432),
         "-U", url.username or "postgres", "--data-only", url.database or ""],
        capture_output=True, text=True, check=True, env={**os.environ, "PGPASSWORD": url.password or ""},
    )  # fmt: skip
    assert "own-key" in dump.stdout  # the dump is real: the tenant is in it
    assert TENANT_KEY not in dump.stdout
    for worker in st.workers:
        assert TENANT_KEY not in worker.log.read_text(errors="replace")
