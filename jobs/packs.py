"""Packs: several items answered by one upstream request, each settled as the item it is (docs/spec.md §9).

A pack is its head and the items whose `pack_of` names it. Only the head is dispatched (the ready index
leaves members out); the worker that claims the head claims its pending members with it, sends one request,
and settles every member in one transaction: the attempt's `api_calls` row is stored once, on the head,
listing every item it answered, and each item's usage is its share of it. A member whose answers did not
come back is taken out of the pack and sent again alone; a pack whose request failed for a while is given
back whole and retried as a pack. Every member keeps its own tries, so each still ends within a bounded
number of attempts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any, Literal

from sqlalchemy import exists, text, update
from sqlalchemy.orm import Session, aliased

from checks.packing import split_count
from jobs.clock import after
from jobs.items import (
    ItemUsage,
    fail_item,
    finish_item,
    item_usage,
    record_calls,
    release_member,
    skip_item,
    usage_of_rows,
)
from jobs.records import CallRow, ClaimedItem
from models import Item

__all__ = [
    "MemberResult",
    "claim_members",
    "free_orphaned_members",
    "pack_in_order",
    "settle_pack",
    "shares",
]

Settle = Literal["done", "failed", "skipped", "released", "alone"]


@dataclass(frozen=True)
class MemberResult:
    """What became of one item of a pack's try: `done` / `failed` with its output (and error), `skipped`,
    `released` (given back with the pack, for a later try of the whole pack) or `alone` (given back out of
    the pack: its answers were missing, so it is asked again in a request of its own)."""

    item: ClaimedItem
    settle: Settle
    output: dict[str, Any] | None = None
    error: str | None = None
    retry_at: datetime | None = None


def claim_members(session: Session, head: ClaimedItem, lease_s: float, max_tries: int) -> list[ClaimedItem]:
    """Claim the pending members of `head`'s pack for the holder of `head`, ordered as they were made.

    A member that used every try leaves the pack (to be failed at its own claim, as any exhausted item)."""
    session.execute(
        update(Item)
        .where(Item.pack_of == head.id, Item.status == "pending", Item.tries >= max_tries)
        .values(pack_of=None)
    )
    rows = session.execute(
        update(Item)
        .where(Item.pack_of == head.id, Item.status == "pending", Item.tries < max_tries)
        .values(
            status="running",
            attempts=Item.attempts + 1,
            tries=Item.tries + 1,
            lease_until=after(session, lease_s),
            not_before=None,
        )
        .returning(Item.id, Item.attempts, Item.stage, Item.mode, Item.custom_id, Item.input, Item.dedupe_key)
    ).all()
    members = [
        replace(
            head,
            id=int(item_id),
            stage=stage,
            mode=mode,
            custom_id=custom_id,
            input=input_,
            token=int(attempts),
            dedupe_key=dedupe_key,
        )
        for item_id, attempts, stage, mode, custom_id, input_, dedupe_key in rows
    ]
    return sorted(members, key=lambda m: m.id)


def shares(total: ItemUsage, n: int) -> list[ItemUsage]:
    """`total` split over `n` items so the parts add up exactly: counts and money as whole units (the
    remainder to the first items), time in equal parts."""

    split = partial(split_count, n=n)
    attempts, searches = split(total.attempts), split(total.searches)
    # Money in the units an item's usage keeps (1e-8 dollars), so the shares add up to the pack's cost.
    cost = [units / 1e8 for units in split(round(total.cost_usd * 1e8))]
    tin, tout = split(total.input_tokens), split(total.output_tokens)
    return [
        ItemUsage(
            attempts=attempts[i],
            searches=searches[i],
            input_tokens=tin[i],
            output_tokens=tout[i],
            cost_usd=cost[i],
            upstream_latency_s=total.upstream_latency_s / n,
            queue_wait_s=total.queue_wait_s / n,
        )
        for i in range(n)
    ]


def settle_pack(
    session: Session, head: ClaimedItem, results: Sequence[MemberResult], calls: Sequence[CallRow]
) -> list[ClaimedItem]:
    """Store one try of a pack in the caller's transaction: its calls once, on the head, naming every
    member; then each member as its result says, with its share of what the pack's tries cost. Returns
    the members that reached a terminal status (their questions may move on)."""
    ids = [r.item.id for r in results]
    record_calls(session, head, calls, pack_items=ids)
    # Every try of this pack is on the head's rows (a first try: just these).
    total = usage_of_rows(calls) if head.token == 1 else item_usage(session, head.id)
    parts = shares(total, len(results))
    pack = {"head": head.id, "size": len(results)}
    settled: list[ClaimedItem] = []
    for position, (result, usage) in enumerate(zip(results, parts, strict=True)):
        item = result.item
        output = {**(result.output or {}), "pack": {**pack, "position": position}}
        if result.settle == "done":
            ok = finish_item(session, item, output, usage=usage)
        elif result.settle == "failed":
            ok = fail_item(session, item, result.error or "failed", output=output, usage=usage)
        elif result.settle == "skipped":
            ok = skip_item(session, item, result.error or "skipped")
        else:
            release_member(
                session,
                item,
                result.error or "asked again",
                counted=bool(calls),
                retry_at=result.retry_at,
                alone=result.settle == "alone",
            )
            ok = False
        if ok:
            settled.append(item)
    return settled


def free_orphaned_members(session: Session) -> int:
    """Pending members whose head has ended (failed at its claim, retried on its own, ...) leave the pack,
    so they are dispatched alone: nothing else would ever send them. Reads only pending members (a partial
    index holds just those)."""
    head = aliased(Item)
    ended = exists().where(head.id == Item.pack_of, head.status.in_(("done", "failed", "skipped")))
    query = update(Item).where(Item.pack_of.is_not(None), Item.status == "pending", ended)
    result = session.execute(query.values(pack_of=None).execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0) or 0)


# Groups of `size` of a job's top-level items of one stage, in position order, per mode; repeats (which
# are never sent) left out. Window functions and UPDATE … FROM: Postgres, and SQLite since 3.33.
_PACK_IN_ORDER = text(
    "UPDATE items SET pack_of = g.head FROM ("
    "  SELECT id, first_value(id) OVER (PARTITION BY mode, (n - 1) / :size ORDER BY position, id) AS head"
    "  FROM (SELECT id, mode, position, row_number() OVER (PARTITION BY mode ORDER BY position, id) AS n"
    "        FROM items WHERE job_id = :job AND stage = :stage AND parent_id IS NULL"
    "        AND duplicate_of IS NULL) AS r"
    ") AS g WHERE items.id = g.id AND g.id <> g.head"
)


def pack_in_order(session: Session, job_id: uuid.UUID, stage: str, size: int) -> None:
    """Pack a streamed job's new items (`size` a request, in input order), in the caller's transaction."""
    session.execute(_PACK_IN_ORDER, {"job": job_id, "stage": stage, "size": size})
