"""The date range of a usage report: `from` and `to` as UTC calendar days, both included.

Pure, so the API and the usage page read the same parameters the same way: only `YYYY-MM-DD` (Python's
`date.fromisoformat` also takes `20260101` and week dates, which a query string should not), `from` not
after `to`, and at most `MAX_DAYS` days, which bounds the report (one entry per day) and the query. Both
days lie between `FIRST_DAY` and `LAST_DAY`: the report's query reads up to the day after `to` and a default
`from` is 30 days before it, which at the ends of the calendar (`0001-01-05`, `9999-12-31`) are no dates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

DEFAULT_DAYS = 30
MAX_DAYS = 366  # a whole leap year
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
FIRST_DAY = date(1970, 1, 1)
LAST_DAY = date(9998, 12, 31)


class RangeError(ValueError):
    """A bad `from` or `to`; `field` names the query parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class DayRange:
    """UTC days from `start` to `end`, both included."""

    start: date
    end: date

    @property
    def days(self) -> int:
        return (self.end - self.start).days + 1

    def dates(self) -> list[date]:
        return [self.start + timedelta(days=n) for n in range(self.days)]


def _day(name: str, raw: str | None) -> date | None:
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    if not _DATE.fullmatch(text):
        raise RangeError(name, f"{name} must be a date as YYYY-MM-DD, got {raw[:40]!r}")
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise RangeError(name, f"{name} is not a calendar date: {text}") from None
    if not FIRST_DAY <= day <= LAST_DAY:
        raise RangeError(
            name, f"{name} must be a day from {FIRST_DAY.isoformat()} to {LAST_DAY.isoformat()}, got {text}"
        )
    return day


def parse_day_range(raw_from: str | None, raw_to: str | None, *, today: date) -> DayRange:
    """The range the parameters ask for. Defaults: `to` today (UTC), `from` 30 days up to `to`."""
    start = _day("from", raw_from)
    end = _day("to", raw_to)
    if end is None:
        end = today
    if start is None:
        start = max(end - timedelta(days=DEFAULT_DAYS - 1), FIRST_DAY)
    if start > end:
        field = "from" if raw_from else "to"
        raise RangeError(field, f"from ({start.isoformat()}) is after to ({end.isoformat()})")
    days = (end - start).days + 1
    if days > MAX_DAYS:
        raise RangeError(
            "from",
            f"the range {start.isoformat()} to {end.isoformat()} is {days} days; at most {MAX_DAYS} at once",
        )
    return DayRange(start, end)
