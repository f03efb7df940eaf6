"""Nothing the upstream or our own infrastructure does can wedge an item, bill it twice or lose its record.

Real Postgres, Redis, `celery worker` subprocesses and the simulator over HTTP. Each hostile upstream
behaviour ends every item done or failed within its tries and the job completes (these tests share one
worker and one simulator whose fault is switched per test: the worker's settings are the same for all); a
Redis that goes away for a few seconds (a server of this test's own) fails nothing; a call slower than the
lease is not sent twice; and under 50 % transient faults the accounting matches what the upstream counted,
request by request.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_lib
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from config import Settings
from jobs.claims import iter_claim_results
from jobs.tenancy import create_token
from models import ApiCall, Item, Job, session_scope
from simulator.app import simulator_state
from simulator.config import SimConfig
from simulator.faults import FaultInjector
from simulator.server import RunningSimulator, run_in_thread
from simulator.wire import WireError
from tests.integration.stack import SharedStack, Stack, fresh_database, running_stack, shared_stack
from web.app import create_app
from workers.app import make_celery

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MAX_TRIES = 3
CLIENT_ATTEMPTS = 4  # one POST and three client retries per try


def _claims(n: int, prefix: str = "claim") -> list[dict[str, Any]]:
    return [
        {"id": f"c{i}", "claim": f"The {prefix} number {i} is about Rust 1.0 in May 2015."} for i in range(n)
    ]


def _items(engine: Engine, job_id: uuid.UUID) -> list[Item]:
    with Session(engine) as s:
        return list(s.scalars(select(Item).where(Item.job_id == job_id).order_by(Item.position, Item.id)))


def _calls_by_item(engine: Engine, job_id: uuid.UUID) -> dict[int, int]:
    with Session(engine) as s:
        rows = s.execute(
            select(ApiCall.item_id, func.count()).where(ApiCall.job_id == job_id).group_by(ApiCall.item_id)
        ).all()
    return {int(i): int(n) for i, n in rows}


def _storable(value: object) -> bool:
    """No NUL and valid UTF-8 all the way down (what Postgres text and JSONB accept)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return "\x00" not in value
    if isinstance(value, dict):
        return all(_storable(k) and _storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_storable(v) for v in value)
    return True


@pytest.fixture
def queue_db() -> Iterator[tuple[str, Engine]]:
    with fresh_database() as db:
        yield db


@pytest.fixture(scope="module")
def _hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningSimulator, SharedStack]]:
    """One simulator without rate limits and one stack (database, worker) for the hostile-upstream tests."""
    with (
        run_in_thread(SimConfig(decisions_rps=0, agent_rps=0, search_rps=0)) as sim,
        # Retries back off from 0.1 s instead of 1 s: these tests count tries and outcomes, not waits.
        shared_stack(
            sim.base_url,
            tmp_path_factory.mktemp("hostile"),
            FACTGATE_MAX_ITEM_ATTEMPTS=str(MAX_TRIES),
            FACTGATE_HTTP_RETRY_BASE_S="0.1",
        ) as stack,
    ):
        yield sim, stack


@pytest.fixture
def hostile(
    _hostile: tuple[RunningSimulator, SharedStack], request: pytest.FixtureRequest
) -> Iterator[tuple[SharedStack, str]]:
    """The shared stack, as this test's own tenant, with the simulator answering every call with the
    fault the test is parametrized with (`kind`); the fault is switched off again after the test."""
    sim, stack = _hostile
    kind = request.node.callspec.params["kind"]
    state = simulator_state(sim.app)
    state.faults = FaultInjector(SimConfig(fault_rate=1.0, faults=(kind,)))
    try:
        yield stack.for_test(request.node.name), kind
    finally:
        state.faults = FaultInjector(SimConfig())


def _assert_bounded(stack: Stack, job_id: uuid.UUID, job: Job) -> list[Item]:
    assert job.status == "completed", job.error
    items = _items(stack.engine, job_id)
    assert items and all(i.status in ("done", "failed") for i in items), [(i.id, i.status) for i in items]
    calls = _calls_by_item(stack.engine, job_id)
    for item in items:
        assert item.tries <= MAX_TRIES
        assert calls.get(item.id, 0) <= MAX_TRIES * CLIENT_ATTEMPTS
        assert _storable(item.output) and _storable(item.error or "")
    return items


@pytest.mark.parametrize(
    ("kind", "expect"),
    [
        ("model_long", "done"),
        ("model_nul", "done"),
        ("result_nul", "done"),
        ("request_id_long", "done"),
        ("surrogate", "done"),
        ("error_nul", "failed"),
    ],
)
def test_hostile_upstream_claims_end_within_their_tries(
    hostile: tuple[SharedStack, str], kind: str, expect: str
) -> None:
    stack, _ = hostile
    engine = stack.engine
    stack.start_worker(concurrency=4)
    job_id = stack.submit_claims(_claims(4), {"mode": "grounded"})
    job = stack.wait_job(job_id, timeout=90)
    items = _assert_bounded(stack, job_id, job)
    assert [i.status for i in items] == [expect] * 4
    for item in items:
        output = item.output or {}
        if expect == "done":
            # One try, one POST: a hostile but valid answer is stored, not re-billed.
            assert item.tries == 1 and output["usage"]["attempts"] == 1
            assert output["sanitized"], output  # what was cleaned is said
        else:
            assert item.error is not None and "400" in item.error and "\x00" not in item.error
    with Session(engine) as s:
        stored = list(s.scalars(select(ApiCall).where(ApiCall.job_id == job_id)))
    assert all(len(c.request_id or "") <= 128 and len(c.model or "") <= 64 for c in stored)


@pytest.mark.parametrize(
    ("kind", "expect"), [("model_nul", "done"), ("surrogate", "done"), ("error_nul", "failed")]
)
def test_hostile_upstream_packed_claims_end_within_their_tries(
    hostile: tuple[SharedStack, str], kind: str, expect: str
) -> None:
    """A packed request (docs/spec.md §9) meets the same hostile answers: every item of the pack ends once,
    the attempt is one row on the pack's head, and each item's share of it adds up to that one POST."""
    stack, _ = hostile
    stack.start_worker(concurrency=4)
    job_id = stack.submit_claims(_claims(6), {"mode": "ungrounded", "pack_size": 3})
    job = stack.wait_job(job_id, timeout=90)
    items = _assert_bounded(stack, job_id, job)
    assert [i.status for i in items] == [expect] * 6
    calls = _calls_by_item(stack.engine, job_id)
    assert sum(calls.values()) == 2  # two packs of three, one POST each
    if expect == "done":
        assert sum((i.output or {})["usage"]["attempts"] for i in items) == 2
        assert all((i.output or {})["sanitized"] for i in items)


@pytest.mark.parametrize("kind", ["result_nul", "surrogate", "model_long"])
def test_hostile_upstream_answer_and_quote_jobs_complete(hostile: tuple[SharedStack, str], kind: str) -> None:
    stack, _ = hostile
    engine = stack.engine
    stack.start_worker(concurrency=4)
    answer = stack.submit_answer([{"id": "q1", "question": "How deep is the Mariana Trench?"}])
    quote = stack.submit_quote([{"id": "q1", "question": "How many bones are in the adult human body?"}])
    for job_id in (answer, quote):
        job = stack.wait_job(job_id, timeout=120)
        items = _assert_bounded(stack, job_id, job)
        question = next(i for i in items if i.parent_id is None)
        assert question.status == "done" and (question.output or {}).get("report"), question.error
        # The report's usage is every attempt of the question and its children, as stored.
        report = (question.output or {})["report"]
        assert report["usage"]["attempts"] == sum(_calls_by_item(engine, job_id).values()) > 0


ANSWER_ROWS = [
    {"id": "jwst", "question": "What did the James Webb Space Telescope discover about exoplanet K2-18b?"},
    {"id": "eiffel", "question": "How tall is the Eiffel Tower today, and how much has its height changed?"},
]
QUOTE_ROWS = [
    {"id": "trench", "question": "How deep is the Mariana Trench?"},
    {"id": "bones", "question": "How many bones are in the adult human body?"},
]
# Packed, and never answered from the verdict store: these tests count what was sent.
PACKED = {"pack_size": 8, "reuse": "none"}


def _submit_packed(stack: Stack) -> tuple[uuid.UUID, uuid.UUID]:
    """A packed answer job and a packed quote job (docs/spec.md §9.6, §9.7)."""
    return stack.submit_answer(ANSWER_ROWS, PACKED), stack.submit_quote(QUOTE_ROWS, PACKED)


def _calls(engine: Engine, job_id: uuid.UUID) -> list[ApiCall]:
    with Session(engine) as s:
        return list(s.scalars(select(ApiCall).where(ApiCall.job_id == job_id).order_by(ApiCall.id)))


def _assert_exact(engine: Engine, job_id: uuid.UUID, job: Job, items: list[Item]) -> list[ApiCall]:
    """Every item ended once, every question reported; what the items and the job bill is every attempt
    recorded (a pack's attempt once, its members' shares adding up to it)."""
    calls = _calls(engine, job_id)
    assert all(i.status == "done" for i in items), [(i.custom_id, i.status, i.error) for i in items]
    assert len({(i.custom_id, i.mode) for i in items}) == len(items)  # nothing doubled
    assert all((i.output or {}).get("report") for i in items if i.parent_id is None)
    assert sum((i.output or {})["usage"]["attempts"] for i in items) == len(calls)
    assert (job.usage or {})["http_attempts"] == len(calls)
    for question in (i for i in items if i.parent_id is None):
        mine = {i.id for i in items if i.id == question.id or i.parent_id == question.id}
        report = (question.output or {})["report"]
        assert report["usage"]["attempts"] == sum(1 for c in calls if c.item_id in mine)
    return calls


@pytest.mark.parametrize("kind", ["result_nul", "surrogate", "model_long"])
def test_hostile_upstream_packed_answer_and_quote_jobs_complete(
    hostile: tuple[SharedStack, str], kind: str
) -> None:
    """The hostile answers of the unpacked test above, met by packed requests: every item of every pack
    ends within its tries, and the accounting is exact."""
    stack, _ = hostile
    stack.start_worker(concurrency=4)
    answer, quote = _submit_packed(stack)
    for job_id, stage in ((answer, "sentence"), (quote, "result")):
        job = stack.wait_job(job_id, timeout=120)
        items = _assert_bounded(stack, job_id, job)
        calls = _assert_exact(stack.engine, job_id, job, items)
        members = {i.id for i in items if i.stage == stage}
        assert any(c.pack_items and set(c.pack_items) <= members for c in calls), stage  # it packed


def _packed_keys(names: Iterable[str]) -> set[str]:
    """The sentences (`s<n>_…`) or results (`r<n>_…`) a Decisions request's question names ask about."""
    return {name.split("_", 1)[0] for name in names if re.match(r"[sr]\d+_", name)}


class _PackedFailsFirst:
    """A simulator engine that answers a packed Decisions request with a 503 the first time it arrives:
    whatever the random faults do, every pack meets one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, body: Any, **kwargs: Any) -> Any:
        if len(_packed_keys(body.get("questions") or {})) > 1:
            key = json.dumps(body, sort_keys=True)
            with self.lock:
                first = key not in self.seen
                self.seen.add(key)
            if first:
                raise WireError(503, "Service temporarily unavailable", error_type="service_unavailable")
        return self.inner.decide(body, **kwargs)


class _LeavesOut:
    """A simulator engine whose packed Decisions answers leave out the questions of the request's last
    sentence (`s<n>_…`) or result (`r<n>_…`): the upstream's partial answer (docs/spec.md §9.5)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.left_out = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, body: Any, **kwargs: Any) -> Any:
        outcome = self.inner.decide(body, **kwargs)
        keys = _packed_keys(outcome.answers)
        if len(keys) < 2:
            return outcome
        last = max(keys, key=lambda k: int(k[1:]))
        self.left_out += 1
        kept = {n: a for n, a in outcome.answers.items() if not n.startswith(f"{last}_")}
        return replace(outcome, answers=kept)


def _number(item: Item) -> int:
    """A sentence's or result's number, as its packed state names it (`q1:s3`, `q1:r3`: 3)."""
    return int(item.custom_id.rsplit(":", 1)[1][1:])


@pytest.fixture
def leaving_out(
    _hostile: tuple[RunningSimulator, SharedStack], request: pytest.FixtureRequest
) -> Iterator[tuple[SharedStack, _LeavesOut]]:
    sim, stack = _hostile
    state = simulator_state(sim.app)
    original = state.engine
    engine = _LeavesOut(original)
    state.engine = engine
    try:
        yield stack.for_test(request.node.name), engine
    finally:
        state.engine = original


def test_packed_answers_missing_for_some_questions_are_asked_again_alone(
    leaving_out: tuple[SharedStack, _LeavesOut],
) -> None:
    """docs/spec.md §9.5 for the answer and quote kinds: the sentence (or result) a packed answer left out
    is sent again on its own, every item ends once, and the accounting is exact."""
    stack, engine = leaving_out
    stack.start_worker(concurrency=4)
    answer, quote = _submit_packed(stack)
    for job_id, stage in ((answer, "sentence"), (quote, "result")):
        job = stack.wait_job(job_id, timeout=120)
        assert job.status == "completed", job.error
        items = _items(stack.engine, job_id)
        calls = _assert_exact(stack.engine, job_id, job, items)
        packed = [c for c in calls if c.pack_items]
        assert packed, stage
        # The left-out member of each pack: answered by a request of its own, not by the pack's.
        alone = {c.item_id for c in calls if not c.pack_items and c.status_code == 200}
        for call in packed:
            last = max((i for i in items if i.id in (call.pack_items or [])), key=_number)
            assert last.id in alone, (stage, last.custom_id)
            assert "pack" not in (last.output or {})
        assert all(i.status == "done" for i in items if i.stage == stage)
    assert engine.left_out >= 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnRedis:
    """A redis-server of this test's own, to stop and start at will (nothing on disk)."""

    def __init__(self, tmp: Path) -> None:
        self.port = _free_port()
        self.tmp = tmp
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is needed for this test"
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.tmp)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis_lib.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(redis_lib.exceptions.ConnectionError):
                if client.ping():
                    return
            time.sleep(0.05)
        raise RuntimeError("own redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


def test_a_short_redis_outage_fails_nothing_and_runs_each_item_once(
    queue_db: tuple[str, Engine], tmp_path: Path
) -> None:
    url, engine = queue_db
    own = OwnRedis(tmp_path)
    own.start()
    try:
        with (
            run_in_thread(SimConfig(decisions_rps=0, latency_s=0.05)) as sim,
            running_stack(
                url,
                engine,
                sim.base_url,
                tmp_path,
                FACTGATE_MAX_ITEM_ATTEMPTS=str(MAX_TRIES),
                FACTGATE_LEASE_S="6",
            ) as stack,
        ):
            stack.env["REDIS_URL"] = own.url  # broker, limiter and budget counters all live here
            stack.env["FACTGATE_DECISIONS_RPS"] = "20"
            stack.start_worker(concurrency=8)
            job_id = stack.submit_claims(_claims(120, "outage"), {"mode": "grounded", "budget_usd": 100})
            _wait_some_done(engine, job_id, 10)
            own.stop()  # Redis gone mid-job: in-flight items hit the limiter, the budget, the broker
            time.sleep(4)
            own.start()  # back, empty: every queued message and counter is lost
            job = stack.wait_job(job_id, timeout=150)
            items = _assert_bounded(stack, job_id, job)
            sim_decisions = _sim_count(sim, "decisions")
    finally:
        own.stop()
    assert [i.status for i in items] == ["done"] * 120
    assert all(i.error is None for i in items)
    # Exactly once: one stored result per item, and the upstream saw no more than one answered POST each.
    assert sum((i.output or {})["usage"]["attempts"] for i in items) == sim_decisions
    assert all(i.tries == 1 for i in items), sorted({i.tries for i in items})


def _wait_some_done(engine: Engine, job_id: uuid.UUID, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with Session(engine) as s:
            done = s.scalar(select(func.count()).where(Item.job_id == job_id, Item.status == "done")) or 0
        if done >= n:
            return
        time.sleep(0.1)
    raise TimeoutError(f"fewer than {n} items done after {timeout}s")


def _sim_count(sim: RunningSimulator, endpoint: str) -> int:
    """POSTs the simulator answered on one endpoint, whatever it answered."""
    snap: dict[str, Any] = httpx.get(f"{sim.base_url}/stats", timeout=5).json()
    return int(sum(snap["endpoints"].get(endpoint, {}).values()))


def test_a_call_slower_than_the_lease_is_sent_once(queue_db: tuple[str, Engine], tmp_path: Path) -> None:
    """The heartbeat keeps the lease of a live item, so the sweeper never starts a second copy."""
    url, engine = queue_db
    with (
        # 2.5 s a call against a 1 s lease: the call outlives its lease more than twice over.
        run_in_thread(SimConfig(decisions_rps=0, latency_s=2.5)) as sim,
        running_stack(
            url, engine, sim.base_url, tmp_path, FACTGATE_LEASE_S="1", FACTGATE_HTTP_TIMEOUT_S="30"
        ) as stack,
    ):
        stack.start_worker(concurrency=4)
        job_id = stack.submit_claims(_claims(3, "slow"), {"mode": "ungrounded"})
        job = stack.wait_job(job_id, timeout=60)
        items = _assert_bounded(stack, job_id, job)
        assert _sim_count(sim, "decisions") == 3
    assert [i.status for i in items] == ["done"] * 3
    assert [i.attempts for i in items] == [1, 1, 1]  # claimed once each: no lease ever expired
    assert _calls_by_item(engine, job_id) == {i.id: 1 for i in items}


def test_accounting_under_half_transient_faults_matches_the_upstream(
    queue_db: tuple[str, Engine], tmp_path: Path
) -> None:
    url, engine = queue_db
    config = SimConfig(decisions_rps=0, fault_rate=0.5, faults=("500", "502", "503"), seed=7)
    with (
        run_in_thread(config) as sim,
        running_stack(
            url,
            engine,
            sim.base_url,
            tmp_path,
            FACTGATE_MAX_ITEM_ATTEMPTS="6",
            # The accounting is the point, not the waits: back off 0.1, 0.2, 0.4 s instead of 1, 2, 4 s.
            FACTGATE_HTTP_RETRY_BASE_S="0.1",
        ) as stack,
    ):
        # Half the POSTs fail and each retry waits (the client's backoff): the threads spend most of the job
        # asleep, so more of them keep the upstream busy.
        stack.start_worker(concurrency=32)
        job_id = stack.submit_claims(_claims(150, "faulty"), {"mode": "grounded"})
        job = stack.wait_job(job_id, timeout=240)
        upstream_posts = _sim_count(sim, "decisions")
        assert job.status == "completed", job.error
        with Session(engine) as s:
            results = list(iter_claim_results(s, job))
            request_ids = [
                r for (r,) in s.execute(select(ApiCall.request_id).where(ApiCall.job_id == job_id)) if r
            ]
        resolved = _resolve_all(stack, url, tmp_path, request_ids)
    attempts = sum(r.results["grounded"].attempts for r in results)
    usage = job.usage or {}
    card = (job.summary or {})["scorecards"]["grounded"]
    print(f"\nupstream POSTs {upstream_posts}, result attempts {attempts}, job searches {usage['searches']}")
    assert attempts == usage["searches"] == upstream_posts == card["grounded_attempts"]
    assert upstream_posts > 150  # the faults really happened
    assert resolved == len(request_ids) == upstream_posts


def _resolve_all(stack: Stack, pg_url: str, tmp: Path, request_ids: list[str]) -> int:
    """Every stored request id resolves through the API, for the tenant that owns the job."""
    overrides = {
        "database_url": pg_url,
        "redis_url": None,
        "perplexity_api_key": None,
        "instance_path": tmp / "w",
    }
    celery = make_celery(Settings().with_overrides(overrides))
    app = create_app(overrides, celery=celery)
    res = app.extensions["factgate"]
    with session_scope(res.sessions) as session:
        token = create_token(session, "acme").token
    client = app.test_client()
    found = 0
    for rid in request_ids:
        resp = client.get(f"/v1/requests/{rid}", headers={"Authorization": f"Bearer {token}"})
        assert resp.status_code == 200, (rid, resp.get_json())
        found += 1
    res.engine.dispose()
    return found


def test_packed_answer_and_quote_accounting_under_half_transient_faults_matches_the_upstream(
    queue_db: tuple[str, Engine], tmp_path: Path
) -> None:
    """Packed answer and quote jobs under 50 % transient faults (Decisions, Agent and Search alike): a
    packed request that fails is retried as the same pack within the bounded tries, every item ends once,
    and what the items and jobs bill is every POST the upstream counted."""
    url, engine = queue_db
    config = SimConfig(decisions_rps=0, agent_rps=0, search_rps=0, fault_rate=0.5,
                       faults=("500", "502", "503"), seed=13)  # fmt: skip
    # Six tries an item, retries backing off from 0.1 s: the accounting is the point, not the waits.
    env = {"FACTGATE_MAX_ITEM_ATTEMPTS": "6", "FACTGATE_HTTP_RETRY_BASE_S": "0.1"}
    with run_in_thread(config) as sim, running_stack(url, engine, sim.base_url, tmp_path, **env) as stack:
        state = simulator_state(sim.app)
        state.engine = _PackedFailsFirst(state.engine)
        stack.start_worker(concurrency=16)
        answer, quote = _submit_packed(stack)
        jobs = {job_id: stack.wait_job(job_id, timeout=240) for job_id in (answer, quote)}
        snap: dict[str, Any] = httpx.get(f"{sim.base_url}/stats", timeout=5).json()
        calls: list[ApiCall] = []
        for job_id, job in jobs.items():
            assert job.status == "completed", job.error
            items = _items(engine, job_id)
            assert all(i.tries <= 6 for i in items)
            mine = _assert_exact(engine, job_id, job, items)
            stage = "sentence" if job_id == answer else "result"
            members = {i.id for i in items if i.stage == stage}
            heads: dict[int, list[ApiCall]] = {}
            for call in mine:
                if call.pack_items and set(call.pack_items) <= members:
                    heads.setdefault(int(call.item_id or 0), []).append(call)
            assert heads, stage
            # Retried as a pack: every pack met a 503 at least once, and its later attempts carry the same
            # members.
            for rows in heads.values():
                assert any(c.status_code != 200 for c in rows), stage
                assert all(c.pack_items == rows[0].pack_items for c in rows), stage
                assert rows[-1].status_code == 200
            calls += mine
        resolved = _resolve_all(stack, url, tmp_path, [c.request_id for c in calls if c.request_id])
    assert len(calls) == snap["total"] > 0
    assert sum(snap["faults"].values()) > 0  # the faults really happened
    assert resolved == len([c for c in calls if c.request_id])


def test_packed_accounting_under_half_transient_faults_matches_the_upstream(
    queue_db: tuple[str, Engine], tmp_path: Path
) -> None:
    """Packs retried under 50 % transient faults: every claim ends once, the requests billed are the POSTs
    the upstream counted, item shares add up to them, and every request id resolves to its pack."""
    url, engine = queue_db
    config = SimConfig(decisions_rps=0, fault_rate=0.5, faults=("500", "502", "503"), seed=11)
    with (
        run_in_thread(config) as sim,
        running_stack(
            url,
            engine,
            sim.base_url,
            tmp_path,
            FACTGATE_MAX_ITEM_ATTEMPTS="6",
            FACTGATE_HTTP_RETRY_BASE_S="0.1",
        ) as stack,
    ):
        stack.start_worker(concurrency=16)
        job_id = stack.submit_claims(_claims(60, "packed"), {"mode": "ungrounded", "pack_size": 5})
        job = stack.wait_job(job_id, timeout=240)
        upstream_posts = _sim_count(sim, "decisions")
        assert job.status == "completed", job.error
        items = _items(engine, job_id)
        with Session(engine) as s:
            calls = list(s.scalars(select(ApiCall).where(ApiCall.job_id == job_id)))
        resolved = _resolve_all(stack, url, tmp_path, [c.request_id for c in calls if c.request_id])
    assert all(i.status == "done" for i in items) and len(items) == 60
    assert len(calls) == upstream_posts > 12  # 12 packs; the faults really happened
    assert sum((i.output or {})["usage"]["attempts"] for i in items) == upstream_posts
    assert (job.usage or {})["http_attempts"] == upstream_posts
    assert all(c.pack_items and len(c.pack_items) == 5 for c in calls)
    assert resolved == len([c for c in calls if c.request_id])
