"""The `claims` report: per-claim table, scorecards with the acceptance bounds, calibration, cutoff replay.

Everything is read from stored items; replaying other cutoffs re-scores the stored probabilities and
never sends a request. The page costs what it shows (jobs/claims_report.py): the scorecards come from the
summary stored when the job ended, or, at other cutoffs, from one grouped SQL count over the stored
probabilities; the calibration bins from the same query; the table is one page of claims found by keyset
(`after=<position>`, never OFFSET) with only those claims' results read. The downloadable report streams
every claim.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup
from pydantic import ValidationError
from sqlalchemy.orm import Session

from checks import claims as claim_rules
from checks.kinds.claims import ClaimResult, ClaimsSummary, FlipEntry, ScorecardFigures
from checks.options import OptionsError, check_cutoffs
from jobs.claims import claims_summary, iter_claim_results
from jobs.claims_report import ModeCounts, claim_page, flips_at, matching_claims, score_counts
from models import Job, JobStatus
from web.charts import DEFAULT_BINS, ReliabilityBin, reliability_svg

PAGE_SIZE = 100
FLIPS_SHOWN = 200  # the flips panel lists this many; the table's "flips" filter pages through all of them
SHOW_CHOICES: dict[str, str] = {
    "all": "all claims",
    "flips": "flips between modes",
    "wrong": "wrong verdicts",
    "review": "sent to review",
    "failed": "failed or skipped",
}
MODE_NAMES = {"ungrounded": "Ungrounded", "grounded": "Grounded"}
DEFAULT_SUPPORTED_MIN = 0.8
DEFAULT_CONTRADICTED_MAX = 0.2


@dataclass(frozen=True)
class ModeCell:
    """One claim in one mode, with the verdict at the cutoffs being shown."""

    mode: str
    status: str
    p: float | None
    verdict: str | None
    grade: str | None  # correct | wrong | review | None (unlabelled or unanswered)
    request_id: str | None
    error: str | None
    # When the answer came from the tenant's verdict store: the original request's time (ISO), else None.
    reused_at: str | None = None


@dataclass(frozen=True)
class ClaimRowView:
    custom_id: str
    claim: str
    label: bool | None
    cells: list[ModeCell]
    flip: bool
    outside_query: bool
    # The search results the upstream grounded the claim on, as stored (`url`, `title`, `date`): the page
    # links them and reads nothing else.
    sources: list[Mapping[str, object]]

    def matches(self, show: str) -> bool:
        if show == "flips":
            return self.flip
        if show == "wrong":
            return any(c.grade == "wrong" for c in self.cells)
        if show == "review":
            return any(c.verdict == "review" for c in self.cells)
        if show == "failed":
            return any(c.status != "done" for c in self.cells)
        return True


@dataclass(frozen=True)
class Bound:
    """One acceptance bound of one mode, shown as value, limit and pass/fail."""

    name: str
    value: str
    limit: str
    ok: bool | None


@dataclass(frozen=True)
class ScorecardView:
    mode: str
    title: str
    card: ScorecardFigures
    bounds: list[Bound]
    acceptance: bool | None


@dataclass
class Explorer:
    """The cutoff explorer's form state: the cutoffs shown, the job's own, and any input problem."""

    supported_min: float
    contradicted_max: float
    stored_supported_min: float
    stored_contradicted_max: float
    raw_supported_min: str = ""
    raw_contradicted_max: str = ""
    error: str | None = None

    @property
    def replayed(self) -> bool:
        return (self.supported_min, self.contradicted_max) != (
            self.stored_supported_min,
            self.stored_contradicted_max,
        )


@dataclass
class ClaimsReport:
    modes: list[str]
    explorer: Explorer
    scorecards: list[ScorecardView]
    flips: list[FlipEntry]
    outside_query: int
    calibration: list[tuple[str, list[ReliabilityBin]]]
    calibration_svg: Markup | None  # our own SVG, its text already escaped by web.charts
    labelled_points: int
    show: str
    page: int
    pages: int
    matching: int
    total_claims: int
    rows: list[ClaimRowView] | Iterator[ClaimRowView] = field(default_factory=list)
    summary_error: str | None = None
    flips_total: int = 0
    # Keyset cursors of the table: the position after which the next page starts (None on the last page).
    next_after: int | None = None
    after: int | None = None


def _float_arg(raw: str | None) -> tuple[float | None, str | None]:
    if raw is None or raw.strip() == "":
        return None, None
    try:
        value = float(raw)
    except ValueError:
        return None, f"{raw[:40]!r} is not a number"
    if not math.isfinite(value):
        return None, f"{raw[:40]!r} is not a finite number"
    return value, None


def explorer_from_args(job: Job, args: Mapping[str, str]) -> Explorer:
    """Cutoffs from the query string, falling back to the job's own; bad input is reported, not raised."""
    stored_s = float(job.options.get("supported_min", DEFAULT_SUPPORTED_MIN))
    stored_c = float(job.options.get("contradicted_max", DEFAULT_CONTRADICTED_MAX))
    raw_s = args.get("supported_min", "") or ""
    raw_c = args.get("contradicted_max", "") or ""
    exp = Explorer(stored_s, stored_c, stored_s, stored_c, raw_s[:40], raw_c[:40])
    s_val, s_err = _float_arg(raw_s)
    c_val, c_err = _float_arg(raw_c)
    if s_err or c_err:
        exp.error = f"supported_min: {s_err}" if s_err else f"contradicted_max: {c_err}"
        return exp
    want_s = stored_s if s_val is None else s_val
    want_c = stored_c if c_val is None else c_val
    try:
        check_cutoffs(want_s, want_c)
    except OptionsError as exc:
        exp.error = f"{exc.field}: {exc.message}"
        return exp
    exp.supported_min, exp.contradicted_max = want_s, want_c
    return exp


def _row_view(record: ClaimResult, modes: list[str], smin: float, cmax: float) -> ClaimRowView:
    label = record.label
    cells: list[ModeCell] = []
    sources: list[Mapping[str, object]] = []
    seen_urls: set[str] = set()
    outside = False
    for mode in modes:
        res = record.results.get(mode)
        if res is None:
            continue
        p = res.p
        status = str(res.status)
        verdict: str | None = None
        if status == "done" and p is not None:
            verdict = claim_rules.verdict(float(p), smin, cmax)
        grade: str | None = None
        if verdict is not None and label is not None:
            if verdict == "review":
                grade = "review"
            else:
                grade = "correct" if (verdict == "supported") == bool(label) else "wrong"
        cells.append(
            ModeCell(
                mode=mode,
                status=status,
                p=p if verdict is not None else None,
                verdict=verdict,
                grade=grade,
                request_id=res.request_id,
                error=res.error,
                reused_at=res.reused_from.answered_at if res.reused_from else None,
            )
        )
        if mode == "grounded" and res.in_query is False:
            outside = True
        for src in res.sources:
            if not isinstance(src, dict):
                continue
            key = str(src.get("url") or "")
            if key in seen_urls:
                continue
            seen_urls.add(key)
            sources.append(src)
    verdicts = [c.verdict for c in cells if c.verdict is not None]
    flip = len(cells) == 2 and len(verdicts) == 2 and verdicts[0] != verdicts[1]
    return ClaimRowView(
        custom_id=record.custom_id,
        claim=record.claim or "",
        label=None if label is None else bool(label),
        cells=cells,
        flip=flip,
        outside_query=outside,
        sources=sources,
    )


def _bounds(card: ScorecardFigures) -> list[Bound]:
    if card.labelled == 0 or card.missed_failures is None:
        return []
    labelled = card.labelled
    fc_max = card.bounds.max_false_contradiction_rate
    rv_max = card.bounds.max_review_rate
    mf_max = card.bounds.max_missed_failures
    fc = card.false_contradictions or 0
    rv = card.labelled_review or 0
    return [
        Bound(
            "Missed failures (false claims marked supported)",
            f"{card.missed_failures}",
            f"≤ {mf_max}",
            card.missed_failures_ok,
        ),
        Bound(
            "False contradictions (true claims marked contradicted)",
            f"{fc} of {labelled} ({fc / labelled * 100:.1f} %)",
            f"≤ {fc_max * 100:.0f} % of labelled claims",
            card.false_contradictions_ok,
        ),
        Bound(
            "Sent to review",
            f"{rv} of {labelled} ({rv / labelled * 100:.1f} %)",
            f"≤ {rv_max * 100:.0f} % of labelled claims",
            card.review_ok,
        ),
    ]


def _scorecards(summary: ClaimsSummary | None, modes: list[str]) -> list[ScorecardView]:
    out: list[ScorecardView] = []
    for mode in modes:
        card = summary.scorecards.get(mode) if summary is not None else None
        if card is None:
            continue
        out.append(ScorecardView(mode, MODE_NAMES.get(mode, mode), card, _bounds(card), card.acceptance))
    return out


def _modes(job: Job) -> list[str]:
    return list(claim_rules.modes_for(job.options.get("mode", "grounded")))


def _int_arg(raw: str | None, default: int, low: int) -> int:
    try:
        return max(low, int(raw or default))
    except ValueError:
        return default


def _calibration_bins(counts: ModeCounts | None) -> list[ReliabilityBin]:
    """web.charts.reliability_bins from the grouped SQL sums (count, true count, sum of p per bin)."""
    out: list[ReliabilityBin] = []
    for i in range(DEFAULT_BINS):
        n, trues, sum_p = (counts.bins.get(i) if counts else None) or (0.0, 0.0, 0.0)
        out.append(
            ReliabilityBin(
                lo=i / DEFAULT_BINS,
                hi=(i + 1) / DEFAULT_BINS,
                count=int(n),
                true_count=int(trues),
                mean_p=sum_p / n if n else None,
                observed=trues / n if n else None,
            )
        )
    return out


def _stored_bins(raw: object) -> ModeCounts:
    """The calibration sums stored in a summary ({"<bin>": [count, true count, sum of p]}) as ModeCounts."""
    out = ModeCounts()
    if isinstance(raw, dict):
        for key, sums in raw.items():
            if isinstance(sums, list) and len(sums) == 3 and str(key).isdigit():
                out.bins[int(key)] = [float(v) for v in sums]
    return out


def _replayed_summary(
    session: Session, job: Job, counts: dict[str, ModeCounts], explorer: Explorer
) -> dict[str, object]:
    """The stored summary with every cutoff-dependent figure recounted in SQL at these cutoffs. The
    figures that no cutoff changes (means, cost, Brier score, outside-query count) stay as stored."""
    stored: dict[str, Any] = job.summary or {}
    modes = _modes(job)
    smin, cmax = explorer.supported_min, explorer.contradicted_max
    flips_total: int | None = None
    flips: list[dict[str, Any]] = []
    if len(modes) == 2:
        flips_total, flips = flips_at(session, job.id, smin, cmax, FLIPS_SHOWN)
    cards: dict[str, dict[str, object]] = {}
    for mode in modes:
        card = dict((stored.get("scorecards") or {}).get(mode) or {})
        card.update((counts.get(mode) or ModeCounts()).card_figures())
        card.update(supported_min=smin, contradicted_max=cmax, flips=flips_total)
        cards[mode] = card
    return {
        **stored,
        "cutoffs": {"supported_min": smin, "contradicted_max": cmax},
        "scorecards": cards,
        "flips": flips,
        "flips_total": flips_total or 0,
    }


def claims_report(
    session: Session, job: Job, args: Mapping[str, str], *, page_size: int | None = PAGE_SIZE
) -> ClaimsReport:
    """The report of a claims job. With `page_size` None every row is returned, streamed (the
    downloadable report); otherwise one page of the rows matching `show`, after position `after`."""
    modes = _modes(job)
    explorer = explorer_from_args(job, args)
    smin, cmax = explorer.supported_min, explorer.contradicted_max
    stored: dict[str, Any] = job.summary or {}
    stored_cards = bool(stored.get("scorecards"))
    # The common view (the job's own cutoffs, a summary stored with its calibration) counts nothing: every
    # figure was stored when the job ended. Other cutoffs, or an older summary, take one grouped count.
    counts: dict[str, ModeCounts] | None = None
    if explorer.replayed or not stored_cards or not isinstance(stored.get("calibration"), dict):
        counts = score_counts(session, job.id, smin, cmax)

    summary: ClaimsSummary | None = None
    summary_error: str | None = None
    if stored_cards:
        try:
            if explorer.replayed and counts is not None:
                summary = ClaimsSummary.model_validate(_replayed_summary(session, job, counts, explorer))
            else:
                summary = ClaimsSummary.model_validate(stored)
        except ValidationError:
            summary = None  # stored by an older version, without some figure: score it the long way below
            stored_cards = False
            if counts is None:
                counts = score_counts(session, job.id, smin, cmax)
    if summary is None and job.status == JobStatus.CANCELLED and not (job.request_counts or {}).get("total"):
        # Cancelled while `validating`: its items were never built, so there is nothing to score.
        summary_error = "no scorecard: the job was cancelled before its claims were stored as items"
    elif summary is None:  # a job whose summary was never stored (finalizing failed), or an unreadable one
        try:
            summary = claims_summary(session, job, supported_min=smin, contradicted_max=cmax)
        except (OptionsError, ValueError) as exc:
            summary_error = f"the scorecard could not be computed: {exc}"
    flips: list[FlipEntry] = list(summary.flips) if summary is not None else []
    flips_total = (summary.flips_total if summary is not None else None) or len(flips)

    show = args.get("show", "all")
    if show not in SHOW_CHOICES:
        show = "all"
    page = _int_arg(args.get("page"), 1, 1)
    after = _int_arg(args.get("after"), -1, -1)
    if counts is not None:
        total = max((c.n for c in counts.values()), default=0)
        calibration = [(m, _calibration_bins(counts.get(m))) for m in modes]
    else:
        cards = stored.get("scorecards") or {}
        total = max((int((cards.get(m) or {}).get("n") or 0) for m in modes), default=0)
        sums = stored.get("calibration") or {}
        calibration = [(m, _calibration_bins(_stored_bins(sums.get(m)))) for m in modes]
    labelled_points = sum(b.count for _m, bins in calibration for b in bins)
    svg = reliability_svg(
        calibration,
        title="Reliability diagram: predicted probability vs. fraction true",
        note="The table “Calibration bins” beside the diagram lists each bin's claims, mean p, share true.",
    )
    report = ClaimsReport(
        modes=modes,
        explorer=explorer,
        scorecards=_scorecards(summary, modes),
        flips=flips,
        flips_total=flips_total,
        outside_query=summary.outside_query if summary is not None else 0,
        calibration=calibration,
        # web.charts escapes every text it draws; the rest is numbers and fixed markup.
        calibration_svg=Markup(svg) if labelled_points else None,  # noqa: S704
        labelled_points=labelled_points,
        show=show,
        page=page,
        pages=1,
        matching=total,
        total_claims=total,
        summary_error=summary_error,
    )
    if page_size is None:
        report.rows = (_row_view(r, modes, smin, cmax) for r in iter_claim_results(session, job))
        return report
    found = claim_page(
        session, job, modes=modes, show=show, after=after, limit=page_size, smin=smin, cmax=cmax
    )
    report.rows = [_row_view(r, modes, smin, cmax) for r in found.records]
    report.after = after if after >= 0 else None
    report.next_after = found.next_after
    if show == "flips":
        report.matching = flips_total
    elif show != "all":
        report.matching = matching_claims(session, job.id, show, smin, cmax)
    report.pages = max(1, math.ceil(report.matching / page_size))
    return report
