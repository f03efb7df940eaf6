"""The `citations` kind in the terminal: `factgate citations FILE`, each answer's sentences with labels."""

from __future__ import annotations

from checks.citation_contracts import CitationMetrics, CitationsResult
from cli.kinds import CliKind, register


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def metrics_line(m: CitationMetrics) -> str:
    """Citation recall and precision, uncited, misattributed, contradicted and supported share."""
    return (
        f"recall {_pct(m.citation_recall)}  precision {_pct(m.citation_precision)}  "
        f"uncited {_pct(m.uncited_rate)}  misattributed {m.misattributed}  contradicted {m.contradicted}  "
        f"supported by a source {_pct(m.supported_share)}  ({m.checkable} checkable of {m.sentences}"
        + (f"; {m.unmarked} without markers, checked against every source" if m.unmarked else "")
        + ")"
    )


def citation_lines(line: CitationsResult) -> list[str]:
    """One answer: its outcome, each sentence `[label] text`, misattributions and missing ids, metrics."""
    report = line.report
    out = [f"answer {line.custom_id}: {line.outcome or line.status}"]
    if line.model_note:
        out.append(f"note: {line.model_note}")
    if report is None:
        return out
    if report.error:
        out.append(f"  not checked: {report.error}")
    for step in report.incomplete_steps:
        out.append(f"  missing: {step.message or step.step}")
    for s in report.sentences:
        extra = ""
        if s.misattributed:
            extra += " misattributed: " + "".join(f"[{k}]" for k in s.misattributed)
        if s.missing:
            extra += " no such source: " + "".join(f"[{k}]" for k in s.missing)
        if s.unmarked:
            extra += " (no markers: checked against every source)"
        out.append(f"{s.number:>3}. [{s.label or s.status}] {s.text}{extra}")
        if s.review and s.review.suggestion:
            out.append(f"     suggested ({s.review.outcome}): {s.review.suggestion}")
    if report.sentences:
        out.append(f"     {metrics_line(report.metrics)}")
    return out


KIND = register(CliKind("citations", command="citations", render=citation_lines))
