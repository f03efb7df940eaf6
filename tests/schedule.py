"""The order in which `make test` hands test modules to its xdist workers.

Under `--dist loadfile --no-loadscope-reorder` a worker runs one whole module at a time and takes the next
module in collection order when it is nearly done. Modules are of two sorts here:

- **waiting**: `slow` modules that are not e2e (jobs through real `celery worker` processes, a rate-limited
  simulator, CLIs and servers in subprocesses). They spend most of their wall time waiting on a clock and use
  little CPU in the test process.
- **working**: everything else (e2e modules drive Chromium; API, page and unit tests are CPU-bound).

Handed out in collection order, the working e2e modules ran first on all four workers (both cores busy), then
the waiting modules ran together (up to 70 % of the CPU idle for a minute), then the unit tests. Mixed so that
about half the workers wait while the rest work, the waiting fills time that was idle.

`interleave` builds that order by replaying the scheduler with estimates of each module's wall time (the long
ones measured, the rest per test, on the 2-core CI machine): whichever simulated worker is free next takes the
longest waiting module left while fewer than half the workers wait, and otherwise the longest working module
left, so that no long module starts near the end. The estimates only steer the mix; a wrong one costs
time, never a test.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Sort = Literal["waiting", "working"]

# Seconds of wall time per test, by kind of module, from a timed run of the whole suite on four workers.
SECONDS_PER_TEST = {"waiting": 4.2, "e2e": 6.3, "integration": 0.21, "unit": 0.04}
# The long modules' own wall times (setup, calls and teardown of their tests, from pytest's JUnit report)
# in a run of the whole suite on four workers on the 2-core CI machine (2026-12-02, 1976 tests in 181 s),
# where a per-test figure would be far off: a module of two tests that each run a job at 4 requests/s takes
# 26 s, and the demo's one test 26 s.
MEASURED_S = {
    "tests/integration/test_queue_claims.py": 55.7,
    "tests/integration/test_queue_faults.py": 49.6,
    "tests/integration/test_cli_embedded.py": 40.9,
    "tests/integration/test_queue_fairness.py": 39.9,
    "tests/e2e/test_accessibility.py": 37.1,
    "tests/e2e/test_browser.py": 32.1,
    "tests/integration/test_demo.py": 26.0,
    "tests/integration/test_queue_tenants.py": 26.0,
    "tests/e2e/test_browser_reports.py": 25.0,
    "tests/e2e/test_browser_upload.py": 20.2,
    "tests/integration/test_queue_answer.py": 18.2,
    "tests/integration/test_redis_sentinel.py": 16.5,
    "tests/integration/test_webhooks_delivery.py": 15.1,
    "tests/integration/test_cli_server.py": 14.5,
    "tests/integration/test_api_streaming.py": 13.7,
    "tests/integration/test_dispatch_hosts.py": 11.7,
    "tests/integration/test_honcho.py": 11.6,
    "tests/unit/test_fairness.py": 11.3,
    "tests/e2e/test_browser_sessions.py": 9.2,
    "tests/integration/test_api_intake.py": 9.0,
    "tests/integration/test_embedded_worker.py": 8.6,
    "tests/integration/test_api_contract.py": 7.9,
    "tests/integration/test_limiter_redis.py": 7.9,
    "tests/integration/test_queue_validating.py": 7.5,
    "tests/integration/test_queue_citations.py": 7.2,
    "tests/integration/test_queue_quote.py": 6.6,
    "tests/integration/test_pages.py": 6.6,
    "tests/integration/test_api_jobs.py": 6.4,
    "tests/integration/test_dispatcher.py": 5.7,
    "tests/integration/test_page_sessions.py": 5.1,
    "tests/unit/test_limiter.py": 4.6,
    "tests/integration/test_pages_new_job.py": 4.1,
    "tests/integration/test_api_openapi_responses.py": 3.3,
    "tests/integration/test_migrations.py": 3.2,
    "tests/integration/test_pages_reports.py": 3.2,
}


@dataclass(frozen=True)
class Module:
    path: str
    tests: int
    slow: bool
    e2e: bool

    @property
    def sort(self) -> Sort:
        return "waiting" if self.slow and not self.e2e else "working"

    @property
    def estimate(self) -> float:
        if self.path in MEASURED_S:
            return MEASURED_S[self.path]
        if self.sort == "waiting":
            per_test = SECONDS_PER_TEST["waiting"]
        elif self.e2e:
            per_test = SECONDS_PER_TEST["e2e"]
        elif "/unit/" in f"/{self.path}":
            per_test = SECONDS_PER_TEST["unit"]
        else:
            per_test = SECONDS_PER_TEST["integration"]
        return per_test * self.tests


def interleave(modules: Sequence[Module], workers: int) -> list[str]:
    """The module paths in the order to hand them out to `workers` workers."""
    waiting = sorted((m for m in modules if m.sort == "waiting"), key=lambda m: -m.estimate)
    # The longest first (the e2e modules among them), so that no long module starts near the end.
    working = sorted((m for m in modules if m.sort == "working"), key=lambda m: -m.estimate)
    order: list[str] = []
    # (time the worker is free, worker number, the sort it runs until then)
    free: list[tuple[float, int, Sort | None]] = [(0.0, n, None) for n in range(max(1, workers))]
    heapq.heapify(free)
    while waiting or working:
        now, n, _ = heapq.heappop(free)
        busy_waiting = sum(1 for end, _, sort in free if sort == "waiting" and end > now)
        take_waiting = bool(waiting) and (busy_waiting < max(1, workers // 2) or not working)
        module = waiting.pop(0) if take_waiting else working.pop(0)
        order.append(module.path)
        heapq.heappush(free, (now + module.estimate, n, module.sort))
    return order


def positions(order: Sequence[str]) -> Mapping[str, int]:
    return {path: n for n, path in enumerate(order)}
