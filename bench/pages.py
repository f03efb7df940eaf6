"""Pages and lists at scale: a 100,000-item claims job and a 500-job tenant, read through gunicorn.

Builds the data directly in Postgres (bulk INSERT … SELECT from generate_series, not through the workers):
one completed `claims` job of 50,000 claims in both modes (100,000 items, each with a realistic output:
p, request ids, usage, three sources), one upstream call row per item, and 499 more jobs (small
completed ones, and 10 live ones with pending and running items so the lists count live jobs too). Every
completed job is finalized by the real jobs.finalize.maybe_finalize, so the stored summary and counts
are what production stores. Then VACUUM ANALYZE (what autovacuum does after a bulk load; index-only scans
need the visibility map).

The web app runs as `factgate serve` runs it on the server stack: gunicorn, gthread workers (1 worker,
4 threads here), Postgres, Redis. Each request is timed from the client (loopback); the figure is the
median of --samples requests after two warm-ups, with its ratio to the 300 ms goal.

    FACTGATE_BENCH_REDIS_URL=redis://127.0.0.1:6379/12 .venv/bin/python bench/pages.py [--claims 50000]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import REDIS_URL, Procs, flush_redis, free_port, fresh_database
from jobs.finalize import maybe_finalize
from jobs.tenancy import create_token
from models import make_engine, make_session_factory, session_scope

GOAL_MS = 300.0
PAGE_SIZE = 100  # web/pages_claims.py

OPTIONS = '{"mode": "both", "model": "pplx-decider-v1.2", "supported_min": 0.8, "contradicted_max": 0.2}'
# One claim is two items: ungrounded at 2k, grounded at 2k + 1 (as intake stores them).
ITEMS_SQL = """
INSERT INTO items (job_id, stage, endpoint, position, custom_id, mode, input, output, status, attempts,
                   tries, dedupe_key, finished_at)
SELECT :job, 'claim', 'decisions', g,
       'claim-' || lpad((g / 2)::text, 6, '0'),
       CASE WHEN g % 2 = 0 THEN 'ungrounded' ELSE 'grounded' END,
       jsonb_build_object('claim', 'Claim ' || (g / 2) || ': the Eiffel Tower is about 330 metres tall.',
                          'label', CASE WHEN (g / 2) % 5 = 0 THEN NULL ELSE ((g / 2) % 3 <> 0) END,
                          'kind', 'fact', 'source', NULL, 'in_query', true),
       CASE WHEN g % 97 = 0 THEN NULL ELSE jsonb_build_object(
         'p', round(p.v::numeric, 4), 'request_id', 'req-' || g, 'request_ids', jsonb_build_array('req-' || g),
         'input_tokens', 420, 'n_search_results', 3,
         'usage', jsonb_build_object('attempts', 1, 'searches', g % 2, 'input_tokens', 420, 'output_tokens', 12,
                                     'cost_usd', 0.0021, 'upstream_latency_s', 0.8, 'queue_wait_s', 0.1),
         'sources', CASE WHEN g % 2 = 1 THEN jsonb_build_array(
            jsonb_build_object('url', 'https://example.org/eiffel/' || g, 'title', 'The Eiffel Tower, facts',
                               'date', '2024-05-01', 'snippet', repeat('The tower is 330 m tall. ', 12)),
            jsonb_build_object('url', 'https://example.com/paris/' || g, 'title', 'Paris landmarks',
                               'snippet', repeat('Landmarks of Paris. ', 12)),
            jsonb_build_object('url', 'https://example.net/t/' || g, 'title', 'Tall structures',
                               'snippet', repeat('Tall structures list. ', 12)))
           ELSE '[]'::jsonb END) END,
       CASE WHEN g % 97 = 0 THEN 'failed' ELSE 'done' END, 1, 1, md5(g::text), now()
FROM generate_series(0, :n - 1) AS g
-- The two modes of a claim mostly agree (grounded p near ungrounded p), so flips are the few claims near a
-- cutoff, as in real runs; hashes keep a claim's two probabilities related without a join.
CROSS JOIN LATERAL (
  SELECT least(1.0, greatest(0.0,
           ('x' || substr(md5('u' || (g / 2)), 1, 8))::bit(32)::bigint / 4294967295.0
           + CASE WHEN g % 2 = 1 THEN (('x' || substr(md5('g' || g), 1, 8))::bit(32)::bigint / 4294967295.0 - 0.5) * 0.1
                  ELSE 0 END)) AS v
) AS p
"""
CALLS_SQL = """
INSERT INTO api_calls (tenant_id, job_id, item_id, endpoint, model, attempt, status_code, request_id, latency_ms,
                       wait_ms, input_tokens, output_tokens, searches, search_results, cost_usd, created_at)
SELECT :tenant, job_id, id, 'decisions', 'pplx-decider-v1.2', 1, 200, 'req-' || position, 800, 100, 420, 12, position % 2, 3,
       0.0021, now()
FROM items WHERE job_id = :job
"""
JOB_SQL = """
INSERT INTO jobs (id, tenant_id, kind, status, options, metadata, total_items, warnings, simulated, priority,
                  created_at, queued_at, started_at)
VALUES (:id, :tenant, 'claims', 'in_progress', CAST(:options AS jsonb), '{}'::jsonb, :n, '[]'::jsonb, true,
        'batch', now() - make_interval(secs => :age), now() - make_interval(secs => :age),
        now() - make_interval(secs => :age))
"""


def build(db_url: str, claims: int, jobs: int) -> tuple[str, str, uuid.UUID]:
    """The data set; returns (token, big job id, tenant id)."""
    engine = make_engine(db_url)
    sessions = make_session_factory(engine)
    try:
        with session_scope(sessions) as s:
            issued = create_token(s, "bench-pages")
            token, tenant = issued.token, issued.tenant_id
        big = uuid.uuid4()
        small: list[uuid.UUID] = []
        live: list[uuid.UUID] = []
        with engine.begin() as conn:
            conn.execute(
                text(JOB_SQL), {"id": big, "tenant": tenant, "options": OPTIONS, "n": 2 * claims, "age": 0}
            )
            conn.execute(text(ITEMS_SQL), {"job": big, "n": 2 * claims})
            conn.execute(text(CALLS_SQL), {"job": big, "tenant": tenant})
            for i in range(jobs - 1):
                jid = uuid.uuid4()
                conn.execute(
                    text(JOB_SQL), {"id": jid, "tenant": tenant, "options": OPTIONS, "n": 20, "age": 60 + i}
                )
                conn.execute(text(ITEMS_SQL), {"job": jid, "n": 20})
                conn.execute(text(CALLS_SQL), {"job": jid, "tenant": tenant})
                (live if i % 50 == 0 else small).append(jid)
            # Live jobs: some items still pending or running.
            conn.execute(
                text("UPDATE items SET status = CASE WHEN position % 3 = 0 THEN 'pending' ELSE 'running' END, "
                     "output = NULL WHERE job_id = ANY(:ids) AND position >= 10"),
                {"ids": live},
            )  # fmt: skip
        for jid in [big, *small]:
            with session_scope(sessions) as s:
                if not maybe_finalize(s, jid):
                    raise RuntimeError(f"job {jid} did not finalize")
        with engine.connect() as conn:
            ended = conn.execute(text("SELECT status, count(*) FROM jobs GROUP BY status")).all()
        if {status for status, _n in ended} != {"completed", "in_progress"}:
            raise RuntimeError(f"jobs did not end as built: {ended}")
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE items"))
            conn.execute(text("VACUUM ANALYZE jobs"))
            conn.execute(text("VACUUM ANALYZE api_calls"))
        return token, str(big), tenant
    finally:
        engine.dispose()


def sign_in(client: httpx.Client, base: str, token: str) -> None:
    page = client.get(f"{base}/sign-in").text
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    if match is None:
        raise RuntimeError("no CSRF token on the sign-in page")
    r = client.post(f"{base}/sign-in", data={"token": token, "csrf_token": match.group(1), "next": "/jobs"})
    if r.status_code != 302:
        raise RuntimeError(f"sign-in answered {r.status_code}")


def median_ms(client: httpx.Client, url: str, samples: int, headers: dict[str, str] | None = None) -> float:
    times: list[float] = []
    for i in range(samples + 2):
        t0 = time.perf_counter()
        r = client.get(url, headers=headers)
        elapsed = (time.perf_counter() - t0) * 1000
        if r.status_code != 200:
            raise RuntimeError(f"GET {url}: {r.status_code}\n{r.text[:500]}")
        if i >= 2:
            times.append(elapsed)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=50_000, help="claims in the big job (two items each)")
    ap.add_argument("--jobs", type=int, default=500, help="jobs of the tenant, the big one included")
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--page", type=int, default=500, help="the page N to time (keyset link)")
    args = ap.parse_args()
    flush_redis()
    with fresh_database() as db_url:
        t0 = time.monotonic()
        token, job_id, _tenant = build(db_url, args.claims, args.jobs)
        t_build = time.monotonic() - t0
        env = {"DATABASE_URL": db_url, "REDIS_URL": REDIS_URL, "PERPLEXITY_API_KEY": "unused",
               "FACTGATE_SECRET_KEY": "bench-pages-secret"}  # fmt: skip
        procs = Procs(env=env)
        try:
            web = procs.start_web(free_port(), workers=1)
            api = {"Authorization": f"Bearer {token}"}
            with httpx.Client(timeout=120, follow_redirects=False) as client:
                sign_in(client, web, token)
                first = client.get(f"{web}/jobs/{job_id}").text
                if "claim-000000" not in first or 'rel="next"' not in first:
                    raise RuntimeError("the job page does not show the first claims and a next link")
                # Page N through the link the page draws: `after` is the last position of page N - 1
                # (two items per claim, PAGE_SIZE claims per page).
                after = (args.page - 1) * PAGE_SIZE * 2 - 1
                page_n = f"{web}/jobs/{job_id}?after={after}&page={args.page}"
                shown = client.get(page_n).text
                expect = f"claim-{(args.page - 1) * PAGE_SIZE:06d}"
                if expect not in shown:
                    raise RuntimeError(f"page {args.page} does not start at {expect}")
                load_before = os.getloadavg()[0]
                results = [
                    ("job page (100 claims of 50,000)", median_ms(client, f"{web}/jobs/{job_id}", args.samples)),
                    (f"job page {args.page} (keyset link)", median_ms(client, page_n, args.samples)),
                    ("job page, changed cutoff", median_ms(
                        client, f"{web}/jobs/{job_id}?supported_min=0.7&contradicted_max=0.3", args.samples)),
                    (f"jobs list page ({args.jobs} jobs)", median_ms(client, f"{web}/jobs", args.samples)),
                    ("API GET /v1/jobs/<id>", median_ms(client, f"{web}/v1/jobs/{job_id}", args.samples, api)),
                    ("API GET /v1/jobs?limit=500", median_ms(
                        client, f"{web}/v1/jobs?limit=500", args.samples, api)),
                ]  # fmt: skip
                load_after = os.getloadavg()[0]
        finally:
            procs.stop()
    print(
        f"pages: {2 * args.claims:,}-item completed claims job ({args.claims:,} claims × 2 modes) and "
        f"{args.jobs} jobs; data built in {t_build:.0f} s"
    )
    print(
        f"server stack: gunicorn (1 worker, gthread × 4), Postgres, Redis; median of {args.samples} requests"
    )
    # The machine is shared: its load average says how much the figures were disturbed (2 cores here).
    print(f"load average (1 min) before / after the timed requests: {load_before:.1f} / {load_after:.1f}")
    for name, ms in results:
        print(f"  {name:<36} {ms:7.1f} ms   ratio to goal ({GOAL_MS:.0f} ms) {ms / GOAL_MS:.2f}")


if __name__ == "__main__":
    main()
