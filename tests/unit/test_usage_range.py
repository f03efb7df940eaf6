"""checks/usage.py: the `from`/`to` days of a usage report, and web/charts.py's bars per day."""

from __future__ import annotations

import re
from datetime import date, timedelta
from xml.etree import ElementTree

import pytest

from checks.usage import MAX_DAYS, DayRange, RangeError, parse_day_range
from web.charts import daily_bars_svg, nice_ceiling

TODAY = date(2026, 3, 15)


def test_defaults_are_the_last_30_days_up_to_today() -> None:
    assert parse_day_range(None, None, today=TODAY) == DayRange(date(2026, 2, 14), TODAY)
    assert parse_day_range("", "  ", today=TODAY).days == 30


def test_one_end_given() -> None:
    assert parse_day_range("2026-03-01", None, today=TODAY) == DayRange(date(2026, 3, 1), TODAY)
    assert parse_day_range(None, "2026-01-31", today=TODAY) == DayRange(date(2026, 1, 2), date(2026, 1, 31))


def test_a_single_day_and_the_longest_range() -> None:
    assert parse_day_range("2026-03-01", "2026-03-01", today=TODAY).dates() == [date(2026, 3, 1)]
    longest = parse_day_range("2024-01-01", "2024-12-31", today=TODAY)
    assert longest.days == MAX_DAYS == 366
    assert longest.dates()[-1] == date(2024, 12, 31)


@pytest.mark.parametrize(
    ("raw_from", "raw_to", "field"),
    [
        ("2026-02-29", None, "from"),  # not a leap year
        ("2026-3-1", None, "from"),
        ("20260301", None, "from"),
        ("2026-W10-1", None, "from"),
        (None, "2026-03-01T00:00", "to"),
        (None, "tomorrow", "to"),
        ("2026-03-02", "2026-03-01", "from"),
        (None, "2026-03-01", None),  # fine: from defaults to 30 days before
        ("2030-01-01", None, "from"),  # after today, the default `to`
        ("2025-03-14", "2026-03-15", "from"),  # 367 days
        ("9999-12-30", "9999-12-31", "from"),  # the day after `to` is no date
        (None, "0001-01-05", "to"),  # nor are the 30 days before it
        ("1969-12-31", "1970-01-01", "from"),
        (None, "1970-01-05", None),  # fine: the default `from` stops at the first day
    ],
)
def test_bad_ranges_name_the_parameter(raw_from: str | None, raw_to: str | None, field: str | None) -> None:
    if field is None:
        parse_day_range(raw_from, raw_to, today=TODAY)
        return
    with pytest.raises(RangeError) as info:
        parse_day_range(raw_from, raw_to, today=TODAY)
    assert info.value.field == field


def test_nice_ceiling() -> None:
    assert [nice_ceiling(v) for v in (0, 0.0031, 0.02, 0.021, 1, 7, 240)] == [
        1,
        0.005,
        0.02,
        0.025,
        1,
        10,
        250,
    ]
    assert nice_ceiling(3, steps=(1, 2, 5, 10)) == 5


def test_daily_bars_draw_a_bar_per_day_with_a_value() -> None:
    days = [date(2026, 3, 1) + timedelta(days=n) for n in range(40)]
    points = [(d, float(n % 3)) for n, d in enumerate(days)]
    svg = daily_bars_svg(points, label=lambda v: f"{v:g} <req>", title="Requests & more", integer=True)
    root = ElementTree.fromstring(svg)  # well-formed, every text escaped
    ns = "{http://www.w3.org/2000/svg}"
    bars = [r for r in root.iter(f"{ns}rect") if r.get("class") == "bar"]
    assert len(bars) == sum(1 for _, v in points if v > 0)
    assert "style=" not in svg
    assert "2026-03-02: 1 &lt;req&gt;" in svg
    assert root.find(f"{ns}title").text == "Requests & more"  # type: ignore[union-attr]
    # Integer axes have whole numbers at every gridline, and at most eight day labels are written.
    ticks = re.findall(r">(\d+(?:\.\d+)?) &lt;req&gt;</text>", svg)
    assert ticks == ["0", "1", "2", "3", "4"]
    assert len(re.findall(r">Mar \d\d</text>", svg)) <= 8


def test_daily_bars_of_nothing_still_draw_an_axis() -> None:
    svg = daily_bars_svg([(date(2026, 3, 1), 0.0)], label=lambda v: f"${v:.2f}", title="Cost")
    assert 'class="bar"' not in svg and "$1.00" in svg
    with pytest.raises(ValueError):
        daily_bars_svg([], label=str, title="none")
