"""Per-job budget: a Redis counter as the fast path, the database as the truth.

Summing `api_calls` for every item would make a 100k-item job quadratic, so spending is counted
in Redis. The counter lives a few minutes and is then rebuilt from the database, so an increment lost
to a Redis hiccup (after a billed answer, which is kept regardless) is corrected soon; a flushed or
restarted Redis loses the counter and it is rebuilt at the next read. The check happens before each
try, so a job may overshoot by the calls already in flight.
"""

from __future__ import annotations

import uuid

from jobs.usage import spent_usd
from workers.context import WorkerContext

KEY = "factgate:spent:{job_id}"
TTL_S = 300  # how stale an undercount may get before the counter is rebuilt from `api_calls`


def _key(job_id: uuid.UUID) -> str:
    return KEY.format(job_id=job_id)


def spent(ctx: WorkerContext, job_id: uuid.UUID) -> float:
    """Money spent by the job so far."""
    raw = ctx.redis.get(_key(job_id))
    if raw is not None:
        return float(raw)
    with ctx.sessions() as session:
        total = spent_usd(session, job_id)
    # Only the first rebuild wins; concurrent increments that raced it are in the DB anyway.
    ctx.redis.set(_key(job_id), repr(total), ex=TTL_S, nx=True)
    return total


def over_budget(ctx: WorkerContext, job_id: uuid.UUID, budget_usd: float) -> bool:
    """True when the job has spent its budget."""
    return spent(ctx, job_id) >= budget_usd


def spend(ctx: WorkerContext, job_id: uuid.UUID, usd: float) -> None:
    """Count money just spent (only if the counter exists: otherwise the next read rebuilds it)."""
    if usd <= 0:
        return
    key = _key(job_id)
    if ctx.redis.exists(key):
        ctx.redis.incrbyfloat(key, usd)
