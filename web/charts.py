"""Server-side SVG charts: the reliability diagram of the claims report, the usage page's bars per day.

Pure functions (numbers in, SVG text out), so the page needs no charting library and no script, and
the downloadable report carries the same picture. Styling is done with SVG presentation attributes
(`fill`, `stroke`), never `style=`, because the pages' Content-Security-Policy forbids inline styles.
Every piece of text is escaped, although only mode names and numbers are ever drawn.

Each chart is one image to assistive technology (`role="img"`): its `<title>` is its accessible name and a
`<desc>` says in words what it shows (the extremes and totals); the pages put the same numbers in a table
beside it, which the description names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date

from markupsafe import escape

DEFAULT_BINS = 10

# One colour and one marker shape per series, so the series differ in more than colour.
SERIES_STYLES: tuple[tuple[str, str], ...] = (("#1d4ed8", "circle"), ("#b45309", "square"))


@dataclass(frozen=True)
class ReliabilityBin:
    """Claims whose predicted p fell in [lo, hi) (the last bin includes 1.0).

    `mean_p` is the mean predicted probability in the bin and `observed` the fraction of its claims
    labelled true; both None for an empty bin.
    """

    lo: float
    hi: float
    count: int
    true_count: int
    mean_p: float | None
    observed: float | None


def reliability_bins(
    points: Iterable[tuple[float, bool]], n_bins: int = DEFAULT_BINS
) -> list[ReliabilityBin]:
    """Equal-width bins of predicted probability vs. the observed fraction true."""
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    counts = [0] * n_bins
    trues = [0] * n_bins
    sums = [0.0] * n_bins
    for p, label in points:
        if not (isinstance(p, int | float) and math.isfinite(p) and 0.0 <= p <= 1.0):
            raise ValueError(f"probability must be a number from 0 to 1, got {p!r}")
        index = min(int(p * n_bins), n_bins - 1)
        counts[index] += 1
        trues[index] += 1 if label else 0
        sums[index] += float(p)
    out: list[ReliabilityBin] = []
    for i in range(n_bins):
        n = counts[i]
        out.append(
            ReliabilityBin(
                lo=i / n_bins,
                hi=(i + 1) / n_bins,
                count=n,
                true_count=trues[i],
                mean_p=sums[i] / n if n else None,
                observed=trues[i] / n if n else None,
            )
        )
    return out


def _join(*texts: str) -> str:
    return " ".join(t.strip() for t in texts if t and t.strip())


def _num(value: float) -> str:
    """Coordinates with two decimals: small files, no scientific notation."""
    return f"{value:.2f}"


def _marker(shape: str, x: float, y: float, r: float, colour: str) -> str:
    if shape == "square":
        return (
            f'<rect x="{_num(x - r)}" y="{_num(y - r)}" width="{_num(2 * r)}" height="{_num(2 * r)}" '
            f'fill="{colour}" fill-opacity="0.85" stroke="#ffffff" stroke-width="1"/>'
        )
    return (
        f'<circle cx="{_num(x)}" cy="{_num(y)}" r="{_num(r)}" fill="{colour}" fill-opacity="0.85" '
        f'stroke="#ffffff" stroke-width="1"/>'
    )


def _label_at(
    number: int, x: float, y: float, r: float, box: tuple[float, float, float, float]
) -> tuple[float, float, str]:
    """Where a bin's count goes: the first series left of its marker, the second right of it, so two
    markers on the same spot keep readable labels; near a side edge, above or below instead.
    `box` is the plot area (x_min, y_min, x_max, y_max)."""
    x_min, y_min, x_max, y_max = box
    room = 22.0
    above, below = y - r - 5, y + r + 13
    if number == 0:
        if x - r - room > x_min:
            return x - r - 4, y + 4, "end"
        return x, (above if above - 11 > y_min else below), "middle"
    if x + r + room < x_max:
        return x + r + 4, y + 4, "start"
    return x, (below if below < y_max else above), "middle"


def reliability_summary(series: Sequence[tuple[str, Sequence[ReliabilityBin]]]) -> str:
    """The diagram in words: per series, how many claims in how many bins, and its lowest and highest bin."""
    parts: list[str] = []
    for name, bins in series:
        filled = [b for b in bins if b.count and b.observed is not None]
        if not filled:
            parts.append(f"{name}: no labelled claims.")
            continue
        n = sum(b.count for b in filled)

        def bin_text(b: ReliabilityBin) -> str:
            return f"p {b.lo:.1f}–{b.hi:.1f} ({b.count} claim(s), {(b.observed or 0) * 100:.0f} % true)"

        text = f"{name}: {n} labelled claim(s) in {len(filled)} bin(s)"
        if len(filled) > 1:
            text += f", from {bin_text(filled[0])} to {bin_text(filled[-1])}"
        else:
            text += f": {bin_text(filled[0])}"
        parts.append(text + ".")
    return " ".join(parts)


def reliability_svg(
    series: Sequence[tuple[str, Sequence[ReliabilityBin]]],
    *,
    width: int = 560,
    height: int = 440,
    title: str = "Reliability diagram",
    note: str = "",
) -> str:
    """An SVG document fragment: predicted p (x) against observed fraction true (y), one line per
    series, marker area proportional to the bin's claim count, and the count written by each marker.
    The dashed diagonal is perfect calibration. Its description (`<desc>`) is `reliability_summary`
    followed by `note` (where the page lists the same numbers)."""
    if len(series) > len(SERIES_STYLES):
        raise ValueError(f"at most {len(SERIES_STYLES)} series")
    left, right, top, bottom = 56.0, 20.0, 20.0, 92.0
    plot_w = width - left - right
    plot_h = height - top - bottom

    def sx(v: float) -> float:
        return left + v * plot_w

    def sy(v: float) -> float:
        return top + (1.0 - v) * plot_h

    biggest = max((b.count for _, bins in series for b in bins), default=0)
    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-labelledby="reliability-title" '
        f'aria-describedby="reliability-desc" font-family="inherit" font-size="12">',
        f'<title id="reliability-title">{escape(title)}</title>',
        f'<desc id="reliability-desc">{escape(_join(reliability_summary(series), note))}</desc>',
        f'<rect x="{_num(left)}" y="{_num(top)}" width="{_num(plot_w)}" height="{_num(plot_h)}" '
        f'fill="#ffffff" stroke="#d0d7de"/>',
    ]
    for i in range(6):
        v = i / 5
        x, y = sx(v), sy(v)
        parts.append(
            f'<line x1="{_num(x)}" y1="{_num(top)}" x2="{_num(x)}" y2="{_num(top + plot_h)}" '
            f'stroke="#eaeef2"/>'
            f'<line x1="{_num(left)}" y1="{_num(y)}" x2="{_num(left + plot_w)}" y2="{_num(y)}" '
            f'stroke="#eaeef2"/>'
            f'<text x="{_num(x)}" y="{_num(top + plot_h + 16)}" text-anchor="middle" fill="#57606a">'
            f"{v:.1f}</text>"
            f'<text x="{_num(left - 8)}" y="{_num(y + 4)}" text-anchor="end" fill="#57606a">{v:.1f}</text>'
        )
    parts.append(
        f'<line x1="{_num(sx(0))}" y1="{_num(sy(0))}" x2="{_num(sx(1))}" y2="{_num(sy(1))}" '
        f'stroke="#8c959f" stroke-dasharray="5 4"/>'
        f'<text x="{_num(left + plot_w / 2)}" y="{_num(top + plot_h + 36)}" text-anchor="middle" '
        f'fill="#24292f">predicted probability (bin mean)</text>'
        f'<text transform="translate(16 {_num(top + plot_h / 2)}) rotate(-90)" text-anchor="middle" '
        f'fill="#24292f">fraction labelled true</text>'
    )
    for number, ((name, bins), (colour, shape)) in enumerate(zip(series, SERIES_STYLES, strict=False)):
        filled = [b for b in bins if b.count and b.mean_p is not None and b.observed is not None]
        points = [(sx(b.mean_p or 0.0), sy(b.observed or 0.0)) for b in filled]
        if len(points) > 1:
            coords = " ".join(f"{_num(x)},{_num(y)}" for x, y in points)
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for b, (x, y) in zip(filled, points, strict=True):
            r = 3.5 + 6.5 * math.sqrt(b.count / biggest) if biggest else 3.5
            tip = (
                f"{name}: p {b.lo:.1f}–{b.hi:.1f}, {b.count} claim(s), mean p {b.mean_p or 0:.3f}, "
                f"{b.true_count} true ({(b.observed or 0) * 100:.0f} %)"
            )
            parts.append(f"<g><title>{escape(tip)}</title>{_marker(shape, x, y, r, colour)}")
            lx, ly, anchor = _label_at(number, x, y, r, (left, top, left + plot_w, top + plot_h))
            parts.append(
                f'<text x="{_num(lx)}" y="{_num(ly)}" text-anchor="{anchor}" fill="{colour}" '
                f'font-size="11" font-weight="600">{b.count}</text></g>'
            )
    # Legend under the axis title: shape + name, so the series differ without colour too.
    lx = left
    ly = float(height - 30)
    for (name, _bins), (colour, shape) in zip(series, SERIES_STYLES, strict=False):
        parts.append(_marker(shape, lx + 5, ly - 4, 5, colour))
        parts.append(f'<text x="{_num(lx + 16)}" y="{_num(ly)}" fill="#24292f">{escape(name)}</text>')
        lx += 28 + 8 * len(name)
    parts.append(
        f'<text x="{_num(left)}" y="{_num(height - 10)}" fill="#57606a">'
        "dashed line: perfect calibration · numbers: claims per bin</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


# --- bars per day (the usage page) -------------------------------------------------------------------------

BAR_COLOUR = "#1d4ed8"


def nice_ceiling(value: float, steps: Sequence[float] = (1.0, 2.0, 2.5, 5.0, 10.0)) -> float:
    """The smallest step × 10^k at or above `value` (the top of a readable axis); 1 for 0."""
    if not (math.isfinite(value) and value > 0):
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in steps:
        top = step * 10.0**exponent
        if top >= value * (1 - 1e-12):
            return top
    return 10.0 ** (exponent + 1)


def bars_summary(points: Sequence[tuple[date, float]], label: Callable[[float], str]) -> str:
    """The bar chart in words: the days, the total, the highest day and how many days had nothing."""
    if not points:
        return "No days."
    total = sum(v for _, v in points)
    empty = sum(1 for _, v in points if v <= 0)
    text = (
        f"{len(points)} day(s) from {points[0][0].isoformat()} to {points[-1][0].isoformat()}, "
        f"{label(total)} in total"
    )
    if empty == len(points):
        return text + "; nothing on any day."
    top_day, top = max(points, key=lambda p: p[1])
    return text + f"; the highest was {label(top)} on {top_day.isoformat()}; {empty} day(s) had nothing."


def daily_bars_svg(
    points: Sequence[tuple[date, float]],
    *,
    label: Callable[[float], str],
    title: str,
    integer: bool = False,
    width: int = 760,
    height: int = 260,
    note: str = "",
) -> str:
    """An SVG bar chart, one bar per day in the order given (empty days too, as gaps), with a y axis of
    five gridlines labelled by `label` (whole numbers at every gridline when `integer`) and at most
    eight dates under the bars. Every bar has a title (its day and value) for pointer users; the chart's
    description (`bars_summary` and `note`) says the totals in words, and the page repeats every number
    in a table."""
    if not points:
        raise ValueError("no days to draw")
    left, right, top, bottom = 72.0, 16.0, 16.0, 40.0
    plot_w = width - left - right
    plot_h = height - top - bottom
    biggest = max((v for _, v in points), default=0.0)
    if integer:  # quarters of the top must be whole: 4 × (1, 2 or 5 × 10^k)
        y_top = 4 * nice_ceiling(max(biggest / 4, 1.0), steps=(1.0, 2.0, 5.0, 10.0))
    else:
        y_top = nice_ceiling(biggest)
    slot = plot_w / len(points)
    gap = min(2.0, slot * 0.2)
    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-labelledby="bars-title" '
        f'aria-describedby="bars-desc" font-family="inherit" font-size="12">',
        f'<title id="bars-title">{escape(title)}</title>',
        f'<desc id="bars-desc">{escape(_join(bars_summary(points, label), note))}</desc>',
        f'<rect x="{_num(left)}" y="{_num(top)}" width="{_num(plot_w)}" height="{_num(plot_h)}" '
        f'fill="#ffffff" stroke="#d0d7de"/>',
    ]
    for i in range(5):
        v = y_top * i / 4
        y = top + plot_h - plot_h * i / 4
        parts.append(
            f'<line x1="{_num(left)}" y1="{_num(y)}" x2="{_num(left + plot_w)}" y2="{_num(y)}" '
            f'stroke="#eaeef2"/>'
            f'<text x="{_num(left - 8)}" y="{_num(y + 4)}" text-anchor="end" fill="#57606a">'
            f"{escape(label(v))}</text>"
        )
    for n, (day, value) in enumerate(points):
        if value <= 0:
            continue
        h = plot_h * value / y_top
        x = left + n * slot + gap / 2
        w = max(slot - gap, 0.5)
        parts.append(
            f"<g><title>{escape(f'{day.isoformat()}: {label(value)}')}</title>"
            f'<rect class="bar" x="{_num(x)}" y="{_num(top + plot_h - h)}" width="{_num(w)}" '
            f'height="{_num(h)}" fill="{BAR_COLOUR}"/></g>'
        )
    every = max(1, math.ceil(len(points) / 8))
    for n in range(0, len(points), every):
        x = left + (n + 0.5) * slot
        parts.append(
            f'<text x="{_num(x)}" y="{_num(top + plot_h + 16)}" text-anchor="middle" fill="#57606a">'
            f"{points[n][0].strftime('%b %d')}</text>"
        )
    parts.append(
        f'<text x="{_num(left)}" y="{_num(height - 6)}" fill="#57606a">'
        f"{escape(points[0][0].isoformat())} to {escape(points[-1][0].isoformat())} (UTC days)</text>"
    )
    parts.append("</svg>")
    return "".join(parts)
