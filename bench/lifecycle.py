"""Cancel and purge of a large job against a server stack (gunicorn, a celery worker, the simulator).

Three figures, each against its goal:

1. a cancel while `validating`: a 1,000,000-claim NDJSON body is answered 202 `validating`; once the
   worker's build holds the job (its advisory lock, seen in pg_locks), `POST /v1/jobs/{id}/cancel` is timed
   (goal ≤ 2 s; issue 23 measured 68.4 s), then the time until the job is `cancelled` (the build rolls back,
   `finish_cancel` deletes the staged rows in batches);
2. a cancel while running: the same body again, built and dispatching to the simulator; the cancel is
   timed once items are done (goal ≤ 2 s), then the time until `cancelled` and its counts;
3. a purge: `DELETE /v1/jobs/{id}` of that cancelled million-item job is timed, and a 3-claim job is
   submitted right after, timed to its start (`started_at` set: goal ≤ 1 s) and to `completed` while the
   purge runs, against the same small job before it (the ratio is the purge's cost to others), then the
   time until the job's rows are gone, and the tenant's `/v1/usage` totals with the small job done while
   the purge runs and again once it is over (they must be equal: the calls are rolled up before they go).
   From the DELETE until then another client polls the small job's
   status (`GET /v1/jobs/{id}`, every 50 ms): its p50 and p99 against the goal (p99 ≤ 50 ms), beside the
   same poll before the purge and after it (as long again: on a shared machine the other load sets much
   of the tail, and the poll after the purge tells it apart from the purge's).

    FACTGATE_BENCH_REDIS_URL=redis://127.0.0.1:6392/12 .venv/bin/python bench/lifecycle.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database
from jobs.bulk_load import BUILD_LOCK_NS
from jobs.tenancy import create_token
from models import make_engine, make_session_factory, session_scope

GOAL_CANCEL_S = 2.0
GOAL_START_S = 1.0
GOAL_POLL_P99_MS = 50.0
SMALL = [
    {"id": "s1", "claim": "Python 3.12 was released in October 2023."},
    {"id": "s2", "claim": "Git was created by Linus Torvalds."},
    {"id": "s3", "claim": "Rust 1.0 was released in May 2015."},
]


def body(rows: int) -> bytes:
    return "".join(
        json.dumps({"id": f"row-{i:07d}", "claim": f"Claim {i}: the Eiffel Tower is about 330 m tall."})
        + "\n"
        for i in range(rows)
    ).encode()


def wait(what: str, check: Any, timeout: float = 1800.0, every: float = 0.2) -> float:
    """Poll `check()` until true; returns the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if check():
            return time.monotonic() - t0
        time.sleep(every)
    raise TimeoutError(f"{what}: not after {timeout:.0f} s")


def percentiles(ms: list[float]) -> str:
    if not ms:
        return "no polls"
    ms = sorted(ms)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"{len(ms)} polls, p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms"


class Poller:
    """A client of its own polling one job's status every `every` seconds until stopped: each poll's time."""

    def __init__(self, web: str, auth: dict[str, str], every: float = 0.05) -> None:
        self.web, self.auth, self.every = web, auth, every
        self.job_id: str | None = None
        self.ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.web, headers=self.auth, timeout=60) as client:
            while not self._stop.is_set():
                if self.job_id is not None:
                    t0 = time.monotonic()
                    r = client.get(f"/v1/jobs/{self.job_id}")
                    if r.status_code == 200:
                        self.ms.append((time.monotonic() - t0) * 1000)
                self._stop.wait(self.every)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join()
        return self.ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    flush_redis()
    out: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        out.append(line)

    with fresh_database() as db_url:
        engine = make_engine(db_url)
        with session_scope(make_session_factory(engine)) as s:
            token = create_token(s, "bench").token
        procs = Procs(
            env={
                "DATABASE_URL": db_url,
                "REDIS_URL": REDIS_URL,
                "FACTGATE_SECRET_KEY": "x",
                "FACTGATE_INTAKE_DEFER_ROWS": str(min(50_000, max(1, args.rows // 2))),
                "FACTGATE_DECISIONS_RPS": "200",
                "FACTGATE_LOG_LEVEL": "INFO",
            }
        )
        try:
            sim = procs.start_simulator(free_port(), "--decisions-rps", "0")
            procs.env["PERPLEXITY_API_BASE"] = sim
            procs.env["PERPLEXITY_API_KEY"] = "pplx-bench"
            web = procs.start_web(free_port(), workers=1)
            procs.start_worker(concurrency=8, loglevel="info")
            auth = {"Authorization": f"Bearer {token}"}
            data = body(args.rows)
            with httpx.Client(base_url=web, headers=auth, timeout=1800) as client:

                def job(jid: str) -> dict[str, Any]:
                    got: dict[str, Any] = client.get(f"/v1/jobs/{jid}").json()
                    return got

                def small_job(poller: Poller | None = None) -> tuple[float, float]:
                    """POST a 3-claim job: (seconds from its creation to its start, by the job's own
                    timestamps; seconds from the POST to `completed`)."""
                    t0 = time.monotonic()
                    r = client.post("/v1/jobs", json={"kind": "claims", "items": SMALL})
                    jid = r.json()["id"]
                    if poller is not None:
                        poller.job_id = jid
                    stamps: dict[str, Any] = {}

                    def started() -> bool:
                        stamps.update(job(jid)["timestamps"])
                        return stamps.get("started_at") is not None

                    wait("small job start", started, 300, 0.02)
                    start = datetime.fromisoformat(stamps["started_at"]) - datetime.fromisoformat(
                        stamps["created_at"]
                    )
                    wait("small job", lambda: job(jid)["status"] == "completed", 300)
                    return start.total_seconds(), time.monotonic() - t0

                def submit() -> str:
                    t0 = time.monotonic()
                    r = client.post(
                        "/v1/jobs?kind=claims&mode=grounded",
                        content=data,
                        headers={"Content-Type": "application/x-ndjson"},
                    )
                    assert r.status_code == 202, r.text[:300]
                    say(
                        f"  POST {args.rows:,} claims → 202 {r.json()['status']} in {time.monotonic() - t0:.1f} s"
                    )
                    jid: str = r.json()["id"]
                    return jid

                def building(jid: str) -> bool:
                    with engine.connect() as conn:
                        return bool(
                            conn.scalar(
                                text(
                                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                    "AND classid = :ns AND objid = hashtext(:j)::oid"
                                ),
                                {"ns": BUILD_LOCK_NS, "j": jid},
                            )
                        )

                def cancel(jid: str) -> float:
                    t0 = time.monotonic()
                    r = client.post(f"/v1/jobs/{jid}/cancel")
                    took = time.monotonic() - t0
                    assert r.status_code == 200, r.text[:300]
                    return took

                quiet = Poller(web, auth).start()
                base_start, baseline = small_job(quiet)
                time.sleep(10)  # enough polls for a p99
                quiet_ms = quiet.stop()
                say(f"small 3-claim job alone: started in {base_start:.2f} s, {baseline:.2f} s to completed; "
                    f"status poll {percentiles(quiet_ms)}")  # fmt: skip

                say(f"1. cancel while validating ({args.rows:,} rows, load {psutil.getloadavg()[0]:.1f})")
                jid = submit()
                seen = wait("build start", lambda: building(jid) or job(jid)["status"] != "validating", 300)
                in_build = building(jid)
                took = cancel(jid)
                say(f"  cancel answered in {took:.3f} s ({'during the build' if in_build else 'before the build'},"
                    f" {seen:.1f} s after the 202); ratio to goal ({GOAL_CANCEL_S:.0f} s) {took / GOAL_CANCEL_S:.3f}")  # fmt: skip
                ended = wait("cancelled", lambda: job(jid)["status"] == "cancelled")
                counts = job(jid)["request_counts"]
                say(f"  cancelled {ended:.1f} s later; items {counts['total']:,} (none built)")

                say(f"2. cancel while running ({args.rows:,} rows × grounded)")
                jid = submit()
                built = wait("running", lambda: job(jid)["request_counts"]["completed"] >= 50)
                took = cancel(jid)
                say(f"  running {built:.1f} s after the 202 ({job(jid)['request_counts']['completed']} done); "
                    f"cancel answered in {took:.3f} s; ratio to goal ({GOAL_CANCEL_S:.0f} s) "
                    f"{took / GOAL_CANCEL_S:.3f}")  # fmt: skip
                ended = wait("cancelled", lambda: job(jid)["status"] == "cancelled")
                c = job(jid)["request_counts"]
                say(f"  cancelled {ended:.1f} s later: {c['completed']:,} completed, {c['skipped']:,} skipped, "
                    f"{c['failed']:,} failed of {c['total']:,}")  # fmt: skip

                say("3. purge of that job while a small job starts")

                def usage() -> dict[str, Any]:
                    """The tenant's /v1/usage (totals, and per day by endpoint and model): what billing reads."""
                    body: dict[str, Any] = client.get("/v1/usage").json()
                    return {"totals": body["totals"], "daily": body["daily"]}

                def brief(u: dict[str, Any]) -> str:
                    t = u["totals"]
                    return (f"{t['requests']:,} requests, {t['searches']:,} searches, "
                            f"{t['input_tokens']:,}+{t['output_tokens']:,} tokens, ${t['cost_usd']}")  # fmt: skip

                usage_before = usage()
                poller = Poller(web, auth).start()
                t0 = time.monotonic()
                r = client.delete(f"/v1/jobs/{jid}")
                took = time.monotonic() - t0
                assert r.status_code == 204, r.text[:300]
                say(f"  DELETE answered in {took:.3f} s; GET now {client.get(f'/v1/jobs/{jid}').status_code}")
                start, during = small_job(poller)

                def gone() -> bool:
                    with engine.connect() as conn:
                        return not conn.scalar(text("SELECT count(*) FROM jobs WHERE id = :j"), {"j": jid})

                purging = not gone()
                say(f"  small job during the purge{'' if purging else ' (the purge had already ended)'}: "
                    f"started in {start:.2f} s, ratio to goal ({GOAL_START_S:.0f} s) {start / GOAL_START_S:.2f}; "
                    f"completed in {during:.2f} s (alone {baseline:.2f} s, ratio {during / baseline:.2f})")  # fmt: skip
                # Read once the small job is done and while the purge still runs: it counts the small job's
                # calls too, so the figure after the purge must equal it exactly.
                usage_during = usage()
                wait("purged", gone)
                purged_s = time.monotonic() - t0
                usage_after = usage()
                polls = poller.stop()
                # The same poll for as long again once the purge is over: what the machine's other load
                # costs, apart from the purge's.
                after = Poller(web, auth)
                after.job_id = poller.job_id
                after.start()
                time.sleep(max(10.0, purged_s))
                after_ms = after.stop()
                p99 = sorted(polls)[min(len(polls) - 1, int(len(polls) * 0.99))] if polls else float("nan")
                say(f"  rows purged {purged_s:.1f} s after the DELETE (load "
                    f"{psutil.getloadavg()[0]:.1f}); status poll of the small job from the DELETE until then: "
                    f"{percentiles(polls)}, ratio to goal (p99 {GOAL_POLL_P99_MS:.0f} ms) "
                    f"{p99 / GOAL_POLL_P99_MS:.2f}")  # fmt: skip
                say(f"  status poll of the small job after the purge, as long again: {percentiles(after_ms)} "
                    f"(load {psutil.getloadavg()[0]:.1f})")  # fmt: skip
                say(f"  /v1/usage before the DELETE: {brief(usage_before)}")
                say(f"  /v1/usage with the small job done, purge running: {brief(usage_during)}")
                say(f"  /v1/usage after the purge: {brief(usage_after)}; totals and every day's figures by "
                    f"endpoint and model {'equal' if usage_after == usage_during else 'DIFFERENT'} (goal: equal)")  # fmt: skip
        finally:
            procs.stop()
            engine.dispose()
    print("\nsummary\n" + "\n".join(out))


if __name__ == "__main__":
    main()
