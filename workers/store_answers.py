"""New items answered from the tenant's verdict store as they are created (jobs/stages.py:_spawn).

When a question moves on, the requests of its new children are looked up before they are dispatched: a
group (a pack, or a lone item) whose every request the store answers is settled in the same transaction,
so a re-run of unchanged rows goes from each entry to its report in the one task that settled the entry,
with no task, limiter slot or upstream request per pack. The stage's own handler runs against the store
alone (`Calls.store_only`), so the outputs are exactly what a dispatched try answered from the store
would store; anything else — a request the store lacks, an audit (never from the store), a partial
answer — leaves the group pending, and the dispatcher sends it in its fair order as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from checks import reuse as reuse_rules
from jobs.keyring import KeyringError
from jobs.records import ClaimedItem
from jobs.stages import Answered, StoreAnswers
from workers.context import WorkerContext
from workers.kinds import handler_for, pack_handler_for
from workers.outcomes import Done, PackAnswered
from workers.steps import Calls, NotInStoreError

log = logging.getLogger("factgate.workers")


def _outputs(ctx: WorkerContext, group: Sequence[ClaimedItem], calls: Calls) -> list[dict[str, Any]] | None:
    head = group[0]
    if len(group) > 1:
        pack = pack_handler_for(head)
        if pack is None:
            return None
        outcome = calls.marked_pack(pack(ctx, group, calls))
        if not isinstance(outcome, PackAnswered) or not all(isinstance(m, Done) for m in outcome.members):
            return None
        return [m.output for m in outcome.members if isinstance(m, Done)]
    handler = handler_for(head)
    if handler is None:
        return None
    single = calls.marked(handler(ctx, head, calls))
    return [single.output] if isinstance(single, Done) else None


def store_answers(ctx: WorkerContext) -> StoreAnswers:
    """The `answer_now` of jobs/stages.py:advance_question for this worker."""

    def answer(session: Session, group: Sequence[ClaimedItem]) -> Answered | None:
        head = group[0]
        if reuse_rules.reuse_option(head.options) == "none":
            return None
        calls = Calls(ctx, head, ctx.client, store_only=True, store=session)
        try:
            calls.client, calls.own_key = ctx.client_for(head.tenant_id)
            outputs = _outputs(ctx, group, calls)
        except (NotInStoreError, KeyringError):
            return None
        except Exception:
            # Never let a lookup fail the advance: the group is dispatched and tried as usual.
            log.warning("job %s: store lookup for new items failed", head.job_id, exc_info=True)
            return None
        if outputs is None or not calls.rows or not all(row.reused for row in calls.rows):
            return None
        return Answered(outputs, list(calls.rows))

    return answer
