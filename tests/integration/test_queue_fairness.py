"""The scheduler against real Redis, Postgres, `celery worker` processes and a rate-limited simulator.

What a user sees: a small job of another tenant does not wait for a big job's backlog; tenants with weights
1:1:2 share a saturated scope 25/25/50; interactive work of a tenant overtakes its own batch; a cancel stops
new work at once (only what was already in flight finishes); a slow Agent scope does not hold back
Decisions work. No timing asserts: every check is an order or a count in the database.

The tests share one worker and database (`_stack`; their settings are the same). Each runs as tenants of its
own (`Fair.tenant`), reads only the calls made since it started (`Fair.calls_in_order`), and leaves no job
running behind it.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from jobs.control import cancel_job
from jobs.tenancy import get_or_create_tenant, set_tenant
from models import ApiCall, Item, Job, session_scope
from models.db import make_session_factory
from simulator.config import SimConfig
from simulator.server import run_in_thread
from tests.integration.stack import ENDED, SharedStack, Stack, shared_stack
from workers.dispatcher import DEFAULT_LATENCY_S, EXTRA_IN_FLIGHT, LEAD_S

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RATE = 20  # requests/s, the simulator's limit and ours
AGENT_RATE = 0.4  # one Agent call every 2.5 s (2.9 s with the headroom): eight questions need at least 20 s
# Items a scope may hold in flight before any latency is observed (rate × (1 s default + dispatch lead)
# + 2): calls already dispatched when a new job arrives, which run before the new job's first fair turn.
PIPELINE = math.ceil(RATE * (DEFAULT_LATENCY_S + LEAD_S)) + EXTRA_IN_FLIGHT
# The target once the simulator's 0.05 s latency is observed, allowing the POSTs up to 0.3 s on a busy host.
STEADY_TARGET = math.ceil(RATE * (0.3 + LEAD_S)) + EXTRA_IN_FLIGHT


def _claims(n: int, prefix: str) -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i}", "claim": f"{prefix} claim number {i} about Rust 1.0 in May 2015."}
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def _stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStack]:
    with (
        run_in_thread(
            SimConfig(decisions_rps=RATE, agent_rps=AGENT_RATE, search_rps=0, latency_s=0.05)
        ) as sim,
        # A headroom of 15 % (2 % by default): a 429 would need 21 calls squeezed by 176 ms in all into one
        # second of the simulator's window; its retry, a second or more later, would put a call far down the
        # order these tests read. At 5 % (50 ms) the small-job test failed once on a busy machine with its
        # calls spread out that way (its assertion now names the 429s, to tell).
        shared_stack(
            sim.base_url,
            tmp_path_factory.mktemp("fairness"),
            FACTGATE_DECISIONS_RPS=str(RATE),
            FACTGATE_AGENT_RPS=str(AGENT_RATE),
            FACTGATE_LIMITER_HEADROOM="0.15",
        ) as st,
    ):
        st.start_worker(concurrency=8)
        yield st


@dataclass
class Fair:
    """The module's stack as one test sees it: its own tenants, and the calls made since it began."""

    stack: SharedStack
    token: str
    first_call: int

    def tenant(self, name: str) -> str:
        return f"{name}-{self.token}"

    def calls_in_order(self, *, answered_only: bool = False) -> list[uuid.UUID]:
        """The job of every upstream attempt since the test began, in the order they were recorded (with
        `answered_only`, the 429s left out: their items' answered calls are in the list, later)."""
        query = select(ApiCall.job_id).where(ApiCall.id > self.first_call).order_by(ApiCall.id)
        if answered_only:
            query = query.where(ApiCall.status_code.is_distinct_from(429))
        with Session(self.stack.engine) as s:
            return [jid for (jid,) in s.execute(query)]

    def end(self, job_id: uuid.UUID) -> None:
        """Cancel a backlog whose part in the test is over (its last calls would only take time) and wait
        until it has ended: the next test starts on an idle scope."""
        factory = make_session_factory(self.stack.engine)
        with session_scope(factory) as s:
            job = s.get(Job, job_id)
            assert job is not None
            cancel_job(s, job)
        assert self.stack.wait_job(job_id, timeout=60).status in ("cancelled", "completed")

    def throttled(self) -> int:
        """Upstream 429s since the test began (each is retried later, out of the fair order)."""
        with Session(self.stack.engine) as s:
            query = select(func.count()).where(ApiCall.id > self.first_call, ApiCall.status_code == 429)
            return s.scalar(query) or 0

    def wait_order(self, n: int) -> list[uuid.UUID]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            order = self.calls_in_order()
            if len(order) >= n:
                return order
            time.sleep(0.1)
        raise TimeoutError(f"fewer than {n} calls")


@pytest.fixture
def fair(_stack: SharedStack, request: pytest.FixtureRequest) -> Iterator[Fair]:
    with Session(_stack.engine) as s:
        first_call = s.scalar(select(func.max(ApiCall.id))) or 0
    token = uuid.uuid4().hex[:8]
    _stack.tenant = f"acme-{token}"  # whose jobs submit_* makes when a test names no tenant
    fair = Fair(_stack, token, first_call)
    yield fair
    # A test ends its backlogs itself once their part is over; one that failed half-way leaves them running,
    # and the next test would share the scope with them. They are cancelled here, so one failure stays one.
    with Session(_stack.engine) as s:
        live = list(s.scalars(select(Job.id).where(Job.status.not_in(ENDED))))
    for job_id in live:
        fair.end(job_id)


def _wait_calls(stack: Stack, job_id: uuid.UUID, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with Session(stack.engine) as s:
            if (s.scalar(select(func.count()).where(ApiCall.job_id == job_id)) or 0) >= n:
                return
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} made fewer than {n} calls")


def test_a_small_job_of_another_tenant_does_not_wait_for_a_big_backlog(fair: Fair) -> None:
    stack = fair.stack
    big = stack.submit_claims(_claims(300, "big"), {"mode": "ungrounded"}, tenant=fair.tenant("nightly"))
    _wait_calls(stack, big, 20)  # the big job holds the scope
    small = stack.submit_claims(_claims(10, "small"), {"mode": "ungrounded"}, tenant=fair.tenant("cli-user"))
    done_small = stack.wait_job(small, timeout=60)
    with Session(stack.engine) as s:
        big_left = s.scalar(select(func.count()).where(Item.job_id == big, Item.status == "pending")) or 0
        big_status = s.scalar(select(Job.status).where(Job.id == big))
    assert done_small.status == "completed"
    assert big_status == "in_progress" and big_left > 100  # the small job did not wait for the backlog
    # It took every other freed slot (two tenants, equal weights): its 10 answered calls lie within the calls
    # already in flight when it arrived plus twice its own size. The in-process simulator, starved of CPU by
    # a loaded suite, can count a request late and answer a stray 429 (bench/at_limit.py runs it at real-time
    # priority for that reason); the item is sent again after the pause, so each 429 may put one more
    # pipeline of calls between the first answer and the last.
    order = fair.calls_in_order(answered_only=True)
    mine = [n for n, job in enumerate(order) if job == small]
    throttled = fair.throttled()
    assert len(mine) == 10, (mine, f"429s {throttled}")
    assert mine[-1] - mine[0] <= PIPELINE + 2 * 10 + 4 + PIPELINE * throttled, (mine, f"429s {throttled}")
    fair.end(big)


def test_weights_1_1_2_share_a_saturated_scope_25_25_50(fair: Fair) -> None:
    stack = fair.stack
    factory = make_session_factory(stack.engine)
    with session_scope(factory) as s:
        for name, weight in (("light-a", 1.0), ("light-b", 1.0), ("heavy", 2.0)):
            get_or_create_tenant(s, fair.tenant(name))
            set_tenant(s, fair.tenant(name), weight=weight)
    jobs = {
        name: stack.submit_claims(_claims(120, name), {"mode": "ungrounded"}, tenant=fair.tenant(name))
        for name in ("light-a", "light-b", "heavy")
    }
    for job_id in jobs.values():
        _wait_calls(stack, job_id, 1)
    # From the moment all three run, past what was already in flight, while all three are backlogged.
    start = max(fair.calls_in_order().index(j) for j in jobs.values()) + PIPELINE
    order = fair.wait_order(start + 120)
    window = order[start : start + 120]
    counts = Counter(window)
    shares = {name: counts[job_id] / len(window) for name, job_id in jobs.items()}
    print(f"\nshares over {len(window)} calls: {shares}")
    assert abs(shares["light-a"] - 0.25) <= 0.10 and abs(shares["light-b"] - 0.25) <= 0.10
    assert abs(shares["heavy"] - 0.50) <= 0.10
    for job_id in jobs.values():
        fair.end(job_id)


def test_interactive_work_overtakes_its_own_tenants_batch(fair: Fair) -> None:
    stack = fair.stack
    batch = stack.submit_claims(_claims(200, "batch"), {"mode": "ungrounded"}, tenant=fair.tenant("acme"))
    _wait_calls(stack, batch, 10)
    interactive = stack.submit_claims(
        _claims(20, "now"), {"mode": "ungrounded", "priority": "interactive"}, tenant=fair.tenant("acme")
    )
    assert stack.wait_job(interactive, timeout=60).status == "completed"
    # Interactive took ~9 of every 10 of the tenant's freed slots: its 20 calls lie within what was in flight
    # when it arrived plus 20 / 0.9; batch still got the odd slot.
    # As in the small-job test: a loaded suite's simulator can answer a stray 429, whose item is sent again
    # after the pause (a CI run saw 21 calls for 20 items), so the order read is of answered calls and each
    # 429 may put one more pipeline into the span.
    order = fair.calls_in_order(answered_only=True)
    mine = [n for n, job in enumerate(order) if job == interactive]
    span = order[mine[0] : mine[-1] + 1]
    throttled = fair.throttled()
    assert len(mine) == 20, (Counter(span), f"429s {throttled}")
    assert len(span) <= PIPELINE + 23 + 4 + PIPELINE * throttled, (Counter(span), f"429s {throttled}")
    assert span.count(batch) >= 1  # batch is slowed, never starved
    with Session(stack.engine) as s:
        assert s.scalar(select(Job.status).where(Job.id == batch)) == "in_progress"
    fair.end(batch)


def test_cancel_stops_new_work_and_only_what_was_in_flight_finishes(fair: Fair) -> None:
    stack = fair.stack
    job_id = stack.submit_claims(_claims(300, "cancel"), {"mode": "ungrounded"})
    _wait_calls(stack, job_id, 30)
    factory = make_session_factory(stack.engine)
    with session_scope(factory) as s:
        in_flight = (
            s.scalar(
                select(func.count()).where(
                    Item.job_id == job_id,
                    Item.status.in_(("pending", "running")),
                    Item.enqueued_at.is_not(None),
                )
            )
            or 0
        )
        calls_at_cancel = s.scalar(select(func.count()).where(ApiCall.job_id == job_id)) or 0
        job = s.get(Job, job_id)
        assert job is not None and cancel_job(s, job)
    ended = stack.wait_job(job_id, timeout=60)
    with Session(stack.engine) as s:
        calls_after = (s.scalar(select(func.count()).where(ApiCall.job_id == job_id)) or 0) - calls_at_cancel
        statuses = Counter(st for (st,) in s.execute(select(Item.status).where(Item.job_id == job_id)))
    assert ended.status == "cancelled"
    # The broker held only the scope's few in-flight items: nothing else started after the cancel.
    assert calls_after <= in_flight, (calls_after, in_flight)
    assert in_flight <= STEADY_TARGET  # bounded by the scope's target, not by a window of hundreds
    assert statuses["skipped"] >= 300 - calls_at_cancel - in_flight


def test_a_slow_agent_scope_does_not_hold_back_decisions_work(fair: Fair) -> None:
    """Answer questions wait for the Agent scope (one call every 2.9 s here); a claims job beside them runs at
    the Decisions rate, because the Agent scope holds at most its own few items (and threads) in flight."""
    stack = fair.stack
    answer = stack.submit_answer(
        [{"id": f"q{i}", "question": "How deep is the Mariana Trench?"} for i in range(8)]
    )
    # 40 claims take about 2.4 s at 17/s, well inside the 20 s the Agent scope needs for its questions, even
    # when a busy machine halves the pace (80 did not always finish first there).
    claims = stack.submit_claims(_claims(40, "beside"), {"mode": "ungrounded"}, tenant=fair.tenant("acme"))
    assert stack.wait_job(claims, timeout=60).status == "completed"
    with Session(stack.engine) as s:
        questions = Counter(
            (st, sent is not None)
            for st, sent in s.execute(
                select(Item.status, Item.enqueued_at).where(Item.job_id == answer, Item.stage == "question")
            )
        )
    in_flight = questions[("pending", True)] + questions[("running", True)]
    assert questions[("pending", False)] >= 1  # the Agent scope is still working through its questions
    assert in_flight <= 3  # its bound: rate x (latency + lead) + 2, never the eight threads of the worker
    factory = make_session_factory(stack.engine)
    with session_scope(factory) as s:
        job = s.get(Job, answer)
        assert job is not None and cancel_job(s, job)
    assert stack.wait_job(answer, timeout=60).status == "cancelled"
