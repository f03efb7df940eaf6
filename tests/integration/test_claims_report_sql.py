"""The claims report's SQL reads against the Python rules, on real Postgres.

- the cutoff replay (jobs.claims_report.score_counts, flips_at) equals checks.claims.scorecard and
  checks.claims.flips for random probabilities, labels, failures and cutoffs (hypothesis), including
  probabilities exactly on a cutoff;
- keyset pages (claim_page) walk every claim matching each filter once, in input order, none missing;
- keyset pages of an answer job's questions (jobs.queries.question_page) walk every question once;
- the counts a list shows (jobs.progress.jobs_counts) equal a count of the items while jobs run and after
  they end, when they are read from the job row.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update
from sqlalchemy.orm import Session

from checks import claims as claim_rules
from checks.pricing import DEFAULT_MODEL
from jobs.claims import iter_claim_results
from jobs.claims_report import calibration_sums, claim_page, flips_at, matching_claims, score_counts
from jobs.finalize import maybe_finalize
from jobs.progress import job_counts, jobs_counts, request_counts
from jobs.queries import parse_question_cursor, question_page
from jobs.stages import iter_question_reports
from jobs.tenancy import get_or_create_tenant
from models import Item, Job
from web.charts import reliability_bins
from web.pages_claims import SHOW_CHOICES, _row_view

pytestmark = pytest.mark.integration

MODES = ("ungrounded", "grounded")
# A claim in one mode: its probability (None: the item failed) and, per claim, a label.
Outcome = tuple[float | None, float | None]
CUTOFF_EDGES = [0.0, 0.2, 0.5, 0.8, 1.0, 0.30000000000000004]


def _job(db: Session, status: str = "completed", mode: str = "both") -> Job:
    tenant = get_or_create_tenant(db, f"t-{uuid.uuid4().hex[:10]}")
    job = Job(
        tenant_id=tenant.id,
        kind="claims",
        status=status,
        options={"mode": mode, "model": DEFAULT_MODEL, "supported_min": 0.8, "contradicted_max": 0.2},
        total_items=0,
    )
    db.add(job)
    db.flush()
    return job


def _store(db: Session, job: Job, claims: list[tuple[bool | None, float | None, float | None]]) -> None:
    """Two items per claim (ungrounded, grounded) at consecutive positions, as intake stores them."""
    items: list[Item] = []
    for i, (label, p_u, p_g) in enumerate(claims):
        for j, (mode, p) in enumerate(zip(MODES, (p_u, p_g), strict=True)):
            done = p is not None
            items.append(
                Item(
                    job_id=job.id,
                    stage="claim",
                    position=2 * i + j,
                    custom_id=f"c{i:04d}",
                    mode=mode,
                    input={"claim": f"claim {i}", "label": label, "in_query": True},
                    output={"p": p, "request_id": f"r{i}{mode}"} if done else None,
                    status="done" if done else "failed",
                    error=None if done else "upstream 500",
                )
            )
    db.add_all(items)
    job.total_items = len(items)
    db.flush()


probabilities = st.one_of(st.none(), st.sampled_from(CUTOFF_EDGES), st.floats(0.0, 1.0))
claim_rows = st.lists(
    st.tuples(st.sampled_from([None, True, False]), probabilities, probabilities), min_size=1, max_size=30
)
cutoffs = st.tuples(
    st.one_of(st.sampled_from(CUTOFF_EDGES), st.floats(0.0, 1.0)),
    st.one_of(st.sampled_from(CUTOFF_EDGES), st.floats(0.0, 1.0)),
).filter(lambda c: c[1] < c[0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(claims=claim_rows, cut=cutoffs)
def test_replay_in_sql_equals_the_python_rule(
    db: Session, claims: list[tuple[bool | None, float | None, float | None]], cut: tuple[float, float]
) -> None:
    smin, cmax = cut
    job = _job(db)
    _store(db, job, claims)
    counts = score_counts(db, job.id, smin, cmax)
    for m, mode in enumerate(MODES):
        outcomes = [
            claim_rules.Outcome(
                id=f"c{i:04d}",
                label=label,
                p=row[m],
                input_tokens=0,
                latency_s=0.0,
                queue_wait_s=0.0,
                attempts=1,
                search_results=0,
                error=None if row[m] is not None else "failed",
            )
            for i, (label, *row) in enumerate(claims)
        ]
        card = claim_rules.scorecard(
            outcomes, mode=mode, model=DEFAULT_MODEL, supported_min=smin, contradicted_max=cmax
        ).as_dict()
        replayed = counts[mode].card_figures()
        assert replayed == {k: card[k] for k in replayed}, (mode, smin, cmax)
        points = [(row[m], bool(label)) for label, *row in claims if label is not None and row[m] is not None]
        expected_bins = [b for b in reliability_bins(points) if b.count]
        got = calibration_sums(db, job.id).get(mode, {})
        assert {int(k): (int(v[0]), int(v[1])) for k, v in got.items()} == {
            round(b.lo * 10): (b.count, b.true_count) for b in expected_bins
        }
    python_flips = claim_rules.flips(
        {f"c{i:04d}": u for i, (_l, u, _g) in enumerate(claims)},
        {f"c{i:04d}": g for i, (_l, _u, g) in enumerate(claims)},
        supported_min=smin,
        contradicted_max=cmax,
    )
    total, first = flips_at(db, job.id, smin, cmax, 5)
    assert total == len(python_flips)
    assert first == [f.as_dict() for f in python_flips[:5]]


def _walk(db: Session, job: Job, show: str, limit: int, smin: float, cmax: float) -> list[list[str]]:
    pages: list[list[str]] = []
    after = -1
    while True:
        page = claim_page(db, job, modes=MODES, show=show, after=after, limit=limit, smin=smin, cmax=cmax)
        pages.append([r.custom_id for r in page.records])
        if page.next_after is None:
            return pages
        assert page.next_after > after
        after = page.next_after


@pytest.mark.parametrize("limit", [1, 3, 7, 100])
def test_keyset_pages_show_each_matching_claim_once_in_order(db: Session, limit: int) -> None:
    # Ties everywhere: many equal probabilities, labels and verdicts, so only the position orders them.
    rows: list[tuple[bool | None, float | None, float | None]] = []
    for i in range(41):
        rows.append(
            (
                [True, False, None][i % 3],
                [0.9, 0.5, 0.1, None][i % 4],
                [0.9, 0.1, 0.5, 0.9, None][i % 5],
            )
        )
    job = _job(db)
    _store(db, job, rows)
    smin, cmax = 0.8, 0.2
    records = list(iter_claim_results(db, job))
    for show in SHOW_CHOICES:
        expected = [r.custom_id for r in records if _row_view(r, list(MODES), smin, cmax).matches(show)]
        pages = _walk(db, job, show, limit, smin, cmax)
        shown = [cid for page in pages for cid in page]
        assert shown == expected, show  # none twice, none missing, input order
        assert all(len(p) == limit for p in pages[:-1]), show  # full pages until the last one
        if show not in ("all", "flips"):
            assert matching_claims(db, job.id, show, smin, cmax) == len(expected)
    # Other cutoffs change which claims match, and the pages follow.
    records_at = [_row_view(r, list(MODES), 0.95, 0.45) for r in records]
    pages = _walk(db, job, "review", limit, 0.95, 0.45)
    assert [c for p in pages for c in p] == [r.custom_id for r in records_at if r.matches("review")]


def test_page_records_carry_full_results(db: Session) -> None:
    job = _job(db)
    _store(db, job, [(True, 0.9, 0.95), (False, None, 0.1)])
    page = claim_page(db, job, modes=MODES, show="all", after=-1, limit=10, smin=0.8, cmax=0.2)
    assert page.next_after is None
    assert page.records == list(iter_claim_results(db, job))


def _set_status(db: Session, job: Job, positions: range, status: str) -> None:
    db.execute(
        update(Item)
        .where(Item.job_id == job.id, Item.position.in_(list(positions)))
        .values(status=status, output=None)
    )


def test_counts_equal_the_items_while_running_and_after_finalize(db: Session) -> None:
    jobs = [_job(db, status="in_progress") for _ in range(3)]
    for n, job in enumerate(jobs):
        _store(db, job, [(True, 0.9, 0.1)] * (4 + n))
        _set_status(db, job, range(0, 3 + n), "pending")
        _set_status(db, job, range(3 + n, 4 + n), "running")
    db.flush()
    listed = jobs_counts(db, jobs)
    for job in jobs:
        assert listed[job.id] == request_counts(db, job.id) == job_counts(db, job)
        assert listed[job.id].pending > 0 and listed[job.id].running == 1
    # Items settle while the job runs: the list follows them.
    first = jobs[0]
    _set_status(db, first, range(0, 4), "failed")
    db.flush()
    assert jobs_counts(db, jobs)[first.id] == request_counts(db, first.id)
    # Every item terminal: the job ends and its counts are stored with it, equal to the items'.
    db.execute(
        update(Item)
        .where(Item.job_id == first.id, Item.status.in_(("pending", "running")))
        .values(status="skipped")
    )
    db.flush()
    assert maybe_finalize(db, first.id)
    db.refresh(first)
    assert first.status == "completed"
    truth = request_counts(db, first.id)
    assert first.request_counts == truth.as_dict()
    assert jobs_counts(db, jobs)[first.id] == truth == job_counts(db, first)
    # The stored counts are what an ended job shows: prove it reads them, not the items.
    first.request_counts = {**truth.as_dict(), "failed": 99}
    db.flush()
    assert jobs_counts(db, [first])[first.id].failed == 99
    # A live job never reads stored counts (a retry reopens the job; its items are counted again).
    first.status = "queued"
    db.flush()
    assert jobs_counts(db, [first])[first.id] == truth


def test_finalize_stores_the_calibration_the_page_reads(db: Session) -> None:
    job = _job(db, status="in_progress")
    _store(db, job, [(True, 0.93, 0.91), (False, 0.12, 0.35), (None, 0.5, None), (True, 0.05, 0.95)])
    assert maybe_finalize(db, job.id)
    db.refresh(job)
    summary: dict[str, Any] = job.summary or {}
    assert summary["calibration"] == calibration_sums(db, job.id)
    assert summary["calibration"]["ungrounded"]["9"][:2] == [1, 1]
    assert job.request_counts == {
        "total": 8,
        "completed": 7,
        "failed": 1,
        "skipped": 0,
        "pending": 0,
        "running": 0,
    }


@pytest.mark.parametrize("limit", [1, 2, 5, 50])
def test_question_pages_walk_every_question_once_even_with_equal_positions(db: Session, limit: int) -> None:
    tenant = get_or_create_tenant(db, f"t-{uuid.uuid4().hex[:10]}")
    job = Job(tenant_id=tenant.id, kind="answer", status="completed", options={}, total_items=0)
    db.add(job)
    db.flush()
    positions = [0, 1, 1, 2, 3, 3, 3, 4, 5, 6, 7]  # ties: only the item id orders them
    questions = [
        Item(
            job_id=job.id,
            stage="question",
            position=pos,
            custom_id=f"q{n:02d}",
            input={"question": f"Question {n}?"},
            output={"report": {"n": n}},
            status="done",
        )
        for n, pos in enumerate(positions)
    ]
    db.add_all(questions)
    db.flush()
    # A child item is never a question of its own.
    db.add(Item(job_id=job.id, stage="sentence", position=0, custom_id="q00", mode="s1", input={},
                parent_id=questions[0].id, status="done"))  # fmt: skip
    db.flush()
    expected = [e["custom_id"] for e in iter_question_reports(db, job)]
    assert len(expected) == len(positions)
    seen: list[str] = []
    cursor: tuple[int, int] | None = None
    while True:
        page = question_page(db, job, after=cursor, limit=limit)
        assert len(page.entries) <= limit
        seen += [e["custom_id"] for e in page.entries]
        if page.next_after is None:
            break
        cursor = parse_question_cursor(page.next_after)
        assert cursor is not None
    assert seen == expected
    assert page.entries == list(iter_question_reports(db, job))[len(expected) - len(page.entries) :]
    assert parse_question_cursor("junk") is None and parse_question_cursor("3:x") is None
