"""Purge design: batched DELETEs (today's `items` and `api_calls`) against partitions dropped whole.

Issue 23 asks for the choice between the two to be measured, not argued. On a fresh migrated database, for
each layout in turn, this loads one large job (`--rows` claim items of a grounded claim's realistic size and
one `api_calls` row each, 216 bytes as the worker writes them) and after it a small live job of another
tenant (its rows at the heap's tail, as a job submitted later has them), then purges the large job and
prints:

- purge time, wall clock;
- WAL bytes the purge wrote: the sum of `EXPLAIN (ANALYZE, WAL)` over its statements (exact, this session
  only), and for DDL, which cannot be explained, the cluster's LSN difference (an upper bound: the Postgres
  server is shared, and other sessions' WAL lands in it too);
- the tables' size (heap, indexes and TOAST) before the purge and after a plain VACUUM (what autovacuum
  leaves; VACUUM FULL would give the space back but holds an ACCESS EXCLUSIVE lock while it copies), and
  the WAL of that VACUUM (LSN difference, an upper bound);
- what it costs the rest: while the purge runs, another connection loops over the small job's usual work
  (insert an item, settle it with its call row, count the job's items by status, refresh the job's row),
  and its latency per round (p50, p99, max) is printed against the same loop before the purge, with the
  locks each layout takes.

(a) `plain`: the product's purge, `jobs/purge.py`'s statements in `purge_step`'s order (calls rolled up
into `usage_days` 10,000 at a time, then items 10,000 at a time, then the job row), each in its own
transaction; each is run under EXPLAIN (ANALYZE, WAL), which executes it for real.

(b) `partitioned`: `items_p` and `api_calls_p`, the same columns, indexes and foreign keys as `items` and
`api_calls` plus `job_created_at` (the job's creation time, the partition key, which every unique key and
every foreign key between the two must then carry), partitioned BY RANGE by UTC day; the large job alone
in its day's partition. Its purge: the calls' usage rolled up into `usage_days` in one INSERT … SELECT, then
each partition detached (DETACH PARTITION … CONCURRENTLY, which waits for transactions that may see it
but blocks no reader or writer of the other partitions) and dropped.

    FACTGATE_BENCH_REDIS_URL=... .venv/bin/python bench/purge_design.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import fresh_database
from jobs.purge import _DELETE_ITEMS_PG, _ROLL_UP_PG, PURGE_BATCH
from models import make_engine

BIG_DAY = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
SMALL_DAY = datetime(2026, 1, 9, 12, 0, tzinfo=UTC)
SMALL_ROWS = 200
CHUNK = 100_000
# A grounded claim's output as the worker stores it (bench/footprint.py's simulator data): every field
# but the per-item ids and probability, which the loader varies. Its sources are a reference into the
# job's source lists (migration 0012), as a grounded claim's are now.
OUTPUT = {
    "model": "pplx-decider-latest-simulated",
    "usage": {
        "attempts": 1,
        "cost_usd": 0.00100596,
        "searches": 1,
        "input_tokens": 298,
        "queue_wait_s": 0.0018,
        "output_tokens": 1,
        "upstream_latency_s": 0.0084,
    },
    "verdict": "contradicted",
    "sanitized": [],
    "input_tokens": 298,
    "output_tokens": 1,
    "n_search_results": 5,
}


def lsn(conn: Connection) -> str:
    return str(conn.execute(text("SELECT pg_current_wal_lsn()")).scalar_one())


def lsn_bytes(conn: Connection, start: str) -> int:
    return int(
        conn.execute(text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), :s)"), {"s": start}).scalar_one()
    )


def explain_wal(conn: Connection, statement: Any, params: dict[str, Any]) -> tuple[int, int]:
    """Run `statement` under EXPLAIN (ANALYZE, WAL): (rows it affected, WAL bytes it wrote)."""
    sql = statement.text if hasattr(statement, "text") else str(statement)
    plan = conn.execute(text(f"EXPLAIN (ANALYZE, WAL, FORMAT JSON) {sql}"), params).scalar_one()
    top = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
    return int(top.get("Actual Rows", 0)), int(top.get("WAL Bytes", 0))


def setup(engine: Engine) -> dict[str, uuid.UUID]:
    ids = {k: uuid.uuid4() for k in ("big_tenant", "small_tenant", "big_job", "small_job")}
    with engine.begin() as conn:
        for name in ("big_tenant", "small_tenant"):
            conn.execute(text("INSERT INTO tenants (id, name, weight, created_at) VALUES (:id, :n, 1, now())"),
                         {"id": ids[name], "n": name})  # fmt: skip
        for job, tenant, day, status in (
            ("big_job", "big_tenant", BIG_DAY, "cancelled"),
            ("small_job", "small_tenant", SMALL_DAY, "in_progress"),
        ):
            conn.execute(
                text(
                    "INSERT INTO jobs (id, tenant_id, kind, status, options, metadata, total_items, warnings,"
                    " simulated, priority, created_at, cancelled_at) VALUES (:id, :t, 'claims', :s, '{}',"
                    " '{}', 0, '[]', false, 'batch', :at, CAST(:ended AS timestamptz))"
                ),
                {
                    "id": ids[job],
                    "t": ids[tenant],
                    "s": status,
                    "at": day,
                    "ended": day if status == "cancelled" else None,
                },
            )
    return ids


ITEM_COLUMNS = (
    "job_id, stage, endpoint, scope, position, custom_id, mode, input, output, status, attempts, tries,"
    " enqueued_at, finished_at"
)
CALL_COLUMNS = (
    "tenant_id, job_id, item_id, endpoint, model, attempt, status_code, request_id, latency_ms, wait_ms,"
    " input_tokens, output_tokens, searches, search_results, cost_usd, created_at"
)


def item_select(extra: str = "") -> str:
    """One claim item per `i`, of the size the worker writes (input as intake writes it)."""
    return (
        "SELECT :job, 'claim', 'decisions', 'abcdef012345:decisions', i, 'row-' || lpad(i::text, 7, '0'),"
        " 'grounded', jsonb_build_object('kind', null, 'claim', 'Claim ' || i || ': the Eiffel Tower is"
        " about 330 m tall.', 'label', null, 'source', null, 'in_query', true),"
        " CAST(:output AS jsonb) || jsonb_build_object('p', round(random()::numeric, 4), 'request_id',"
        " md5(i::text)::uuid::text, 'request_ids', jsonb_build_array(md5(i::text)::uuid::text), 'src_ref',"
        " md5((i % 24)::text)), 'done', 1, 1, now(), now()" + extra + " FROM generate_series(:lo, :hi - 1) i"
    )


def call_select(items: str, extra: str = "") -> str:
    return (
        "SELECT :tenant, job_id, id, 'decisions', 'pplx-decider-latest-simulated', 1, 200,"
        " md5('call' || id::text)::uuid::text, 200 + random() * 100, random() * 3, 422, 1, 1, 5, 0.00100844,"
        f" now(){extra} FROM {items} WHERE job_id = :job AND position >= :lo AND position < :hi"
    )


def load(engine: Engine, items: str, calls: str, job: uuid.UUID, tenant: uuid.UUID, rows: int,
         day: datetime | None) -> None:  # fmt: skip
    """`rows` items of `job` and a call row each, in chunks (each its own transaction)."""
    extra_i = ", :day" if day else ""
    extra_c = ", job_created_at" if day else ""
    cols_i = ITEM_COLUMNS + (", job_created_at" if day else "")
    cols_c = CALL_COLUMNS + (", job_created_at" if day else "")
    for lo in range(0, rows, CHUNK):
        hi = min(rows, lo + CHUNK)
        p = {"job": job, "tenant": tenant, "lo": lo, "hi": hi, "output": json.dumps(OUTPUT), "day": day}
        with engine.begin() as conn:
            conn.execute(text(f"INSERT INTO {items} ({cols_i}) {item_select(extra_i)}"), p)
            conn.execute(text(f"INSERT INTO {calls} ({cols_c}) {call_select(items, extra_c)}"), p)


def partitioned_schema(conn: Connection) -> None:
    """`items_p` and `api_calls_p`: today's columns, indexes and foreign keys, partitioned by the job's
    creation day. Every unique index must hold the partition key, so the primary keys, the (job, custom id,
    mode) constraint and the foreign keys between the two tables (parent, item) carry `job_created_at`."""
    for table in ("items", "api_calls"):
        conn.execute(text(
            f"CREATE TABLE {table}_p (LIKE {table} INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING STORAGE,"
            f" job_created_at timestamptz NOT NULL) PARTITION BY RANGE (job_created_at)"
        ))  # fmt: skip
        conn.execute(text(f"ALTER TABLE {table}_p ADD PRIMARY KEY (id, job_created_at)"))
        # The identity/sequence default is copied as-is (the same sequence as the plain table): fine here.
        for name, stored in conn.execute(
            text(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = :t AND indexname NOT LIKE 'pk_%'"
            ),
            {"t": table},
        ):
            definition = stored.replace(f" ON public.{table} ", f" ON public.{table}_p ")
            definition = definition.replace(f"INDEX {name} ", f"INDEX {name}_p ")
            if "UNIQUE" in definition:
                definition = definition.replace(")", ", job_created_at)", 1)
            conn.execute(text(definition))
    conn.execute(text(
        "ALTER TABLE items_p ADD FOREIGN KEY (job_id) REFERENCES jobs (id) ON DELETE CASCADE,"
        " ADD FOREIGN KEY (parent_id, job_created_at) REFERENCES items_p (id, job_created_at) ON DELETE CASCADE"
    ))  # fmt: skip
    conn.execute(text(
        "ALTER TABLE api_calls_p ADD FOREIGN KEY (job_id) REFERENCES jobs (id) ON DELETE CASCADE,"
        " ADD FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE,"
        " ADD FOREIGN KEY (item_id, job_created_at) REFERENCES items_p (id, job_created_at)"
        " ON DELETE SET NULL (item_id)"
    ))  # fmt: skip
    for day in (BIG_DAY, SMALL_DAY):
        name = day.strftime("%Y%m%d")
        lo, hi = day.replace(hour=0), day.replace(hour=0) + timedelta(days=1)
        for table in ("items", "api_calls"):
            conn.execute(text(f"CREATE TABLE {table}_{name} PARTITION OF {table}_p"
                              f" FOR VALUES FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')"))  # fmt: skip


def size_of(conn: Connection, tables: tuple[str, ...]) -> int:
    """Heap + indexes + TOAST of the tables (of every partition of a partitioned one)."""
    return int(
        conn.execute(
            text(
                "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM ("
                " SELECT relid FROM unnest(CAST(:t AS text[])) t, pg_partition_tree(t::regclass)"
                " UNION SELECT t::regclass FROM unnest(CAST(:t AS text[])) t) p"
            ),
            {"t": list(tables)},
        ).scalar_one()
    )


def vacuum(engine: Engine, tables: tuple[str, ...]) -> tuple[float, int]:
    """A plain VACUUM (ANALYZE) of the tables: (seconds, WAL bytes by LSN difference)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        start, t0 = lsn(conn), time.monotonic()
        for t in tables:
            conn.execute(text(f"VACUUM (ANALYZE) {t}"))
        return time.monotonic() - t0, lsn_bytes(conn, start)


class Probe:
    """The small job's usual work in a loop on its own connection, one transaction a round: insert an item
    and settle it with its call row, count the job's items by status, refresh the job's schedule."""

    def __init__(self, engine: Engine, items: str, calls: str, ids: dict[str, uuid.UUID], day: bool) -> None:
        self.engine, self.items, self.calls, self.ids, self.day = engine, items, calls, ids, day
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._n = SMALL_ROWS

    def round(self, conn: Connection) -> None:
        self._n += 1
        p = {"job": self.ids["small_job"], "tenant": self.ids["small_tenant"], "lo": self._n,
             "hi": self._n + 1, "output": json.dumps(OUTPUT), "day": SMALL_DAY}  # fmt: skip
        extra = ", :day" if self.day else ""
        with conn.begin():
            conn.execute(text(
                f"INSERT INTO {self.items} ({ITEM_COLUMNS}{', job_created_at' if self.day else ''})"
                f" {item_select(extra)}"
            ), p)  # fmt: skip
            conn.execute(text(
                f"INSERT INTO {self.calls} ({CALL_COLUMNS}{', job_created_at' if self.day else ''})"
                f" {call_select(self.items, ', job_created_at' if self.day else '')}"
            ), p)  # fmt: skip
            conn.execute(
                text(f"UPDATE {self.items} SET status = 'done' WHERE job_id = :job AND position = :lo"), p
            )
            conn.execute(text(f"SELECT status, count(*) FROM {self.items} WHERE job_id = :job GROUP BY 1"), p)
            conn.execute(text("UPDATE jobs SET schedule = CAST(:s AS jsonb) WHERE id = :job"),
                         {"job": p["job"], "s": json.dumps({"n": self._n})})  # fmt: skip

    def _run(self) -> None:
        with self.engine.connect() as conn:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    self.round(conn)
                except DBAPIError as exc:  # a round the purge's locks broke is a figure, not the end
                    self.failures.append(self._named(str(exc.orig).splitlines()[0:2]))
                    conn.rollback()
                self.latencies.append(time.monotonic() - t0)
                time.sleep(0.01)

    def _named(self, lines: list[str]) -> str:
        """The error's first lines with each relation's OID followed by its name."""
        said = " / ".join(lines)
        with self.engine.connect() as conn:
            for oid in set(re.findall(r"relation (\d+)", said)):
                name = conn.execute(text("SELECT CAST(CAST(:o AS oid) AS regclass)::text"), {"o": oid})
                said = said.replace(f"relation {oid} ", f"relation {oid} ({name.scalar_one()}) ")
        return said

    def measure(self, seconds: float) -> list[float]:
        """The loop alone for `seconds`: its latencies."""
        with self.running():
            time.sleep(seconds)
        return self.latencies

    @contextmanager
    def running(self) -> Iterator[None]:
        self.latencies = []
        self.failures = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        try:
            yield
        finally:
            self._stop.set()
            self._thread.join()


def figures(latencies: list[float]) -> str:
    if not latencies:
        return "no rounds"
    ms = sorted(x * 1000 for x in latencies)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"{len(ms)} rounds, p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms"


def count(engine: Engine, table: str, job: uuid.UUID) -> int:
    """The job's rows left in `table` (EXPLAIN reports no row count for a DELETE without RETURNING)."""
    with engine.connect() as conn:
        sql = f"SELECT count(*) FROM {table} WHERE job_id = :j"
        return int(conn.execute(text(sql), {"j": job}).scalar_one())


def purge_plain(engine: Engine, job: uuid.UUID) -> tuple[int, int, int]:
    """`purge_step`'s statements for a deleted job, each batch in its own transaction, under EXPLAIN
    (ANALYZE, WAL): (statements, rows removed, WAL bytes)."""
    statements = rows = wal = 0
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET deleted_at = now() WHERE id = :j"), {"j": job})
    for statement, table in ((_ROLL_UP_PG, "api_calls"), (_DELETE_ITEMS_PG, "items")):
        left = count(engine, table, job)
        while left:
            with engine.begin() as conn:
                _n, w = explain_wal(conn, statement, {"job": job, "n": PURGE_BATCH})
            statements += 1
            wal += w
            now_left = count(engine, table, job)
            rows += left - now_left
            left = now_left
    with engine.begin() as conn:
        _n, w = explain_wal(conn, text("DELETE FROM jobs WHERE id = :job"), {"job": job})
        wal += w
    return statements + 1, rows, wal


def purge_partitioned(engine: Engine, job: uuid.UUID) -> tuple[int, int, int, int]:
    """Roll the partition's calls up into `usage_days` (one statement, under EXPLAIN for its WAL), then
    detach both partitions concurrently and drop them: (statements, rows rolled up, DML WAL, DDL WAL by
    LSN difference)."""
    name = BIG_DAY.strftime("%Y%m%d")
    roll_up = text(
        "INSERT INTO usage_days AS u (tenant_id, day, endpoint, model, requests, searches, input_tokens,"
        f" output_tokens, cost_usd) SELECT tenant_id, CAST(timezone('UTC', created_at) AS date), endpoint,"
        f" coalesce(model, ''), count(*), sum(searches), sum(input_tokens), sum(output_tokens), sum(cost_usd)"
        f" FROM api_calls_{name} GROUP BY 1, 2, 3, 4 ON CONFLICT (tenant_id, day, endpoint, model) DO UPDATE"
        " SET requests = u.requests + excluded.requests"
    )
    with engine.begin() as conn:
        calls = int(conn.execute(text(f"SELECT count(*) FROM api_calls_{name}")).scalar_one())
        _n, dml_wal = explain_wal(conn, roll_up, {})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        start = lsn(conn)
        for table in ("api_calls", "items"):  # the referencing table first
            conn.execute(text(f"ALTER TABLE {table}_p DETACH PARTITION {table}_{name} CONCURRENTLY"))
            conn.execute(text(f"DROP TABLE {table}_{name}"))
        conn.execute(text("DELETE FROM jobs WHERE id = :j"), {"j": job})
        ddl_wal = lsn_bytes(conn, start)
    return 6, calls, dml_wal, ddl_wal


def run_layout(
    engine: Engine, layout: str, rows: int, ids: dict[str, uuid.UUID], say: Callable[[str], None]
) -> None:
    part = layout == "partitioned"
    items, calls = ("items_p", "api_calls_p") if part else ("items", "api_calls")
    tables = (items, calls, "usage_days")
    t0 = time.monotonic()
    load(engine, items, calls, ids["big_job"], ids["big_tenant"], rows, BIG_DAY if part else None)
    load(engine, items, calls, ids["small_job"], ids["small_tenant"], SMALL_ROWS, SMALL_DAY if part else None)
    vacuum(engine, tables)
    with engine.connect() as conn:
        before = size_of(conn, tables)
    say(f"({'b' if part else 'a'}) {layout}: {rows:,} items + {rows:,} calls loaded in "
        f"{time.monotonic() - t0:.0f} s; {items} + {calls} + usage_days {before / 1e6:,.1f} MB "
        f"({before / max(rows, 1):,.0f} bytes an item); load average {psutil.getloadavg()[0]:.1f}")  # fmt: skip
    probe = Probe(engine, items, calls, ids, part)
    alone = probe.measure(5.0)
    with probe.running():
        t0 = time.monotonic()
        if part:
            statements, gone, wal, ddl_wal = purge_partitioned(engine, ids["big_job"])
        else:
            statements, gone, wal = purge_plain(engine, ids["big_job"])
            ddl_wal = 0
        took = time.monotonic() - t0
    during, failures = probe.latencies, probe.failures
    vac_s, vac_wal = vacuum(engine, tables)
    with engine.connect() as conn:
        after = size_of(conn, tables)
    what = "calls rolled up, then the partitions dropped" if part else "rows deleted"
    say(f"  purge {took:.1f} s in {statements} statements ({gone:,} {what}); WAL {wal / 1e6:,.1f} MB of DML"
        + (f" + {ddl_wal / 1e6:,.2f} MB by LSN over the DDL (upper bound)" if part else "")
        + f" = {(wal + ddl_wal) / max(rows, 1):,.0f} bytes an item")  # fmt: skip
    say(f"  after VACUUM ({vac_s:.1f} s, {vac_wal / 1e6:,.1f} MB WAL by LSN): {after / 1e6:,.1f} MB "
        f"({(before - after) / 1e6:,.1f} MB given back of {before / 1e6:,.1f})")  # fmt: skip
    say(f"  the small job's round alone: {figures(alone)}")
    say(f"  the small job's round during the purge: {figures(during)}; {len(failures)} failed")
    for failure in sorted(set(failures)):
        say(f"    failed: {failure}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--only", choices=("plain", "partitioned"), default=None)
    args = ap.parse_args()
    out: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        out.append(line)

    for layout in ("plain", "partitioned"):
        if args.only not in (None, layout):
            continue
        # A fresh database per layout: neither inherits the other's dead tuples, WAL or cache.
        with fresh_database() as db_url:
            engine = make_engine(db_url)
            try:
                ids = setup(engine)
                if layout == "partitioned":
                    with engine.begin() as conn:
                        partitioned_schema(conn)
                run_layout(engine, layout, args.rows, ids, say)
            finally:
                engine.dispose()
    print("\nsummary\n" + "\n".join(out))


if __name__ == "__main__":
    main()
