"""Jinja filters of the HTML pages: numbers, money, times and links, formatted one way everywhere.

Filters return plain strings; autoescaping applies when they are written into a page, so none of
them may return markup.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from urllib.parse import urlsplit

from flask import Flask

from web.security import LINK_REL, safe_href


def _figure(value: object) -> float | None:
    """A number to show, or None for anything else (a bool is no figure, though Python counts it an int)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def prob(value: object, digits: int = 3) -> str:
    """A probability with three decimals (docs/spec.md §3: compare unrounded, print three decimals)."""
    v = _figure(value)
    return "—" if v is None else f"{v:.{digits}f}"


def pct(value: object, digits: int = 0) -> str:
    """A fraction (0.25) as a percentage ("25 %")."""
    v = _figure(value)
    return "—" if v is None else f"{v * 100:.{digits}f} %"


def usd(value: object) -> str:
    """Money: cents for amounts over a dollar, more digits for the small per-job costs."""
    v = _figure(value)
    if v is None:
        return "—"
    if v == 0:
        return "$0.00"
    if abs(v) < 1:
        return f"${v:.4f}" if abs(v) >= 0.0001 else f"${v:.6f}"
    return f"${v:,.2f}"


def number(value: object, digits: int = 0) -> str:
    """A count or mean with thousands separators."""
    v = _figure(value)
    return "—" if v is None else f"{v:,.{digits}f}"


def when(value: object) -> str:
    """A timestamp in UTC, to the second."""
    if not isinstance(value, datetime):
        return "—"
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: object) -> str:
    """Elapsed time for people: "850 ms", "4.2 s", "3 min 12 s", "2 h 05 min"."""
    s = _figure(seconds)
    if s is None:
        return "—"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    minutes, secs = divmod(round(s), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def host(url: object) -> str:
    """The host of a URL for display; empty when it has none (the link macro shows such a value whole)."""
    if not isinstance(url, str):
        return ""
    try:
        name = urlsplit(url).hostname
    except ValueError:
        name = None
    return name.removeprefix("www.") if name else ""


def pretty_json(value: object) -> str:
    """Stored JSON for people, as text (escaped on output like everything else)."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


def register_filters(app: Flask) -> None:
    app.add_template_filter(prob, "prob")
    app.add_template_filter(pct, "pct")
    app.add_template_filter(usd, "usd")
    app.add_template_filter(number, "number")
    app.add_template_filter(when, "when")
    app.add_template_filter(duration, "duration")
    app.add_template_filter(host, "host")
    app.add_template_filter(safe_href, "safe_href")
    app.add_template_filter(pretty_json, "pretty_json")
    app.jinja_env.globals["LINK_REL"] = LINK_REL
