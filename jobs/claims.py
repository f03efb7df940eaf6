"""The `claims` job kind's application side: items from rows, the summary, result lines.

Each claim becomes one item per request mode. Whether the complete claim is inside its grounding
query is computed here, before anything is sent, and stored on the item (docs/spec.md §2).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, cast

from pydantic_core import from_json
from sqlalchemy import Text, select
from sqlalchemy import cast as cast_
from sqlalchemy.orm import Session

from checks import claims as claim_rules
from checks.kinds.claims import ClaimResult, ClaimsSummary
from checks.ndjson import RowLine
from checks.options import ClaimsOptions, check_cutoffs
from checks.packing import flash_warning
from checks.pricing import DEFAULT_MODEL
from checks.recipes import RowLimits
from jobs import bulk_load
from jobs.intake import UnitSpec, dedupe_key
from jobs.keyset import page_rows
from jobs.kinds import Staged
from jobs.packs import pack_in_order
from jobs.source_lists import SourceLists
from models import Item, Job


def claim_units(
    rows: Sequence[claim_rules.ClaimRow], options: ClaimsOptions
) -> tuple[list[UnitSpec], list[str]]:
    """One unit per claim per mode, plus the intake warnings (claims outside their query)."""
    units: list[UnitSpec] = []
    outside: list[str] = []
    grounded = "grounded" in options.modes
    seen: set[str] = set()  # a repeat is never sent (it takes its first's answer), so it is in no pack
    sent = 0
    for row in rows:
        in_query = True
        if grounded:
            in_query = not claim_rules.claim_outside_query(row.claim)
            if not in_query:
                outside.append(row.id)
        for mode in options.modes:
            key = dedupe_key(options.model, mode, row.claim)
            pack = None
            if options.pack_size > 1 and key not in seen:
                pack = sent // options.pack_size
                sent += 1
            seen.add(key)
            units.append(
                UnitSpec(
                    stage="claim",
                    custom_id=row.id,
                    mode=mode,
                    input={
                        "claim": row.claim,
                        "label": row.label,
                        "kind": row.kind,
                        "source": row.source,
                        "in_query": in_query,
                    },
                    dedupe_key=key,
                    pack=pack,
                )
            )
    warnings = [outside_query_warning(len(outside), outside[:10])] if outside else []
    if flash := flash_warning(options.model, options.pack_size):
        warnings.append(flash)
    return units, warnings


def outside_query_warning(count: int, first_ids: Sequence[str]) -> str:
    """The intake warning for `count` claims outside their grounding query (`first_ids`: up to 10)."""
    shown = ", ".join(first_ids[:10]) + (" …" if count > 10 else "")
    return (
        f"{count} claim(s) are not entirely inside their web-grounding search query, so the "
        f"search may look for something else: {shown}. Put the claim first and keep it under ~237 bytes."
    )


def item_usage_of(output: dict[str, Any] | None) -> dict[str, Any]:
    """What an item cost over all its tries (jobs/items.py writes `usage` when it settles); zeros for an
    item that never settled with a record of its calls (skipped, or stored before usage existed)."""
    o = output or {}
    usage = o.get("usage")
    if isinstance(usage, dict):
        return usage
    return {"attempts": int(o.get("attempts") or 0), "upstream_latency_s": float(o.get("latency_s") or 0.0)}


def _outcomes(session: Session, job_id: uuid.UUID, mode: str) -> list[claim_rules.Outcome]:
    rows = session.execute(
        select(Item.custom_id, Item.input, Item.output, Item.status, Item.error)
        .where(Item.job_id == job_id, Item.mode == mode)
        .order_by(Item.position)
        .execution_options(yield_per=5_000)
    )
    out: list[claim_rules.Outcome] = []
    for custom_id, input_, output, status, error in rows:
        o = output or {}
        usage = item_usage_of(output)
        p = o.get("p") if status == "done" else None
        out.append(
            claim_rules.Outcome(
                id=custom_id,
                label=input_.get("label"),
                p=p,
                input_tokens=int(usage.get("input_tokens", o.get("input_tokens")) or 0),
                latency_s=float(usage.get("upstream_latency_s") or 0.0),
                queue_wait_s=float(usage.get("queue_wait_s") or 0.0),
                attempts=int(usage.get("attempts") or 0),
                search_results=int(o.get("n_search_results") or 0),
                error=None if status == "done" else (error or status),
            )
        )
    return out


def claims_summary(
    session: Session, job: Job, *, supported_min: float | None = None, contradicted_max: float | None = None
) -> ClaimsSummary:
    """Scorecards per mode (with acceptance), flips between modes, and claims outside their query.

    Replayed from stored probabilities: other cutoffs need no upstream request.
    """
    opts = job.options
    smin = float(opts.get("supported_min", 0.8) if supported_min is None else supported_min)
    cmax = float(opts.get("contradicted_max", 0.2) if contradicted_max is None else contradicted_max)
    check_cutoffs(smin, cmax)
    modes = claim_rules.modes_for(opts.get("mode", "grounded"))
    scorecards: dict[str, Any] = {}
    outcomes = {mode: _outcomes(session, job.id, mode) for mode in modes}
    probs: dict[str, dict[str, float]] = {
        mode: {o.id: o.p for o in rows if o.p is not None} for mode, rows in outcomes.items()
    }
    outside = 0
    for mode in modes:
        other = [m for m in modes if m != mode]
        card = claim_rules.scorecard(
            outcomes[mode],
            mode=mode,
            model=opts.get("model") or DEFAULT_MODEL,
            supported_min=smin,
            contradicted_max=cmax,
            baseline=probs[other[0]] if other else None,
        )
        scorecards[mode] = card.as_dict()
    if "grounded" in modes:
        outside = sum(
            1
            for (inp,) in session.execute(
                select(Item.input).where(Item.job_id == job.id, Item.mode == "grounded")
            )
            if not inp.get("in_query", True)
        )
    flips: list[dict[str, Any]] = []
    if len(modes) == 2:
        flips = [
            f.as_dict()
            for f in claim_rules.flips(
                probs["ungrounded"], probs["grounded"], supported_min=smin, contradicted_max=cmax
            )
        ]
    return ClaimsSummary.model_validate(
        {
            "cutoffs": {"supported_min": smin, "contradicted_max": cmax},
            "modes": list(modes),
            "scorecards": scorecards,
            "flips": flips,
            "outside_query": outside,
        }
    )


# What a result line reads of each item. The input's three fields are taken out in SQL (typed there: the
# claim as text, the flags as booleans) and the output comes as its JSON text, decoded once here by
# pydantic-core's parser: psycopg's JSONB loader decoded both documents with the json module per item, a
# quarter of an export's time (profiled); `from_json` is ~2.7x faster and gives the same values (floats
# parsed exactly, as json.loads does).
_RESULT_COLUMNS = (
    Item.position,
    Item.id,
    Item.custom_id,
    Item.mode,
    Item.input["claim"].as_string(),
    Item.input["label"].as_boolean(),
    Item.input["in_query"].as_boolean(),
    cast_(Item.output, Text),
    Item.status,
    Item.error,
)
ResultRow = tuple[int, int, str, str, str | None, bool | None, bool | None, str | None, str, str | None]


def _verdict(p: object, status: str, smin: float, cmax: float) -> claim_rules.Verdict | None:
    """`claim_rules.verdict` for a done item's p, the cutoffs checked once per page by the caller: a float
    in [0, 1] is compared here, anything else goes through the rule (which raises as it always did)."""
    if p is None or status != "done":
        return None
    if type(p) is float and 0.0 <= p <= 1.0:
        return "supported" if p >= smin else "contradicted" if p <= cmax else "review"
    return claim_rules.verdict(cast(float, p), smin, cmax)  # not a float: the rule raises, as it did


def _mode_result(
    cutoffs: tuple[float, float], row: ResultRow, output: dict[str, Any] | None
) -> dict[str, Any]:
    """One mode's result of a claim, from its item's row (`_RESULT_COLUMNS`) and its output as written
    (its sources back in place)."""
    smin, cmax = cutoffs
    in_query, _output_text, status, error = row[6:]
    o = output or {}
    p = o.get("p")
    usage = item_usage_of(output)
    return {
        "status": status,
        "p": p,
        "verdict": _verdict(p, status, smin, cmax),
        "request_id": o.get("request_id"),
        "request_ids": o.get("request_ids", []),
        "attempts": int(usage.get("attempts") or 0),
        "input_tokens": o.get("input_tokens"),
        "usage": usage,
        "in_query": in_query,
        "sources": o.get("sources", []),
        "error": error if status != "done" else None,
        "reused_from": o.get("reused_from"),
    }


def decoded(output_text: str | None) -> dict[str, Any] | None:
    """An output column's JSON text as a dict (the same values `json.loads` gives), None for none."""
    return None if output_text is None else cast("dict[str, Any]", from_json(output_text))


# Rows decoded, and their source lists loaded, this many at a time: one query for a chunk's lists.
_CHUNK = 1_000


def _outputs(
    session: Session, job: Job, rows: Iterable[ResultRow]
) -> Iterator[tuple[ResultRow, dict[str, Any] | None]]:
    """Each row with its output decoded and its sources back in place (checks/claim_sources.py): the lists
    a chunk of rows names are read in one query, by the job's id (the job was read for its tenant)."""
    lists = SourceLists(session, job.id)
    it = iter(rows)
    while chunk := list(islice(it, _CHUNK)):
        outputs = [decoded(row[7]) for row in chunk]
        lists.load(outputs)
        for row, output in zip(chunk, outputs, strict=True):
            yield row, None if output is None else lists.join(output)


def _group_results(
    session: Session, job: Job, rows: Iterable[ResultRow]
) -> Iterator[tuple[tuple[int, int], ClaimResult]]:
    """One result line per claim (all modes merged: a claim's modes have consecutive positions), each
    with the (position, id) of its last item: the keyset cursor that resumes after it. Every line is
    validated by its contract (`ClaimResult`) as it is built: pydantic-core does so in ~5 µs, a sixth of a
    line's cost (measured; building the model unvalidated was no cheaper)."""
    smin = float(job.options.get("supported_min", 0.8))
    cmax = float(job.options.get("contradicted_max", 0.2))
    claim_rules.validate_cutoffs(smin, cmax)  # once, for `_verdict`
    current: dict[str, Any] | None = None
    cursor = (-1, -1)
    for row, output in _outputs(session, job, rows):
        pos, item_id, custom_id, mode, claim, label = row[:6]
        if current is None or current["custom_id"] != custom_id:
            if current is not None:
                yield cursor, ClaimResult.model_validate(current)
            current = {"custom_id": custom_id, "claim": claim, "label": label, "results": {}}
        current["results"][mode] = _mode_result((smin, cmax), row, output)
        cursor = (pos, item_id)
    if current is not None:
        yield cursor, ClaimResult.model_validate(current)


def iter_claim_results(session: Session, job: Job) -> Iterator[ClaimResult]:
    """One result per claim (all modes merged), in input order, streamed in constant memory."""
    rows = session.execute(
        select(*_RESULT_COLUMNS)
        .where(Item.job_id == job.id)
        .order_by(Item.position)  # a claim's modes have consecutive positions
        .execution_options(yield_per=2_000)
    )
    # Closed explicitly: a client that stops reading closes this generator mid-way, and a server-side
    # cursor dropped without close() leaks until the connection is reset.
    try:
        for _cursor, record in _group_results(session, job, cast("Iterable[ResultRow]", rows)):
            yield record
    finally:
        rows.close()


def claim_results_page(
    session: Session, job: Job, after: tuple[int, int], limit: int
) -> list[tuple[tuple[int, int], ClaimResult]]:
    """The results of the claims after the keyset cursor `after` (position, id), from at most `limit`
    items, with each record's cursor: one short query, for exports read in chunks (web/exports.py).

    The page's last claim is always left for the next page (unless it is the page's only one), so a
    claim whose modes continue past the page is never split."""
    rows = page_rows(session, job.id, _RESULT_COLUMNS, after=after, limit=limit)
    records = list(_group_results(session, job, cast("list[ResultRow]", rows)))
    if len(records) > 1:
        # The page may end inside a claim (its window or limit cut it); the next page starts with it.
        records.pop()
    return records


def claim_results_of(
    session: Session, job: Job, custom_ids: Sequence[str]
) -> tuple[list[ClaimResult], int | None]:
    """The results of these claims (as `iter_claim_results` gives them), in input order, and the highest
    position among their items: one page of the report, read through the (job_id, custom_id, mode) index."""
    if not custom_ids:
        return [], None
    rows = session.execute(
        select(*_RESULT_COLUMNS)
        .where(Item.job_id == job.id, Item.custom_id.in_(list(custom_ids)))
        .order_by(Item.position)
    ).all()
    last = max((int(r[0]) for r in rows), default=None)
    records = [record for _cursor, record in _group_results(session, job, cast("list[ResultRow]", rows))]
    return records, last


class _ClaimStager:
    """Takes each valid claim row from the checker into the COPY, as `claim_units` would make its items
    (whether the claim fits its grounding query is decided here, once per row), counting items for the
    quota as it goes."""

    def __init__(
        self, staged: bulk_load.StagedRows, modes: int, grounded: bool, quota: Callable[[int], None]
    ) -> None:
        self._staged = staged
        self._modes = modes
        self._grounded = grounded
        self._quota = quota
        self.items = 0
        self.outside = 0
        self.outside_ids: list[str] = []

    def append(self, row: claim_rules.ClaimRow, /) -> None:
        in_query = True
        if self._grounded and claim_rules.claim_outside_query(row.claim):
            in_query = False
            self.outside += 1
            if len(self.outside_ids) < 10:
                self.outside_ids.append(row.id)
        self.items += self._modes
        self._quota(self.items)
        self._staged.add(
            row.id, row.claim, label=row.label, kind=row.kind, source=row.source, in_query=in_query
        )


def load_claim_rows(
    session: Session,
    job: Job,
    options: ClaimsOptions,
    lines: Iterable[RowLine],
    *,
    limits: RowLimits,
    quota: Callable[[int], None],
) -> Staged:
    """The claims kind's streamed intake (`jobs.kinds.StreamLoad`): each valid row is staged as it is read
    (whether it fits its grounding query decided here); `build_claim_items` makes the items."""
    modes = options.modes
    with bulk_load.StagedRows(session, job.id) as staged:
        stager = _ClaimStager(staged, len(modes), "grounded" in modes, quota)
        claim_rules.stream_rows(
            lines, stager, max_rows=limits.max_rows, max_claim_bytes=limits.max_claim_bytes
        )
    warnings = [outside_query_warning(stager.outside, stager.outside_ids)] if stager.outside else []
    if flash := flash_warning(options.model, options.pack_size):
        warnings.append(flash)
    return Staged(rows=staged.count, items=stager.items, warnings=warnings)


def build_claim_items(session: Session, job: Job) -> int:
    """An item per staged claim and mode, made in SQL, and repeats linked (`jobs.kinds.JobKind.build`)."""
    opts = job.options
    modes = claim_rules.modes_for(opts.get("mode", "grounded"))
    items = bulk_load.insert_claim_items(
        session, job.id, model=opts.get("model") or DEFAULT_MODEL, modes=modes
    )
    bulk_load.link_repeats(session, job.id)
    pack_size = int(opts.get("pack_size") or 1)
    if pack_size > 1:
        pack_in_order(session, job.id, "claim", pack_size)
    return items
