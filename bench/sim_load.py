"""Load test of the simulator over loopback: does the rate limit hold, and how fast is the HTTP layer?

1. Limited: 2,000 Decisions requests offered open-loop at 200/s to a simulator limited to 10/s. Prints the
   offered rate, 200s per second, the 429 count, and accepted rate / configured limit (should be <= 1.0
   and close to it).
2. Unlimited: a closed loop of concurrent keep-alive connections against a simulator with no limit and no
   latency, for a bounded count and time. Prints the sustained requests per second.

Each simulator runs in its own process (this script with --serve), so the load generator does not share
its GIL. Loopback only; every loop is bounded in count and time. Run:
    .venv/bin/python bench/sim_load.py [--engine fake|real]
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

HOST = "127.0.0.1"
CLAIMS = (
    "The Eiffel Tower is in Paris.",
    "The Linux kernel was first released in 1991.",
    "Water boils at 100 degrees Celsius at sea level.",
    "Mount Everest is the highest mountain above sea level.",
)


def decision_body(n: int) -> bytes:
    """Distinct claims, so the engine's per-sentence cache does not flatter the unlimited figure."""
    claim = f"{CLAIMS[n % len(CLAIMS)]} (request {n})"
    questions = {"is_true": {"type": "noul", "instructions": "Is the claim true?"}}
    return json.dumps({"model": "pplx-decider-v1.2", "state": claim, "questions": questions}).encode()


HEADERS = {"Authorization": "Bearer bench-key", "Content-Type": "application/json"}
LIMITED_REQUESTS = 2000
OFFERED_RPS = 200.0
DECISIONS_LIMIT = 10.0
SENDERS = 32
UNLIMITED_MAX_REQUESTS = 20_000
UNLIMITED_MAX_SECONDS = 8.0
UNLIMITED_CONNECTIONS = 16
START_TIMEOUT_S = 60.0


@dataclass
class Sample:
    sent: float
    done: float
    status: int
    retry_after: str | None
    request_id: str | None


class Sender:
    """One keep-alive connection; reconnects if the server closed it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection(HOST, port, timeout=10)

    def post(self, n: int, path: str = "/v1/decisions") -> Sample:
        body = decision_body(n)
        sent = time.perf_counter()
        for attempt in (1, 2):
            try:
                self.conn.request("POST", path, body=body, headers=HEADERS)
                response = self.conn.getresponse()
                response.read()
                break
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
                if attempt == 2:
                    raise
        return Sample(
            sent,
            time.perf_counter(),
            response.status,
            response.getheader("Retry-After"),
            response.getheader("x-request-id"),
        )

    def close(self) -> None:
        self.conn.close()


def start_server(engine: str, decisions_rps: float) -> tuple[subprocess.Popen[str], int]:
    command = [sys.executable, __file__, "--serve", "--engine", engine, "--decisions-rps", str(decisions_rps)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    line = process.stdout.readline()
    if not line.startswith("http://") or time.monotonic() > deadline:
        process.kill()
        raise RuntimeError(f"simulator did not start: {line!r}")
    return process, int(urlsplit(line.strip()).port or 0)


def stop_server(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def fetch_stats(port: int) -> dict[str, object]:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    conn.request("GET", "/stats")
    stats: dict[str, object] = json.loads(conn.getresponse().read())
    conn.close()
    return stats


def limited_run(port: int) -> None:
    samples: list[Sample] = []
    lock = threading.Lock()
    next_index = [0]
    start = time.perf_counter() + 0.2

    def worker() -> None:
        sender = Sender(port)
        try:
            while True:
                with lock:
                    index = next_index[0]
                    next_index[0] += 1
                if index >= LIMITED_REQUESTS:
                    return
                delay = start + index / OFFERED_RPS - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                sample = sender.post(index)
                with lock:
                    samples.append(sample)
        finally:
            sender.close()

    threads = [threading.Thread(target=worker) for _ in range(SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    sends = sorted(s.sent for s in samples)
    span = sends[-1] - sends[0]
    offered = (len(samples) - 1) / span
    ok = [s for s in samples if s.status == 200]
    limited = [s for s in samples if s.status == 429]
    other = len(samples) - len(ok) - len(limited)
    seconds = int(LIMITED_REQUESTS / OFFERED_RPS)
    per_second = [0] * seconds
    for s in ok:
        bucket = int(s.sent - start)
        if 0 <= bucket < seconds:
            per_second[bucket] += 1
    accepted_rate = len(ok) / max(span, LIMITED_REQUESTS / OFFERED_RPS)
    well_formed = all(s.retry_after == "1" and s.request_id for s in limited)
    print(
        f"limited run: {len(samples)} Decisions requests, open loop at {OFFERED_RPS:.0f}/s, limit "
        f"{DECISIONS_LIMIT:.0f}/s per key"
    )
    print(f"  offered rate            {offered:7.1f} req/s over {span:.2f} s")
    print(f"  answered 200            {len(ok):7d}   ({accepted_rate:.2f}/s); per second {per_second}")
    print(
        f"  answered 429            {len(limited):7d}   (all with Retry-After 1, x-request-id: {well_formed})"
    )
    print(f"  other statuses          {other:7d}")
    print(f"  accepted rate / limit   {accepted_rate / DECISIONS_LIMIT:7.3f}")
    print(f"  server /stats           {fetch_stats(port)['endpoints']}")


def unlimited_run(port: int) -> None:
    samples: list[Sample] = []
    lock = threading.Lock()
    count = [0]
    deadline = time.perf_counter() + UNLIMITED_MAX_SECONDS

    def worker() -> None:
        sender = Sender(port)
        local: list[Sample] = []
        try:
            while time.perf_counter() < deadline:
                with lock:
                    if count[0] >= UNLIMITED_MAX_REQUESTS:
                        break
                    count[0] += 1
                    n = count[0]
                local.append(sender.post(n))
        finally:
            sender.close()
            with lock:
                samples.extend(local)

    # Warm up connections and code paths so the figure is the steady state.
    warm = Sender(port)
    for n in range(50):
        warm.post(-n)
    warm.close()
    threads = [threading.Thread(target=worker) for _ in range(UNLIMITED_CONNECTIONS)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    ok = sum(1 for s in samples if s.status == 200)
    latencies = sorted((s.done - s.sent) * 1000 for s in samples)
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(
        f"unlimited run: closed loop, {UNLIMITED_CONNECTIONS} keep-alive connections, "
        f"<= {UNLIMITED_MAX_REQUESTS} requests / {UNLIMITED_MAX_SECONDS:.0f} s, no latency, no limit"
    )
    print(
        f"  sustained               {len(samples) / elapsed:7.1f} req/s ({ok} x 200 of {len(samples)} "
        f"in {elapsed:.2f} s); latency p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )


def serve_forever(engine_name: str, decisions_rps: float) -> None:
    from simulator.config import SimConfig  # noqa: PLC0415
    from simulator.server import serve  # noqa: PLC0415

    engine = None
    if engine_name == "fake":
        from simulator.fake_engine import FakeEngine  # noqa: PLC0415

        engine = FakeEngine()
    config = SimConfig(decisions_rps=decisions_rps, search_rps=0, agent_rps=0)
    serve(config, host=HOST, port=0, engine=engine, ready=lambda url: print(url, flush=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    has_engine = importlib.util.find_spec("simulator.engine") is not None
    parser.add_argument("--engine", choices=("fake", "real"), default="real" if has_engine else "fake")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--decisions-rps", type=float, default=DECISIONS_LIMIT, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_forever(args.engine, args.decisions_rps)
        return
    print(f"engine: {args.engine}" + ("" if has_engine else " (simulator/engine.py not present yet)"))
    for decisions_rps, run in ((DECISIONS_LIMIT, limited_run), (0.0, unlimited_run)):
        process, port = start_server(args.engine, decisions_rps)
        try:
            run(port)
        finally:
            stop_server(process)


if __name__ == "__main__":
    main()
