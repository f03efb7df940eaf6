"""The stage machine of staged kinds (`answer`, `quote`): a question item, its children, then its report.

answer: question (Agent call) → `sentence` children → `investigation` children for the first flagged
sentences → report. quote: question (Search call) → `result` children → one `compare` child when some
candidate qualifies (and every result was ranked) → report.

`advance_question` is the only way a question moves on, and it reads nothing but the database: when the
question and all its children are settled it either creates the next stage's children or builds the
report. It is idempotent (the question row is locked, and a report that matches the children it was
built from is not rebuilt), so chord bodies, the sweeper and a retry may all call it. Children are
created pending in the transaction of the caller, so the job never looks finished in between, and the
scheduler sends them in its fair order with the rest of the job's work.

A report is stored on the question item (`output["report"]`) with a marker: the count of its children
by status when it was built (`output["children"]`). A report whose marker no longer matches (a child was
retried) is stale and is built again; a job is ready to finalize only when every question has a
current report.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from sqlalchemy import func, insert, select, text, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from checks import questions as question_rules
from checks.contracts import Contract, QuestionInput, StageRecord, Usage
from checks.ndjson import RowLine
from checks.options import QuestionsOptions
from checks.packing import flash_warning
from checks.questions import QuestionRow
from checks.recipes import RowLimits, recipe_for
from jobs import bulk_load
from jobs.intake import UnitSpec
from jobs.items import record_calls_of, usage_of_rows
from jobs.keyset import page_rows
from jobs.kinds import KINDS, JobKind, Staged, StageMachine, StreamLoad, Units
from jobs.packs import shares
from jobs.records import CallRow, ClaimedItem
from jobs.usage import usage_of_outputs
from models import ITEM_TERMINAL_STATUSES, Item, Job, JobStatus, utcnow

log = logging.getLogger("factgate.jobs")

QUESTION = "question"
# A cancelling job creates no new work, but still gets its reports.
SPAWNING_JOB_STATUSES = tuple(sorted(JobStatus.running()))
ADVANCING_JOB_STATUSES = (*SPAWNING_JOB_STATUSES, JobStatus.CANCELLING)


def _machine(kind: str) -> StageMachine | None:
    part = KINDS.find(kind)
    return part.machine if part is not None else None


def question_units(rows: Sequence[QuestionRow], kind: str) -> list[UnitSpec]:
    """One entry item per row; custom_id is the caller's id. The input names the kind as well as the
    question (`QuestionInput`, as jobs/bulk_load.py writes it too); workers find the handler of the shared
    `question` stage by the job's kind (`ClaimedItem.kind`)."""
    recipe = recipe_for(kind)
    if not recipe.staged:
        raise ValueError(f"{kind!r} is not a question kind (it has one stage)")
    return [
        UnitSpec(
            stage=recipe.entry_stage,
            custom_id=row.id,
            mode="",
            input=QuestionInput(kind=kind, question=row.question).dump(),
            endpoint=recipe.stages[0].endpoint,
        )
        for row in rows
    ]


class _QuestionStager:
    """Takes each valid question row into the COPY, counting items for the quota."""

    def __init__(self, staged: bulk_load.StagedRows, quota: Callable[[int], None]) -> None:
        self._staged = staged
        self._quota = quota
        self.items = 0

    def append(self, row: QuestionRow, /) -> None:
        self.items += 1
        self._quota(self.items)
        self._staged.add(row.id, row.question)


def load_question_rows(
    session: Session,
    job: Job,
    options: object,
    lines: Iterable[RowLine],
    *,
    limits: RowLimits,
    quota: Callable[[int], None],
) -> Staged:
    """A staged kind's streamed intake (`jobs.kinds.StreamLoad`): each valid question is staged as it is
    read; `build_question_items` makes the entry items."""
    with bulk_load.StagedRows(session, job.id) as staged:
        stager = _QuestionStager(staged, quota)
        question_rules.stream_question_rows(lines, stager, max_rows=limits.max_rows)
    return Staged(rows=staged.count, items=stager.items, warnings=question_warnings(options))


def question_warnings(options: object) -> list[str]:
    """The intake warnings a question job's options earn: a flash model packed (docs/spec.md §9.3)."""
    if not isinstance(options, QuestionsOptions):
        return []
    flash = flash_warning(options.model, options.pack_size)
    return [flash] if flash else []


def build_question_items(session: Session, job: Job) -> int:
    """One entry item per staged question, as `question_units` would make it (`jobs.kinds.JobKind.build`)."""
    recipe = recipe_for(job.kind)
    return bulk_load.insert_question_items(
        session, job.id, kind=job.kind, stage=recipe.entry_stage, endpoint=recipe.stages[0].endpoint
    )


def staged_kind(
    name: str,
    machine: StageMachine,
    *,
    units: Units | None = None,
    load: StreamLoad = load_question_rows,
    build: Callable[[Session, Job], int] = build_question_items,
) -> JobKind:
    """The `JobKind` of a staged kind: rows become entry items (a question each unless the kind says how:
    `units`, `load`, `build`), the stage machine does the rest, and the job is ready once every entry item
    has a current report."""

    def question_rows(rows: Sequence[QuestionRow], options: object) -> tuple[list[UnitSpec], list[str]]:
        return question_units(rows, name), question_warnings(options)

    return JobKind(
        name,
        units=units or question_rows,
        summarize=questions_summary,
        results_page=question_results_page,
        machine=machine,
        ready=lambda session, job: questions_ready(session, job.id),
        load=load,
        build=build,
    )


@dataclass(frozen=True)
class Step:
    """What one `advance_question` call did."""

    job_id: uuid.UUID | None
    question_id: int
    spawned: list[int] = field(default_factory=list)  # new children, to send after commit
    reported: bool = False  # a report was built (the job may be ready to finalize)


def _counts(statuses: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


@dataclass(frozen=True)
class Answered:
    """What the tenant's verdict store answered for a new pack (or lone item) before it was ever sent: each
    member's output, in order, and the call rows that stand for the request (one `reused` row)."""

    outputs: list[dict[str, Any]]
    calls: list[CallRow]


class StoreAnswers(Protocol):
    """Answers a group of new items from the verdict store, or None when the store cannot answer all of
    them (the group is then dispatched as usual); it reads the store in the caller's transaction. Given by
    the worker layer, which runs the stage's
    handler against the store alone (workers/reuse.py:store_answers)."""

    def __call__(self, session: Session, group: Sequence[ClaimedItem]) -> Answered | None: ...


def _groups(units: Sequence[UnitSpec]) -> list[list[int]]:
    """Unit indexes by request: a pack's units together, every other unit alone; in unit order."""
    groups: dict[object, list[int]] = {}
    for n, unit in enumerate(units):
        groups.setdefault(("pack", unit.pack) if unit.pack is not None else n, []).append(n)
    return list(groups.values())


def _claimed(job: Job, item: Item) -> ClaimedItem:
    """A new item as its first claim would hold it (attempt 1)."""
    return ClaimedItem(
        id=item.id,
        job_id=item.job_id,
        tenant_id=job.tenant_id,
        stage=item.stage,
        mode=item.mode,
        custom_id=item.custom_id,
        input=dict(item.input),
        token=1,
        options=dict(job.options or {}),
        dedupe_key=item.dedupe_key,
        kind=job.kind,
    )


def _answered_state(items: Sequence[Item], answered: Answered) -> None:
    """Give a group answered from the verdict store the state of a first try that sent nothing: each
    member done with its output and its share (as jobs/packs.py settles a pack that was sent). Its call
    row is stored once the items exist (`_spawn`)."""
    packed = len(items) > 1
    parts = shares(usage_of_rows(answered.calls), len(items))
    now = utcnow()
    for position, (item, output, usage) in enumerate(zip(items, answered.outputs, parts, strict=True)):
        out = dict(output)
        if packed:
            out["pack"] = {"head": items[0].id, "size": len(items), "position": position}
        item.output = {**out, "usage": usage.as_dict()}
        item.status = "done"
        item.attempts = 1
        item.finished_at = now


# One statement for a whole stage's new ids, so its children are inserted once, in their final state
# (pack heads named, store answers settled) instead of inserted and then updated.
_RESERVE_ITEM_IDS = text("SELECT nextval(pg_get_serial_sequence('items', 'id')) FROM generate_series(1, :n)")


def _give_ids(session: Session, items: Sequence[Item]) -> bool:
    """Number new items before they are inserted (Postgres: from the table's own sequence, in order); True
    when they were so numbered, False when they had to be inserted to get their ids (SQLite)."""
    if session.get_bind().dialect.name != "postgresql":
        session.add_all(items)
        session.flush()
        return False
    ids = sorted(int(i) for i in session.scalars(_RESERVE_ITEM_IDS, {"n": len(items)}))
    for item, item_id in zip(items, ids, strict=True):
        item.id = item_id
    return True


@dataclass
class _Growth:
    """One question being moved on by `advance_questions`: its job, flow and children so far."""

    question: Item
    job: Job
    flow: StageMachine
    children: list[Item]
    spawned: list[int] = field(default_factory=list)
    units: list[UnitSpec] = field(default_factory=list)  # planned and not made: the report says incomplete


def _new_children(job: Job, question: Item, units: Sequence[UnitSpec]) -> list[Item]:
    """The next stage's children, pending and undispatched; their endpoint is their stage's."""
    recipe = recipe_for(job.kind)
    return [
        Item(
            job_id=question.job_id,
            parent_id=question.id,
            stage=u.stage,
            position=question.position,  # children sort with their question
            custom_id=u.custom_id,
            mode=u.mode,
            endpoint=recipe.endpoint_of(u.stage),
            input=u.input,
            status="pending",
            attempts=0,
            dedupe_key=u.dedupe_key,
        )
        for u in units
    ]


_INSERTED = (
    "id", "job_id", "parent_id", "stage", "position", "custom_id", "mode", "endpoint", "input", "output",
    "status", "attempts", "dedupe_key", "pack_of", "finished_at",
)  # fmt: skip


def _insert_row(item: Item) -> dict[str, object]:
    """What `_spawn` sets on a new child, by column."""
    return {name: getattr(item, name) for name in _INSERTED}


def _spawn(
    session: Session,
    planned: Sequence[tuple[Job, Item, Sequence[UnitSpec]]],
    answer_now: StoreAnswers | None = None,
) -> list[tuple[list[Item], bool]]:
    """Create the next stage's children of each planned question, in one INSERT: the scheduler sends them
    in its fair order, like any other work of the job.

    With `answer_now`, a group the tenant's verdict store answers whole is settled here, in the same
    transaction, instead of being dispatched: a re-run of unchanged rows moves each question to its report
    without a task per request. Returns, per question, its new items and whether every one was so
    answered."""
    made = [(job, question, units, _new_children(job, question, units)) for job, question, units in planned]
    every = [item for *_, items in made for item in items]
    numbered = _give_ids(session, every)
    answered: list[tuple[Job, list[Item], Answered]] = []
    complete: list[bool] = []
    for job, _question, units, items in made:
        groups = [[items[n] for n in group] for group in _groups(units)]
        for group in groups:
            for member in group[1:]:
                member.pack_of = group[0].id  # a pack: the first is its head (jobs/packs.py)
        settled = 0
        if answer_now is not None:
            for group in groups:
                if any(i.dedupe_key is not None for i in group):
                    continue  # a repeat's leader settles it (jobs/items.py); keep that one path
                answer = answer_now(session, [_claimed(job, i) for i in group])
                if answer is not None and len(answer.outputs) == len(group):
                    _answered_state(group, answer)
                    answered.append((job, group, answer))
                    settled += len(group)
        complete.append(settled == len(items))
    if numbered:
        # Numbered and final: one INSERT, none of the unit of work's bookkeeping (the items stay transient
        # here; the caller reads them, nothing writes them again).
        session.execute(insert(Item), [_insert_row(i) for i in every])
    else:
        session.flush()
    # Each answered group's call row once, on its head, naming every member (as a sent pack stores it).
    record_calls_of(
        session,
        [
            (_claimed(job, group[0]), answer.calls, [i.id for i in group] if len(group) > 1 else None)
            for job, group, answer in answered
        ],
    )
    return [(items, whole) for (*_, items), whole in zip(made, complete, strict=True)]


class ErrorReport(StageRecord):
    """Stands in for a report that could not be built (or was refused when stored), so the job still
    finishes and says why."""

    kind: str
    question: str | None
    status: str
    error: str
    errors: list[str]
    built_at: str
    summary: dict[str, int]
    usage: Usage | None = None


def _error_report(job: Job, question: Item, exc: Exception) -> ErrorReport:
    return ErrorReport(
        kind=job.kind,
        question=asked if isinstance(asked := (question.input or {}).get("question"), str) else None,
        status="failed",
        error=f"the report could not be built: {type(exc).__name__}: {exc}",
        errors=[],
        built_at=utcnow().isoformat(),
        summary={},
    )


def stored_report(
    flow: StageMachine, job: Job, question: Item, children: Sequence[Item], *, incomplete: bool
) -> dict[str, Any]:
    """The report to store on an entry item: the kind's, validated by its contract (a report with a field
    the contract lacks, or a value of the wrong type, is refused), else an `ErrorReport`; with `usage`."""
    report: Contract
    try:
        report = flow.report.model_validate(flow.build_report(job, question, children, incomplete=incomplete))
    except Exception as exc:
        log.exception("building the report of question %s of job %s failed", question.id, job.id)
        report = _error_report(job, question, exc)
    # What the whole question cost: every attempt of every try of the question and of its children.
    usage = usage_of_outputs([question.output, *(c.output for c in children)])
    return report.model_copy(update={"usage": usage}).dump()


def advance_question(session: Session, question_id: int, answer_now: StoreAnswers | None = None) -> Step:
    """Move one question on if everything it waits for is settled (see the module docstring). With
    `answer_now`, children the verdict store answers whole are settled as they are created (`_spawn`), and
    the question moves on again at once when that settled them all."""
    return advance_questions(session, [question_id], answer_now)[0]


def advance_questions(
    session: Session, question_ids: Sequence[int], answer_now: StoreAnswers | None = None
) -> list[Step]:
    """`advance_question` for several questions at once, one `Step` each in the order given: they are
    locked, read, given their children and reported in a few statements whatever their number (the
    `run_items` of a re-run moves a dozen answers on together)."""
    locked = {
        q.id: q
        for q in session.scalars(
            select(Item)
            .where(Item.id.in_(list(question_ids)))
            .order_by(Item.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    }
    steps: dict[int, Step] = {}
    growing: dict[int, _Growth] = {}
    for question_id in question_ids:
        question = locked.get(question_id)
        if question is None or question.parent_id is not None:
            steps[question_id] = Step(None, question_id)
            continue
        job = session.get(Job, question.job_id)
        flow = _machine(job.kind) if job is not None else None
        if job is None or flow is None or job.status not in ADVANCING_JOB_STATUSES:
            steps[question_id] = Step(question.job_id, question_id)
        elif question.status not in ITEM_TERMINAL_STATUSES:
            steps[question_id] = Step(job.id, question_id)
        else:
            growing[question_id] = _Growth(question, job, flow, [])
    if growing:
        for child in session.scalars(
            select(Item)
            .where(Item.parent_id.in_(list(growing)))
            .order_by(Item.id)
            .execution_options(populate_existing=True)
        ):
            growing[int(child.parent_id or 0)].children.append(child)
    reports: list[_Growth] = []
    while growing:
        planned: list[_Growth] = []
        for question_id, g in list(growing.items()):
            step = _next(g)
            if step is None:
                planned.append(g)
                continue
            del growing[question_id]
            if step.reported:
                reports.append(g)
            else:
                steps[question_id] = step
        if not planned:
            break
        spawned = _spawn(session, [(g.job, g.question, g.units) for g in planned], answer_now)
        for g, (new, all_answered) in zip(planned, spawned, strict=True):
            g.spawned += [i.id for i in new]
            g.units = []
            if all_answered:
                g.children += new  # all settled already: plan the next stage, or the report, from them
            else:
                del growing[g.question.id]
                steps[g.question.id] = Step(g.job.id, g.question.id, spawned=g.spawned)
    outputs: list[dict[str, Any]] = []
    for g in reports:
        out = _reported(g)
        outputs.append({"id": g.question.id, "output": out})
        set_committed_value(g.question, "output", out)  # as stored, without writing it twice
        steps[g.question.id] = Step(g.job.id, g.question.id, spawned=g.spawned, reported=True)
    if outputs:
        session.execute(update(Item), outputs)  # by primary key: one statement for every report
    return [steps[question_id] for question_id in question_ids]


def _next(g: _Growth) -> Step | None:
    """What a settled question does next: wait for its children (a `Step`), nothing (its report is
    current), be reported (a `Step` with `reported`; `g.units` holds what was planned and not made), or
    grow: None, with the units to create in `g.units`."""
    question, job = g.question, g.job
    if any(c.status not in ITEM_TERMINAL_STATUSES for c in g.children):
        return Step(job.id, question.id, spawned=g.spawned)
    out = question.output or {}
    if "report" in out and out.get("children") == _counts([c.status for c in g.children]):
        return Step(job.id, question.id, spawned=g.spawned)  # already current
    try:
        g.units = list(g.flow.plan(job, question, g.children))
    except Exception:
        log.exception("planning question %s of job %s failed", question.id, job.id)
        g.units = []
    if not g.units or job.status not in SPAWNING_JOB_STATUSES:
        return Step(job.id, question.id, spawned=g.spawned, reported=True)
    return None


def _reported(g: _Growth) -> dict[str, Any]:
    """The question's output with its report, built from its children as they stand."""
    question, job, children = g.question, g.job, g.children
    # Cancelled mid-way: work that was planned, or children skipped by the cancel, is missing.
    stopped = job.status == JobStatus.CANCELLING and any(c.status == "skipped" for c in children)
    stored = stored_report(g.flow, job, question, children, incomplete=bool(g.units) or stopped)
    out = dict(question.output or {})
    out.update(
        report=stored,
        report_status=stored.get("status"),
        summary=stored.get("summary"),
        children=_counts([c.status for c in children]),
    )
    return out


# --- which questions wait, and is the job ready -------------------------------------------------------


def _child_counts(
    session: Session, job_id: uuid.UUID, among: Sequence[int] | None = None
) -> dict[int, dict[str, int]]:
    stmt = select(Item.parent_id, Item.status, func.count()).where(
        Item.job_id == job_id, Item.parent_id.is_not(None)
    )
    if among is not None:
        stmt = stmt.where(Item.parent_id.in_(list(among)))
    rows = session.execute(stmt.group_by(Item.parent_id, Item.status))
    counts: dict[int, dict[str, int]] = {}
    for parent_id, status, n in rows:
        counts.setdefault(int(parent_id or 0), {})[str(status)] = int(n)
    return {k: dict(sorted(v.items())) for k, v in counts.items()}


def _question_markers(
    session: Session, job_id: uuid.UUID, among: Sequence[int] | None = None
) -> Iterator[tuple[int, str, Any]]:
    stmt = select(Item.id, Item.status, Item.output["children"]).where(
        Item.job_id == job_id, Item.parent_id.is_(None)
    )
    if among is not None:
        stmt = stmt.where(Item.id.in_(list(among)))
    rows = session.execute(stmt.order_by(Item.position, Item.id).execution_options(yield_per=5_000))
    try:
        for item_id, status, marker in rows:
            yield int(item_id), str(status), marker
    finally:
        rows.close()


def stalled_questions(session: Session, job_id: uuid.UUID, among: Sequence[int] | None = None) -> list[int]:
    """Settled questions whose children are all settled but whose report is missing or stale (of the
    questions `among`, when given: a window's, in two reads rather than a transaction per question).

    Normally the task that settled a question's last child advances it at once; when that failed, or Redis
    lost a message, these are what the sweeper and the window bodies advance instead.
    """
    job = session.get(Job, job_id)
    if job is None or _machine(job.kind) is None:
        return []
    if among is not None and not among:
        return []
    counts = _child_counts(session, job_id, among)
    stalled: list[int] = []
    for item_id, status, marker in _question_markers(session, job_id, among):
        if status not in ITEM_TERMINAL_STATUSES:
            continue
        children = counts.get(item_id, {})
        if any(s not in ITEM_TERMINAL_STATUSES for s in children):
            continue
        if marker != children:
            stalled.append(item_id)
    return stalled


def questions_ready(session: Session, job_id: uuid.UUID) -> bool:
    """Every question is settled and has a report built from its current children."""
    counts = _child_counts(session, job_id)
    return all(
        status in ITEM_TERMINAL_STATUSES and marker == counts.get(item_id, {})
        for item_id, status, marker in _question_markers(session, job_id)
    )


# --- reading reports -----------------------------------------------------------------------------------


def _report_rows(session: Session, job: Job, custom_id: str | None = None) -> Iterator[dict[str, Any]]:
    stmt = (
        select(Item.id, Item.custom_id, Item.input, Item.status, Item.output["report"])
        .where(Item.job_id == job.id, Item.parent_id.is_(None))
        .order_by(Item.position, Item.id)
    )
    if custom_id is not None:
        stmt = stmt.where(Item.custom_id == custom_id)
    rows = session.execute(stmt.execution_options(yield_per=500))
    try:
        for item_id, cid, input_, status, report in rows:
            yield {
                "custom_id": cid,
                "question": (input_ or {}).get("question"),
                "item_id": int(item_id),
                "status": status,
                "report": report,
            }
    finally:
        rows.close()  # a stream closed mid-way must not leave the server-side cursor open


def iter_question_reports(session: Session, job: Job) -> Iterator[dict[str, Any]]:
    """One entry per question in input order: custom_id, question, item_id, status, report (or None)."""
    yield from _report_rows(session, job)


def get_question_report(session: Session, job: Job, custom_id: str) -> dict[str, Any] | None:
    """The entry of one question, or None when the job has no such question."""
    return next(_report_rows(session, job, custom_id), None)


def iter_question_results(session: Session, job: Job) -> Iterator[Contract]:
    """Results export: one line per question with its report (see `StageMachine.result_line`)."""
    flow = _machine(job.kind)
    assert flow is not None, f"{job.kind} has no stage machine"
    for entry in _report_rows(session, job):
        yield flow.result_line(entry["custom_id"], entry["question"], entry["status"], entry["report"])


def question_results_page(
    session: Session, job: Job, after: tuple[int, int], limit: int
) -> list[tuple[tuple[int, int], Contract]]:
    """Result lines of the questions after the keyset cursor `after` (position, id), at most `limit`,
    each with its cursor: one short query, for exports read in chunks (web/exports.py)."""
    flow = _machine(job.kind)
    assert flow is not None, f"{job.kind} has no stage machine"
    columns = (Item.position, Item.id, Item.custom_id, Item.input, Item.status, Item.output["report"])
    rows = page_rows(session, job.id, columns, after=after, limit=limit, where=(Item.parent_id.is_(None),))
    return [
        # the same line `iter_question_results` gives (the question as stored, like `_report_rows`)
        ((pos, item_id), flow.result_line(cid, cast("str", (input_ or {}).get("question")), status, report))
        for pos, item_id, cid, input_, status, report in rows
    ]


def questions_summary(session: Session, job: Job) -> Contract:
    """The job summary of an answer or quote job: report outcomes and totals over its questions."""
    rows = session.execute(
        select(Item.output["report_status"], Item.output["summary"])
        .where(Item.job_id == job.id, Item.parent_id.is_(None))
        .execution_options(yield_per=5_000)
    )
    try:
        pairs: list[tuple[str | None, Mapping[str, Any] | None]] = [
            (status if isinstance(status, str) else None, summary if isinstance(summary, dict) else None)
            for status, summary in rows
        ]
    finally:
        rows.close()
    flow = _machine(job.kind)
    assert flow is not None, f"{job.kind} has no stage machine"
    return flow.summarize_reports(pairs)
