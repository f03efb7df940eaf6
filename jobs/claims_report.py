"""The claims report's reads that cost what the page shows: figures aggregated in SQL, rows by keyset.

A claim item's answered probability and label are generated columns (`Item.claim_p`, `Item.claim_label`,
migration 0007) held, with status and custom id, in the covering index `ix_items_claim_scores` on
(job_id, mode, position). So:

- `score_counts` replays any pair of cutoffs over the stored probabilities in one grouped query (an
  index-only scan of the job's entries, no item output read, no upstream request) and returns, per mode,
  the verdict and label counts that depend on the cutoffs, plus the calibration bins, which do not;
- `flips_at` compares the two modes' verdicts by joining them on the custom id;
- `claim_page` finds one page of claims matching a filter by keyset on `position` (never OFFSET: page 500
  costs what page 1 costs), then reads the full results of just those claims.

The verdict rule here is checks.claims.verdict written in SQL: p ≥ supported_min → supported, otherwise
p ≤ contradicted_max → contradicted, otherwise review, compared against the unrounded stored float. A
property test holds the two equal for random probabilities and cutoffs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    SQLColumnExpression,
    and_,
    case,
    cast,
    func,
    literal,
    or_,
    select,
)
from sqlalchemy.orm import Session, aliased

from checks import claims as claim_rules
from checks.kinds.claims import ClaimResult
from jobs.claims import claim_results_of
from models import Item, Job

CALIBRATION_BINS = 10  # web/charts.py DEFAULT_BINS


def _supported(p: SQLColumnExpression[Any], smin: float) -> ColumnElement[bool]:
    return p >= smin


def _contradicted(p: SQLColumnExpression[Any], smin: float, cmax: float) -> ColumnElement[bool]:
    return and_(p < smin, p <= cmax)


def _review(p: SQLColumnExpression[Any], smin: float, cmax: float) -> ColumnElement[bool]:
    return and_(p < smin, p > cmax)


def verdict_sql(p: SQLColumnExpression[Any], smin: float, cmax: float) -> ColumnElement[str]:
    """checks.claims.verdict as a SQL expression (NULL when p is NULL)."""
    return case(
        (p >= smin, literal("supported")),
        (p <= cmax, literal("contradicted")),
        (p.is_not(None), literal("review")),
        else_=None,
    )


@dataclass
class ModeCounts:
    """One mode's figures that a change of cutoffs changes (see checks.claims.scorecard for each)."""

    n: int = 0
    errors: int = 0
    supported: int = 0
    contradicted: int = 0
    review: int = 0
    labelled: int = 0
    labelled_errors: int = 0
    labelled_review: int = 0
    missed_failures: int = 0
    false_contradictions: int = 0
    correct: int = 0
    # calibration (labelled, answered): bin index → [count, true_count, sum of p]
    bins: dict[int, list[float]] = field(default_factory=dict)

    @property
    def wrong(self) -> int:
        return self.missed_failures + self.false_contradictions

    def card_figures(self) -> dict[str, Any]:
        """The scorecard keys these counts replace, with the acceptance bounds judged by checks.claims."""
        has_labels = self.labelled > 0
        missed_ok, false_ok, review_ok, acceptance = claim_rules.acceptance_bounds(
            labelled=self.labelled,
            labelled_errors=self.labelled_errors,
            missed_failures=self.missed_failures,
            false_contradictions=self.false_contradictions,
            labelled_review=self.labelled_review,
        )
        return {
            "n": self.n,
            "errors": self.errors,
            "supported": self.supported,
            "contradicted": self.contradicted,
            "review": self.review,
            "labelled": self.labelled,
            "labelled_errors": self.labelled_errors,
            "correct": self.correct if has_labels else None,
            "wrong": self.wrong if has_labels else None,
            "labelled_review": self.labelled_review if has_labels else None,
            "missed_failures": self.missed_failures if has_labels else None,
            "false_contradictions": self.false_contradictions if has_labels else None,
            "missed_failures_ok": missed_ok,
            "false_contradictions_ok": false_ok,
            "review_ok": review_ok,
            "acceptance": acceptance,
        }


def score_counts(session: Session, job_id: uuid.UUID, smin: float, cmax: float) -> dict[str, ModeCounts]:
    """Per mode: verdict and label counts at these cutoffs, and the calibration bins. One grouped query
    over (mode, calibration bin); the caller has checked the cutoffs (checks.options.check_cutoffs)."""
    p, label = Item.claim_p, Item.claim_label
    scored = and_(p.is_not(None), label.is_not(None))
    # min(int(p * bins), bins - 1) as in web.charts.reliability_bins; p is never negative.
    bin_ = case(
        (scored, func.least(cast(func.floor(p * CALIBRATION_BINS), Integer), CALIBRATION_BINS - 1)),
        else_=None,
    )
    if session.get_bind().dialect.name == "sqlite":  # SQLite has min() for two values, not least()
        bin_ = case((scored, func.min(cast(p * CALIBRATION_BINS, Integer), CALIBRATION_BINS - 1)), else_=None)
    bin_col = bin_.label("bin")
    n_if = func.count().filter
    rows = session.execute(
        select(
            Item.mode,
            bin_col,
            func.count(),
            n_if(p.is_(None)),
            n_if(_supported(p, smin)),
            n_if(_contradicted(p, smin, cmax)),
            n_if(_review(p, smin, cmax)),
            n_if(label.is_not(None)),
            n_if(and_(label.is_not(None), p.is_(None))),
            n_if(and_(label.is_not(None), _review(p, smin, cmax))),
            n_if(and_(label.is_(False), _supported(p, smin))),
            n_if(and_(label.is_(True), _contradicted(p, smin, cmax))),
            n_if(
                or_(
                    and_(label.is_(True), _supported(p, smin)),
                    and_(label.is_(False), _contradicted(p, smin, cmax)),
                )
            ),
            n_if(label.is_(True)),
            func.coalesce(func.sum(p), 0.0),
        )
        .where(Item.job_id == job_id)
        .group_by(Item.mode, bin_col)
    ).all()
    out: dict[str, ModeCounts] = {}
    for mode, b, n, err, sup, con, rev, lab, lab_err, lab_rev, missed, false_c, correct, trues, sum_p in rows:
        m = out.setdefault(str(mode), ModeCounts())
        m.n += n
        m.errors += err
        m.supported += sup
        m.contradicted += con
        m.review += rev
        m.labelled += lab
        m.labelled_errors += lab_err
        m.labelled_review += lab_rev
        m.missed_failures += missed
        m.false_contradictions += false_c
        m.correct += correct
        if b is not None:
            m.bins[int(b)] = [float(n), float(trues), float(sum_p)]
    return out


def _flip_pairs(job_id: uuid.UUID, smin: float, cmax: float) -> tuple[Any, Any, ColumnElement[bool]]:
    u, g = aliased(Item), aliased(Item)
    cond = and_(
        u.job_id == job_id,
        u.mode == "ungrounded",
        g.job_id == job_id,
        g.mode == "grounded",
        # Intake stores a claim's two modes at consecutive positions, ungrounded first (jobs/claims.py:
        # claim_units, checks.claims.MODES): joining on the position lets Postgres hash-join two index-only
        # scans (~90 ms at 100,000 items) where a join on the custom id alone probed the heap per claim.
        g.position == u.position + 1,
        g.custom_id == u.custom_id,
        u.claim_p.is_not(None),
        g.claim_p.is_not(None),
        verdict_sql(u.claim_p, smin, cmax) != verdict_sql(g.claim_p, smin, cmax),
    )
    return u, g, cond


def flips_at(
    session: Session, job_id: uuid.UUID, smin: float, cmax: float, limit: int
) -> tuple[int, list[dict[str, Any]]]:
    """How many claims flip between the two modes at these cutoffs (checks.claims.flips), and the first
    `limit` of them in input order shaped like checks.claims.Flip.as_dict: one join, counted by a window."""
    u, g, cond = _flip_pairs(job_id, smin, cmax)
    rows = session.execute(
        select(u.custom_id, u.claim_p, g.claim_p, func.count().over())
        .select_from(u)
        .join(g, cond)
        .order_by(u.position)
        .limit(limit)
    ).all()
    total = int(rows[0][3]) if rows else 0
    out: list[dict[str, Any]] = []
    for custom_id, p_u, p_g, _total in rows:
        out.append(
            claim_rules.Flip(
                str(custom_id),
                float(p_u),
                float(p_g),
                claim_rules.verdict(float(p_u), smin, cmax),
                claim_rules.verdict(float(p_g), smin, cmax),
            ).as_dict()
        )
    return total, out


def _matches(show: str, smin: float, cmax: float) -> ColumnElement[bool]:
    """Whether one item makes its claim match the filter (a claim matches when any of its modes does)."""
    p, label = Item.claim_p, Item.claim_label
    if show == "wrong":
        return or_(
            and_(label.is_(False), _supported(p, smin)),
            and_(label.is_(True), _contradicted(p, smin, cmax)),
        )
    if show == "review":
        return _review(p, smin, cmax)
    if show == "failed":
        return Item.status != "done"
    return literal(True)


def matching_claims(session: Session, job_id: uuid.UUID, show: str, smin: float, cmax: float) -> int:
    """How many claims match an item-level filter (wrong, review, failed): one index-only count."""
    return int(
        session.scalar(
            select(func.count(func.distinct(Item.custom_id))).where(
                Item.job_id == job_id, _matches(show, smin, cmax)
            )
        )
        or 0
    )


@dataclass(frozen=True)
class ClaimPage:
    """One page of claim records (as jobs.claims.iter_claim_results gives them) and the keyset cursor of
    the next page: the last position this page covers, or None when nothing follows."""

    records: list[ClaimResult]
    next_after: int | None


def claim_page(
    session: Session,
    job: Job,
    *,
    modes: Sequence[str],
    show: str,
    after: int,
    limit: int,
    smin: float,
    cmax: float,
) -> ClaimPage:
    """The first `limit` claims after position `after` that match `show`, in input order.

    First the matching items' (custom id, position) by keyset, enough of them to hold `limit` + 1 distinct
    claims (a claim has at most one item per mode), then those claims' full results. The cursor is the
    highest position of the page's claims: a claim's items have consecutive positions, so every later claim
    lies wholly beyond it and none is shown twice or skipped.
    """
    if show == "flips":
        u, g, cond = _flip_pairs(job.id, smin, cmax)
        anchors = session.execute(
            select(u.custom_id, u.position)
            .select_from(u)
            .join(g, cond)
            .where(u.position > after)
            .order_by(u.position)
            .limit(limit + 1)
        ).all()
    else:
        anchors = session.execute(
            select(Item.custom_id, Item.position)
            .where(Item.job_id == job.id, Item.position > after, _matches(show, smin, cmax))
            .order_by(Item.position)
            .limit((limit + 1) * max(1, len(modes)))
        ).all()
    ids: list[str] = []
    seen: set[str] = set()
    for custom_id, _position in anchors:
        if custom_id not in seen:
            seen.add(custom_id)
            ids.append(custom_id)
    more = len(ids) > limit
    shown = ids[:limit]
    records, last = claim_results_of(session, job, shown)
    return ClaimPage(records=records, next_after=last if more else None)


def calibration_sums(session: Session, job_id: uuid.UUID) -> dict[str, dict[str, list[float]]]:
    """Per mode, per calibration bin: [count, true count, sum of p] of the labelled, answered claims. Stored
    in the summary when the job ends (jobs/finalize.py), so the report page reads it instead of counting."""
    counts = score_counts(session, job_id, 1.0, 0.0)  # the bins do not depend on the cutoffs
    return {mode: {str(b): sums for b, sums in sorted(c.bins.items())} for mode, c in counts.items()}
