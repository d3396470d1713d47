"""Cron arithmetic, pure: "when does this schedule fire next after ``after``?".

Expressions have five fields and are evaluated in UTC unless the connector names an IANA
time zone. Parsing and iteration are croniter's; this module only fixes the conventions.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter


def is_valid(expression: str) -> bool:
    """True for a valid five-field cron expression."""
    return len(expression.split()) == 5 and bool(croniter.is_valid(expression))


def is_valid_timezone(name: str) -> bool:
    """True for a known IANA time zone name."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def next_fire(expression: str, after: datetime, timezone: str | None = None) -> datetime:
    """The first time strictly after ``after`` at which ``expression`` fires, in UTC."""
    tz = ZoneInfo(timezone) if timezone else UTC
    start = after.astimezone(tz)
    nxt = croniter(expression, start).get_next(datetime)
    assert isinstance(nxt, datetime)
    return nxt.astimezone(UTC)
