"""Rate limits, faults and latency of the simulator, in-process and over a real waitress server."""

from __future__ import annotations

import json
import random
import statistics
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from cli import simulator_cmd
from cli.main import main
from simulator.app import create_app, simulator_state
from simulator.config import SimConfig
from simulator.fake_engine import FakeEngine
from simulator.faults import BAD_PROBABILITY, FAULT_KINDS, FaultInjector, LatencyModel
from simulator.limits import RateLimiter, Window
from simulator.server import run_in_thread
from simulator.stats import Stats

AUTH = {"Authorization": "Bearer test-key"}
DECISION = {
    "model": "pplx-decider-v1.2",
    "state": "Water boils at 100 C at sea level.",
    "questions": {"is_true": {"type": "noul", "instructions": "Is the claim true?"}},
}
CHOICE = {
    **DECISION,
    "questions": {"pick": {"type": "choice", "criteria": {"a": "one", "b": "two"}}},
}
AGENT = {"input": "Why is the sky blue?", "preset": "fast", "tools": [{"type": "web_search"}]}
SEARCH = {"query": "sky colour", "max_results": 5}
UNLIMITED = SimConfig(decisions_rps=0, search_rps=0, agent_rps=0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SleepLog:
    """Stands in for real waiting: records every pause the simulator asks for."""

    def __init__(self) -> None:
        self.pauses: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)


def client_for(config: SimConfig, clock: Any = None, sleep: Any = None) -> httpx.Client:
    app = create_app(config, FakeEngine(), clock=clock, sleep=sleep)
    return httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://simulator", headers=AUTH)


# ------------------------------------------------------------------------------------------ RateLimiter


def test_burst_of_14_gives_10_and_recovers_after_one_second() -> None:
    clock = FakeClock()
    limiter = RateLimiter({"decisions": 10}, clock)
    assert [limiter.try_acquire("k", "decisions") for _ in range(14)] == [True] * 10 + [False] * 4
    clock.now += 0.999
    assert not limiter.try_acquire("k", "decisions")
    clock.now += 0.001
    assert [limiter.try_acquire("k", "decisions") for _ in range(11)] == [True] * 10 + [False]


def test_window_slides_rather_than_resetting() -> None:
    """Capacity returns request by request, one second after each accepted one."""
    clock = FakeClock()
    limiter = RateLimiter({"decisions": 10}, clock)
    for _ in range(10):
        assert limiter.try_acquire("k", "decisions")
        clock.now += 0.1
    # t = +1.0: the first request left the window, so exactly one slot is free.
    assert limiter.try_acquire("k", "decisions")
    assert not limiter.try_acquire("k", "decisions")


def test_fractional_and_zero_rates() -> None:
    assert Window.for_rate(0) is None
    assert Window.for_rate(0.5) == Window(size=1, seconds=2.0)
    assert Window.for_rate(50) == Window(size=50, seconds=1.0)
    clock = FakeClock()
    limiter = RateLimiter({"agent": 0.5, "search": 0}, clock)
    assert limiter.try_acquire("k", "agent")
    clock.now += 1.9
    assert not limiter.try_acquire("k", "agent")
    clock.now += 0.1
    assert limiter.try_acquire("k", "agent")
    assert all(limiter.try_acquire("k", "search") for _ in range(1000))
    assert limiter.limit_for("search") == 0
    assert limiter.limit_for("agent") == 0.5


def test_keys_and_endpoints_have_separate_windows() -> None:
    limiter = RateLimiter({"decisions": 2, "search": 2}, FakeClock())
    assert [limiter.try_acquire("a", "decisions") for _ in range(3)] == [True, True, False]
    assert [limiter.try_acquire("b", "decisions") for _ in range(3)] == [True, True, False]
    assert [limiter.try_acquire("a", "search") for _ in range(3)] == [True, True, False]


def test_limiter_is_exact_under_concurrent_callers() -> None:
    limiter = RateLimiter({"decisions": 10}, FakeClock())
    results: list[bool] = []
    lock = threading.Lock()
    barrier = threading.Barrier(40)

    def call() -> None:
        barrier.wait()
        outcome = [limiter.try_acquire("k", "decisions") for _ in range(5)]
        with lock:
            results.extend(outcome)

    threads = [threading.Thread(target=call) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 10
    assert results.count(False) == 190


# ------------------------------------------------------------------------------------- Limits via the app


def assert_429(response: httpx.Response, retry_after: str = "1") -> None:
    assert response.status_code == 429
    assert response.headers["Retry-After"] == retry_after
    assert uuid.UUID(response.headers["x-request-id"])
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert error["type"] == "rate_limit_exceeded"


@pytest.mark.parametrize(
    ("path", "body", "limit"),
    [("/v1/decisions", DECISION, 10), ("/search", SEARCH, 50), ("/v1/agent", AGENT, 3)],
)
def test_default_limits_per_endpoint(path: str, body: dict[str, Any], limit: int) -> None:
    clock = FakeClock()
    with client_for(SimConfig(), clock) as c:
        statuses = [c.post(path, json=body).status_code for _ in range(limit + 4)]
        assert statuses == [200] * limit + [429] * 4
        assert_429(c.post(path, json=body))
        other_key = c.post(path, json=body, headers={"Authorization": "Bearer someone-else"})
        assert other_key.status_code == 200
        clock.now += 1.0
        assert c.post(path, json=body).status_code == 200


def test_agent_and_responses_share_one_agent_limit() -> None:
    with client_for(SimConfig(), FakeClock()) as c:
        statuses = [c.post(path, json=AGENT).status_code for path in ("/v1/agent", "/v1/responses") * 2]
    assert statuses == [200, 200, 200, 429]


def test_fourteen_parallel_decisions_over_a_real_server_give_10_and_4x429() -> None:
    app = create_app(SimConfig(), FakeEngine(), clock=FakeClock())
    with run_in_thread(app=app) as sim:
        barrier = threading.Barrier(14)
        responses: list[httpx.Response] = []
        lock = threading.Lock()

        def send() -> None:
            with httpx.Client(base_url=sim.base_url, headers=AUTH, timeout=10) as c:
                barrier.wait()
                response = c.post("/v1/decisions", json=DECISION)
            with lock:
                responses.append(response)

        threads = [threading.Thread(target=send) for _ in range(14)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 10 + [429] * 4
    for r in responses:
        if r.status_code == 429:
            assert_429(r)
    assert simulator_state(app).stats.snapshot()["endpoints"] == {"decisions": {"200": 10, "429": 4}}


def test_zero_limit_means_unlimited() -> None:
    with client_for(UNLIMITED, FakeClock()) as c:
        assert {c.post("/v1/decisions", json=DECISION).status_code for _ in range(60)} == {200}


def test_rate_limit_is_checked_before_validation() -> None:
    """The gateway counts the request before the API looks at the body, as upstream."""
    with client_for(SimConfig(decisions_rps=1), FakeClock()) as c:
        assert c.post("/v1/decisions", json={"bad": 1}).status_code == 400
        assert_429(c.post("/v1/decisions", json=DECISION))


# ------------------------------------------------------------------------------------------------- Faults


@pytest.mark.parametrize("kind", ["500", "502", "503"])
def test_server_error_faults_are_json_errors_with_request_id(kind: str) -> None:
    with client_for(UNLIMITED) as c:
        response = c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": kind})
    assert response.status_code == int(kind)
    assert uuid.UUID(response.headers["x-request-id"])
    assert set(response.json()["error"]) == {"message", "type", "code", "param"}


def test_forced_429_with_custom_retry_after() -> None:
    date = "Wed, 21 Oct 2026 07:28:00 GMT"
    with client_for(UNLIMITED) as c:
        assert_429(c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "429"}))
        forced = c.post("/search", json=SEARCH, headers={"X-Sim-Fault": "429", "X-Sim-Retry-After": date})
    assert_429(forced, retry_after=date)


def test_retry_after_header_also_shapes_real_429s() -> None:
    with client_for(SimConfig(decisions_rps=1), FakeClock()) as c:
        c.post("/v1/decisions", json=DECISION)
        assert_429(c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Retry-After": "2.5"}), "2.5")


def test_504_is_an_html_page_after_the_delay_without_request_id() -> None:
    sleep = SleepLog()
    with client_for(SimConfig(decisions_rps=0, html_504_delay_s=60.0), sleep=sleep) as c:
        response = c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "504_html"})
    assert response.status_code == 504
    assert response.headers["content-type"].startswith("text/html")
    assert "x-request-id" not in response.headers
    assert b"504 Gateway Time-out" in response.content
    assert sleep.pauses == [60.0]


@pytest.mark.parametrize(
    ("path", "body"), [("/v1/decisions", DECISION), ("/search", SEARCH), ("/v1/agent", AGENT)]
)
def test_malformed_and_truncated_json_are_200s_that_do_not_parse(path: str, body: dict[str, Any]) -> None:
    with client_for(UNLIMITED) as c:
        good = c.post(path, json=body)
        malformed = c.post(path, json=body, headers={"X-Sim-Fault": "malformed_json"})
        truncated = c.post(path, json=body, headers={"X-Sim-Fault": "truncated_json"})
    for response in (malformed, truncated):
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert uuid.UUID(response.headers["x-request-id"])
        with pytest.raises(json.JSONDecodeError):
            json.loads(response.content)
    assert 0 < len(truncated.content) < len(good.content)
    if path == "/v1/decisions":  # deterministic body: the truncation is a prefix of the real answer
        assert good.content.startswith(truncated.content)


def test_bad_probability_breaks_each_answer_shape() -> None:
    with client_for(UNLIMITED) as c:
        bad = {"X-Sim-Fault": "bad_probability"}
        noul = c.post("/v1/decisions", json=DECISION, headers=bad).json()
        pick = c.post("/v1/decisions", json=CHOICE, headers=bad).json()
        search = c.post("/search", json=SEARCH, headers=bad).json()
        agent = c.post("/v1/agent", json=AGENT, headers=bad).json()
        clean = c.post("/v1/decisions", json=DECISION).json()
    assert noul["answers"]["is_true"]["noul"] == BAD_PROBABILITY
    assert BAD_PROBABILITY in pick["answers"]["pick"]["probabilities"].values()
    assert "url" not in search["results"][0]
    assert "url" in search["results"][1]
    agent_results = next(item for item in agent["output"] if item["type"] == "search_results")["results"]
    assert "url" not in agent_results[0]
    assert 0 <= clean["answers"]["is_true"]["noul"] <= 1  # the engine's own answer was not mutated


def test_slow_fault_answers_after_slow_s() -> None:
    sleep = SleepLog()
    with client_for(SimConfig(decisions_rps=0, slow_s=35.0), sleep=sleep) as c:
        response = c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "slow"})
    assert response.status_code == 200
    assert sleep.pauses == [35.0]


def test_drop_in_process_is_the_transport_error_httpx_raises_for_a_hang_up() -> None:
    with client_for(UNLIMITED) as c:
        with pytest.raises(httpx.RemoteProtocolError):
            c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "drop"})
        assert c.post("/v1/decisions", json=DECISION).status_code == 200


def test_unknown_fault_header_is_400() -> None:
    with client_for(UNLIMITED) as c:
        response = c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "teapot"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "X-Sim-Fault"


def test_test_headers_are_ignored_when_not_allowed() -> None:
    config = SimConfig(decisions_rps=0, allow_test_headers=False)
    with client_for(config) as c:
        response = c.post(
            "/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "503", "X-Sim-Latency": "x"}
        )
    assert response.status_code == 200


def test_fault_none_suppresses_a_configured_fault() -> None:
    config = SimConfig(decisions_rps=0, fault_rate=1.0, faults=("503",))
    with client_for(config) as c:
        assert c.post("/v1/decisions", json=DECISION).status_code == 503
        assert c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "none"}).status_code == 200


def _parses(response: httpx.Response) -> bool:
    try:
        response.json()
    except json.JSONDecodeError:
        return False
    return True


def test_random_faults_are_deterministic_under_a_seed() -> None:
    def run(seed: int) -> list[tuple[int, bool]]:
        config = SimConfig(
            decisions_rps=0, seed=seed, fault_rate=0.4, faults=("500", "502", "503", "429", "malformed_json")
        )
        with client_for(config) as c:
            responses = [c.post("/v1/decisions", json=DECISION) for _ in range(80)]
        return [(r.status_code, _parses(r)) for r in responses]

    first, again, other = run(7), run(7), run(8)
    assert first == again
    assert first != other
    kinds = set(first)
    assert (200, True) in kinds and (200, False) in kinds  # answers and malformed answers both occur
    assert {503, 502, 500, 429} <= {status for status, _ in first}


def test_fault_rate_one_fires_on_every_request_and_is_counted() -> None:
    app = create_app(SimConfig(decisions_rps=0, fault_rate=1.0, faults=("502",)), FakeEngine())
    with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://s", headers=AUTH) as c:
        assert {c.post("/v1/decisions", json=DECISION).status_code for _ in range(10)} == {502}
    snapshot = simulator_state(app).stats.snapshot()
    assert snapshot["faults"] == {"502": 10}
    assert snapshot["endpoints"] == {"decisions": {"502": 10}}


def test_injector_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        FaultInjector(SimConfig(faults=("500", "418")))
    with pytest.raises(ValueError, match="fault_rate"):
        FaultInjector(SimConfig(fault_rate=1.7))
    with pytest.raises(ValueError, match="latency model"):
        FaultInjector(SimConfig(latency="uniform"))
    with pytest.raises(ValueError):
        create_app(SimConfig(fault_rate=-0.1), FakeEngine())


def test_injector_draws_are_deterministic_and_cover_every_kind() -> None:
    config = SimConfig(seed=3, fault_rate=1.0, faults=FAULT_KINDS)
    a, b = FaultInjector(config), FaultInjector(config)
    seq_a = [a.draw().fault for _ in range(300)]
    seq_b = [b.draw().fault for _ in range(300)]
    assert seq_a == seq_b
    assert set(seq_a) == set(FAULT_KINDS)
    other = FaultInjector(SimConfig(seed=4, fault_rate=1.0, faults=FAULT_KINDS))
    assert [other.draw().fault for _ in range(300)] != seq_a


# ------------------------------------------------------------------------------------------------ Latency


def test_latency_model_shapes() -> None:
    rng = random.Random(1)
    assert LatencyModel("fixed", 0.3, 0.2).sample(rng) == 0.3
    normal = [LatencyModel("normal", 0.05, 0.2).sample(rng) for _ in range(2000)]
    assert min(normal) == 0.0  # clipped, never negative
    lognormal = [LatencyModel("lognormal", 0.3, 0.15).sample(rng) for _ in range(20000)]
    assert min(lognormal) > 0
    assert statistics.fmean(lognormal) == pytest.approx(0.3, rel=0.03)
    assert statistics.stdev(lognormal) == pytest.approx(0.15, rel=0.08)
    with pytest.raises(ValueError):
        LatencyModel("normal", -1.0, 0.0)


def test_configured_latency_and_per_request_override() -> None:
    sleep = SleepLog()
    with client_for(SimConfig(decisions_rps=0, latency_s=0.3), sleep=sleep) as c:
        c.post("/v1/decisions", json=DECISION)
        c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Latency": "0.2"})
        c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Latency": "0"})
        bad = c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Latency": "-1"})
    assert sleep.pauses == [0.3, 0.2]
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "X-Sim-Latency"


def test_random_latency_is_deterministic_under_a_seed() -> None:
    def run() -> list[float]:
        sleep = SleepLog()
        config = SimConfig(decisions_rps=0, latency="lognormal", latency_s=0.3, latency_sd=0.1, seed=5)
        with client_for(config, sleep=sleep) as c:
            for _ in range(10):
                c.post("/v1/decisions", json=DECISION)
        return sleep.pauses

    first = run()
    assert first == run()
    assert len(set(first)) == 10


def test_no_latency_by_default() -> None:
    sleep = SleepLog()
    with client_for(UNLIMITED, sleep=sleep) as c:
        c.post("/v1/decisions", json=DECISION)
    assert sleep.pauses == []


# ------------------------------------------------------------------------------------------- Real server


@pytest.fixture
def real_server() -> Iterator[Any]:
    with run_in_thread(SimConfig(decisions_rps=0, slow_s=30.0), engine=FakeEngine()) as sim:
        yield sim


def test_dropped_connection_is_a_transport_error_over_the_network(real_server: Any) -> None:
    with httpx.Client(base_url=real_server.base_url, headers=AUTH, timeout=5) as c:
        with pytest.raises(httpx.TransportError):
            c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "drop"})
        assert c.post("/v1/decisions", json=DECISION).status_code == 200  # the server keeps serving
        stats = c.get("/stats").json()
    assert stats["endpoints"]["decisions"] == {"200": 1, "dropped": 1}


def test_slow_response_outlasts_a_short_client_timeout(real_server: Any) -> None:
    with httpx.Client(base_url=real_server.base_url, headers=AUTH, timeout=0.3) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "slow"})
        assert c.post("/v1/decisions", json=DECISION).status_code == 200


def test_stop_releases_a_stalled_handler_and_closes_the_port() -> None:
    sim = run_in_thread(SimConfig(decisions_rps=0, slow_s=600.0), engine=FakeEngine())
    with (
        httpx.Client(base_url=sim.base_url, headers=AUTH, timeout=0.3) as c,
        pytest.raises(httpx.ReadTimeout),
    ):
        c.post("/v1/decisions", json=DECISION, headers={"X-Sim-Fault": "slow"})
    sim.stop()
    assert not sim._thread.is_alive()
    with httpx.Client(base_url=sim.base_url, timeout=2) as c, pytest.raises(httpx.ConnectError):
        c.get("/stats")


def test_413_over_the_network(real_server: Any) -> None:
    with httpx.Client(base_url=real_server.base_url, headers=AUTH, timeout=30) as c:
        response = c.post("/v1/decisions", content=b" " * (32 * 1024 * 1024 + 1))
    assert response.status_code == 413
    assert uuid.UUID(response.headers["x-request-id"])


# -------------------------------------------------------------------------------------------------- Stats


def test_stats_counters_are_thread_safe() -> None:
    stats = Stats()

    def bump() -> None:
        for _ in range(500):
            stats.record("decisions", 200)
            stats.record_fault("503")

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snapshot = stats.snapshot()
    assert snapshot == {"total": 4000, "endpoints": {"decisions": {"200": 4000}}, "faults": {"503": 4000}}
    stats.reset()
    assert stats.snapshot() == {"total": 0, "endpoints": {}, "faults": {}}


# ------------------------------------------------------------------------------------------------ The CLI


def test_cli_options_become_the_sim_config(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_serve(config: SimConfig, **kwargs: Any) -> None:
        seen.update(config=config, **kwargs)
        kwargs["ready"](f"http://{kwargs['host']}:{kwargs['port']}")

    monkeypatch.setattr(simulator_cmd, "serve", fake_serve)
    args = [
        "simulator", "--port", "8711", "--decisions-rps", "5", "--search-rps", "0", "--agent-rps", "1.5",
        "--latency", "0.3", "--latency-model", "lognormal", "--latency-sd", "0.1", "--fault-rate", "0.05",
        "--faults", "500,drop", "--seed", "9", "--knowledge-cutoff", "2025-03-01",
        "--api-key", "a", "--api-key", "b", "--threads", "8",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert (config.decisions_rps, config.search_rps, config.agent_rps) == (5.0, 0.0, 1.5)
    assert (config.latency, config.latency_s, config.latency_sd) == ("lognormal", 0.3, 0.1)
    assert (config.fault_rate, config.faults, config.seed) == (0.05, ("500", "drop"), 9)
    assert config.knowledge_cutoff.isoformat() == "2025-03-01"
    assert config.api_keys == frozenset({"a", "b"})
    assert (seen["host"], seen["port"], seen["threads"]) == ("127.0.0.1", 8711, 8)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "simulator" in lines[0] and "not a fact checker" in lines[0]
    assert lines[0].endswith("http://127.0.0.1:8711")


def test_cli_rejects_unknown_fault_kinds() -> None:
    result = CliRunner().invoke(main, ["simulator", "--faults", "500,teapot"])
    assert result.exit_code == 2
    assert "teapot" in result.output
