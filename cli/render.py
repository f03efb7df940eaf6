"""Plain-text renderings of results for the terminal: the claims table, scorecard lines, answers, quotes.

Plain aligned text (no box drawing) so the output reads the same in a terminal, a log file and a test.
Probabilities print with two decimals in the claims table (as the reference recipe does) and three in
answer and quote reports (docs/spec.md §3); verdicts are computed by the server from unrounded values.
An incomplete answer or quote is printed as such, with every step that did not run, and never as a
checked answer or a quote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from checks.contracts import ReportHead
from checks.kinds._questions import QuestionLine
from checks.kinds.answer import AnswerResult
from checks.kinds.claims import ClaimModeResult, ClaimResult
from checks.kinds.quote import QuoteResult

SIMULATED_NOTE = "results come from the bundled simulator, not Perplexity"
GROUNDED_NOTE = "grounded attempts = POSTs sent with mode set, an upper bound on billed searches."
MODE_ORDER = ("ungrounded", "grounded")


def _pct(value: float) -> str:
    return f"{value:.0%}"


# --- claims --------------------------------------------------------------------------------------------


def _cell(result: ClaimModeResult | None) -> tuple[str, str]:
    """(probability, verdict) for one claim in one mode; failed and unfinished items say so."""
    if result is None:
        return "-", "missing"
    if result.status == "done" and result.p is not None and result.verdict:
        return f"{result.p:.2f}", str(result.verdict)
    return "-", str(result.status or "missing")


def claims_table(
    rows: Sequence[ClaimResult],
    modes: Sequence[str],
    *,
    kinds: Mapping[str, str] | None = None,
    limit: int | None = None,
) -> list[str]:
    """One line per claim: id, kind (when the input has one), label, p and verdict per mode, flip."""
    kinds = kinds or {}
    show_kind = any(kinds.get(r.custom_id) for r in rows)
    id_w = max([4, *(len(r.custom_id) for r in rows)]) + 1
    kind_w = max([5, *(len(v) for v in kinds.values())]) + 1 if show_kind else 0
    header = f"{'id':<{id_w}}" + (f"{'kind':<{kind_w}}" if show_kind else "") + f"{'label':<6}"
    for mode in modes:
        header += f"  {'p_' + mode:>12}  {'verdict_' + mode:<18}"
    lines = [header.rstrip()]
    shown = rows if limit is None else rows[:limit]
    for row in shown:
        cid = row.custom_id
        label = row.label
        label_text = "-" if label is None else str(label).lower()
        line = (
            f"{cid:<{id_w}}" + (f"{kinds.get(cid, ''):<{kind_w}}" if show_kind else "") + f"{label_text:<6}"
        )
        verdicts = []
        results = row.results
        for mode in modes:
            p, verdict = _cell(results.get(mode))
            line += f"  {p:>12}  {verdict:<18}"
            verdicts.append(verdict)
        answered = [v for v in verdicts if v in ("supported", "contradicted", "review")]
        if len(modes) > 1 and len(answered) == len(modes) and len(set(answered)) > 1:
            line += "  flip"
        lines.append(line.rstrip())
    if limit is not None and len(rows) > limit:
        lines.append(f"… {len(rows) - limit:,} more claims (see the report, or `factgate results JOB`)")
    return lines


def scorecard_lines(summary: Mapping[str, Any]) -> list[str]:
    """Two lines per mode, ending with acceptance met / not met; claims outside their query first."""
    cards: Mapping[str, Any] = summary.get("scorecards") or {}
    modes = [m for m in MODE_ORDER if m in cards]
    lines: list[str] = []
    if "grounded" in cards:
        n = int(cards["grounded"].get("n") or 0)
        outside = int(summary.get("outside_query") or 0)
        lines.append(f"claim text in the search query: {n - outside} of {n}")
    flips = summary.get("flips")
    flip_count = len(flips) if isinstance(flips, list) and len(modes) == 2 else None
    for mode in modes:
        lines.extend(_mode_lines(mode, cards[mode], flip_count))
    if "grounded" in cards:
        lines.append(GROUNDED_NOTE)
    return lines


def _mode_lines(mode: str, card: Mapping[str, Any], flip_count: int | None) -> list[str]:
    bounds = card.get("bounds") or {}
    max_missed = bounds.get("max_missed_failures", 0)
    max_false = float(bounds.get("max_false_contradiction_rate", 0.05))
    max_review = float(bounds.get("max_review_rate", 0.25))
    n = int(card.get("n") or 0)
    errors = int(card.get("errors") or 0)
    tail = f"  flips {flip_count}" if flip_count is not None else ""
    if errors:
        tail += f"  errors {errors}"
    if card.get("correct") is None:  # no labelled claim: verdict counts only
        first = (
            f"{mode:<10} supported {card.get('supported', 0)}  contradicted {card.get('contradicted', 0)}  "
            f"review {card.get('review', 0)} of {n}  (no labels: accuracy and acceptance need labels){tail}"
        )
        acceptance = "acceptance n/a"
    else:
        labelled = int(card.get("labelled") or n) or 1
        review = int(card.get("labelled_review") or 0)
        brier = card.get("brier")
        brier_text = f"  Brier {brier:.3f}" if isinstance(brier, int | float) else ""
        first = (
            f"{mode:<10} correct {card['correct']}/{labelled}  wrong {card.get('wrong', 0)}  "
            f"review {review} ({_pct(review / labelled)}, bound {_pct(max_review)})  "
            f"missed failures {card.get('missed_failures', 0)} (bound {max_missed})  "
            f"false contradictions {card.get('false_contradictions', 0)} (bound {_pct(max_false)})"
            f"{brier_text}{tail}"
        )
        acceptance = f"acceptance {'met' if card.get('acceptance') else 'not met'}"
    second = (
        f"{'':<10} mean input tokens {float(card.get('mean_input_tokens') or 0):.0f}  "
        f"mean latency {float(card.get('mean_latency_s') or 0):.2f} s  "
        f"queue wait {float(card.get('mean_queue_wait_s') or 0):.2f} s  "
        f"grounded attempts {card.get('grounded_attempts', 0)}  "
    )
    if mode == "grounded":
        second += f"mean search results {float(card.get('mean_search_results') or 0):.1f}  "
    second += f"cost per 1,000 claims ${float(card.get('cost_per_1000_usd') or 0):.4f}  {acceptance}"
    return [first.rstrip(), second]


def claim_modes(job: Mapping[str, Any]) -> list[str]:
    """The request modes of a claims job, from its options."""
    mode = str((job.get("options") or {}).get("mode") or "grounded")
    return list(MODE_ORDER) if mode == "both" else [mode]


# --- answer and quote ----------------------------------------------------------------------------------


def _incomplete_lines(report: ReportHead, headline: str) -> list[str]:
    """The headline of an incomplete question and one line per step that did not run to the end."""
    out = [headline]
    steps = report.incomplete_steps
    for step in steps:
        out.append(f"  missing: {step.message or step.step}")
    if not steps:  # a report built before steps were named: its errors are all there is
        out.extend(f"  missing: {error}" for error in _extra(report).get("errors") or [])
    return out


def _model_lines(report: ReportHead) -> list[str]:
    return [f"note: {report.model_note}"] if report.model_note else []


def _extra(report: ReportHead) -> dict[str, Any]:
    """The kind's own report fields (beyond the common head): sentences, results, the run record."""
    return dict(report.model_extra or {})


NO_REPORT = ReportHead(kind="", status="")


def answer_lines(line: AnswerResult) -> list[str]:
    """The checked answer: each final sentence with its label and badge, sources, summary, request ids.

    An incomplete question prints what is missing first, then its sentences as "the answer so far"."""
    report = line.report or NO_REPORT
    extra = _extra(report)
    out = [f"question: {line.question}"]
    status = report.status or line.status
    incomplete = status == "incomplete"
    if incomplete:
        out += _incomplete_lines(report, "INCOMPLETE: not every step ran, so this is not a checked answer.")
    out += _model_lines(report)
    final = extra.get("final")
    if not final:
        if not incomplete:
            out.append(f"no checked answer ({status}): {report.error or line.status}")
        return out
    out.append("")
    if incomplete:
        out.append("answer so far (not every sentence scored or reviewed):")
    for number, sentence in enumerate(final.get("sentences") or [], 1):
        cites = "".join(f"[{n}]" for n in sentence.get("citations") or [])
        label = sentence.get("label") or "not scored"
        badge = f", {sentence['outcome']}" if sentence.get("outcome") else ""
        out.append(f"{number:>2}. [{label}{badge}] {sentence.get('text')}{' ' + cites if cites else ''}")
    sources = final.get("sources") or []
    if sources:
        out.append("")
        for source in sources:
            title = f"{source['title']} " if source.get("title") else ""
            out.append(f"  [{source.get('number')}] {title}{source.get('url')}")
    summary = report.summary
    out.append("")
    out.append(
        f"sentences {summary.get('sentences', 0)}  investigated {summary.get('investigated', 0)}  "
        f"replaced {summary.get('replaced', 0)}  decisions requests {summary.get('decisions_requests', 0)}  "
        f"reused {summary.get('reused_requests', 0)}  "
        f"input tokens {summary.get('decisions_input_tokens', 0):,}  seconds {summary.get('seconds', 0)}"
    )
    labels = [summary.get("before"), summary.get("after")]
    before, after = (counts if isinstance(counts, dict) else {} for counts in labels)
    if before or after:
        out.append(f"labels before review: {_counts(before)}; after: {_counts(after)}")
    if not incomplete:
        for error in extra.get("errors") or []:
            out.append(f"warning: {error}")
    return out


def quote_lines(line: QuoteResult) -> list[str]:
    """The quote exactly as returned with title, URL and date; or no answer and the closest.

    An incomplete question quotes nothing: it prints what is missing and the candidates ranked so far."""
    report = line.report or NO_REPORT
    extra = _extra(report)
    out = [f"question: {line.question}"]
    status = report.status or line.status
    quote = line.quote
    if status == "incomplete":
        out += _incomplete_lines(report, "INCOMPLETE: not every step ran, so nothing is quoted.")
        ranked = [r for r in extra.get("results") or [] if r.get("best")]
        if ranked:
            out.append("candidates ranked so far (none compared, none quoted):")
            for row in ranked:
                text = (row.get("best") or {}).get("text")
                out.append(f'  result {row.get("index")} (has_answer {_p3(row.get("has_answer"))}): "{text}"')
    elif status == "quoted" and quote:
        out.append(f'quote: "{quote.get("text")}"')
        out.extend(_source_lines(quote))
        out.append(f"p(answers) {_p3(quote.get('p_answers'))}  has_answer {_p3(quote.get('has_answer'))}")
    elif status == "no_answer":
        out.append("no search result answers the question")
        closest = line.closest
        if closest:
            cutoff = (extra.get("cutoffs") or {}).get("quote_min", 0.6)
            p = (
                closest.get("p_answers")
                if closest.get("p_answers") is not None
                else closest.get("has_answer")
            )
            out.append(f'closest (below the {cutoff} cutoff, {_p3(p)}): "{closest.get("text")}"')
            out.extend(_source_lines(closest))
    else:
        out.append(f"no quote ({status}): {report.error or line.status}")
    out += _model_lines(report)
    summary = report.summary
    if summary:
        out.append(
            f"decisions requests {summary.get('decisions_requests', 0)}  "
            f"reused {summary.get('reused_requests', 0)}  "
            f"search requests {summary.get('search_requests', 0)}  "
            f"input tokens {summary.get('input_tokens', 0):,}  seconds {summary.get('seconds', 0)}"
        )
    if status != "incomplete":
        for error in extra.get("errors") or []:
            out.append(f"warning: {error}")
    return out


def _source_lines(quote: Mapping[str, Any]) -> list[str]:
    date = f" ({quote['date']})" if quote.get("date") else ""
    return [f"  {quote.get('title') or ''}{date}".rstrip(), f"  {quote.get('url')}"]


def _p3(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "-"


def _counts(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{label} {n}" for label, n in counts.items()) or "none"


def request_ids(line: QuestionLine) -> list[str]:
    """Every upstream request id of an answer or quote result line (what support asks for)."""
    ids = line.request_ids
    if isinstance(ids, dict):
        return [i for group in ids.values() for i in (group or []) if i]
    if isinstance(ids, list):
        return [i for i in ids if i]
    return []
