"""The bundled simulator, served as `factgate simulator` serves it, that also records when each request
reached its rate limiter.

Why: whether we stay under the upstream's limit is decided where requests arrive, not where our limiter
granted them. The simulator's sliding window (10 per any 1 s) refuses the 11th request inside one second;
the arrival times it judged by show how close a run came to that (the closest 11 consecutive arrivals)
and whether the pipeline kept the limiter fed (gaps between arrivals). The clock is the simulator's own
(`time.monotonic`, system-wide on Linux, so a benchmark on the same machine can relate it to its own).

    python -m bench._sim_recorder --port 8700 --decisions-rps 10 --latency 0.3 [--pack-drift 0.01]

`GET /bench/arrivals?key=KEY&endpoint=decisions[&reset=1]` answers `{"arrivals": [[t, accepted], ...]}`
for that bearer key in arrival order; `reset=1` forgets what it returned.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Mapping

from flask import Response, request

from simulator.app import create_app, simulator_state
from simulator.config import SimConfig
from simulator.limits import RateLimiter
from simulator.server import run_in_thread

# How long a thread that holds the GIL may keep it once another asks (`stand_apart`).
SWITCH_INTERVAL_S = 0.0005


class RecordingLimiter(RateLimiter):
    """The simulator's limiter, keeping (time it judged by, key, endpoint, accepted) per request."""

    def __init__(self, limits: Mapping[str, float]) -> None:
        self._local = threading.local()
        self._log_lock = threading.Lock()
        self.log: list[tuple[float, str, str, bool]] = []
        super().__init__(limits, self._clock)

    def _clock(self) -> float:
        now = time.monotonic()
        self._local.now = now
        return now

    def try_acquire(self, api_key: str, endpoint: str) -> bool:
        self._local.now = None
        accepted = super().try_acquire(api_key, endpoint)
        at = self._local.now if self._local.now is not None else time.monotonic()
        with self._log_lock:
            self.log.append((at, api_key, endpoint, accepted))
        return accepted

    def take(self, api_key: str, endpoint: str, reset: bool) -> list[tuple[float, bool]]:
        with self._log_lock:
            mine = [(t, ok) for t, k, e, ok in self.log if k == api_key and e == endpoint]
            if reset:
                self.log = [row for row in self.log if not (row[1] == api_key and row[2] == endpoint)]
        return sorted(mine)


def stand_apart() -> str:
    """Run this process's threads ahead of everything else on the host (round-robin real-time priority),
    and hand its GIL over promptly, so that it stands in for an upstream on machines of its own; returns
    what it got.

    Why: the real API is not slowed down by our host, nor by our stand-in's interpreter. A simulator
    sharing a busy 2-core host with the stack (and with `--cpu-hog`) would stamp a request as arrived only
    when its own threads next got a core — measured at up to 150 ms late under two CPU hogs — and that
    delay, not ours, would decide the window. At real-time priority it gets a core as soon as a request
    comes in. It uses ~2 ms of CPU per request, and the kernel caps real-time threads at 95 % of each
    second anyway. Threads started after this call inherit the policy. Without the privilege (not root)
    it runs as before and says so.

    The request then still waits for the GIL twice (waitress' loop thread reads it, a handler thread
    judges it), and a thread that wants the GIL asks its holder to drop it only after the switch
    interval, 5 ms by default: three or four such hand-overs in a row stamped one request 28 ms after it
    was in the simulator's socket, more than the limiter's 10 ms arrival margin, and the window it closed
    drew a 429 (`at_limit.py --cpu-hog 2`, one run in four). Matched against the workers' own send times,
    the stamp came up to 9.4 ms after the request was in the socket at 5 ms, and up to 2.3 ms at 0.5 ms.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    interval = f"GIL switch interval {SWITCH_INTERVAL_S * 1000:g} ms"
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(10))
    except (AttributeError, PermissionError, OSError) as exc:
        return (
            f"normal priority ({type(exc).__name__}: its own scheduling delay counts as arrival jitter), "
            f"{interval}"
        )
    return f"real-time priority (SCHED_RR 10), {interval}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--decisions-rps", type=float, default=SimConfig().decisions_rps)
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument(
        "--latency-per-question-ms",
        type=float,
        default=SimConfig().latency_per_question_s * 1000,
        help="added per Decisions question beyond the first when --latency is above 0",
    )
    ap.add_argument("--tokens-per-question", type=int, default=SimConfig().tokens_per_question)
    ap.add_argument("--pack-drift", type=float, default=0.0, help="test knob (factgate simulator --help)")
    ap.add_argument(
        "--same-priority", action="store_true", help="share the host's CPU like any process (no real-time)"
    )
    args = ap.parse_args()
    priority = "normal priority (--same-priority)" if args.same_priority else stand_apart()

    config = SimConfig(
        decisions_rps=args.decisions_rps,
        latency_s=args.latency,
        latency_per_question_s=args.latency_per_question_ms / 1000,
        tokens_per_question=args.tokens_per_question,
        pack_drift=args.pack_drift,
    )
    app = create_app(config)
    state = simulator_state(app)
    recorder = RecordingLimiter(
        {"decisions": config.decisions_rps, "search": config.search_rps, "agent": config.agent_rps}
    )
    state.limiter = recorder

    def arrivals() -> Response:
        rows = recorder.take(
            request.args.get("key", ""),
            request.args.get("endpoint", "decisions"),
            request.args.get("reset") == "1",
        )
        return Response(json.dumps({"arrivals": rows}), 200, content_type="application/json")

    app.add_url_rule("/bench/arrivals", endpoint="bench_arrivals", view_func=arrivals, methods=["GET"])
    running = run_in_thread(config, args.port, app=app)
    print(f"recording simulator serving {running.base_url} at {priority}", flush=True)
    threading.Event().wait()  # until the benchmark terminates the process


if __name__ == "__main__":
    main()
