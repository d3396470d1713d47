"""Cron arithmetic, pure: "when does this schedule fire next after ``after``?".

Expressions have five fields and are evaluated in UTC unless the connector names an IANA
time zone. Parsing and iteration are croniter's; this module only fixes the conventions.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, CroniterError, croniter


def is_valid(expression: str) -> bool:
    """True for a valid five-field cron expression that fires at some time (``0 0 31 2 *``
    parses, but never fires)."""
    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        return False
    try:
        croniter(expression, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterBadDateError, CroniterError, ValueError):
        return False
    return True


@lru_cache(maxsize=4096)
def next_fire(expression: str, after: datetime, timezone: str | None = None) -> datetime:
    """The first time strictly after ``after`` at which ``expression`` fires, in UTC.

    Cached: a tick computes it for every connector it claims, with one ``after`` and, for
    most connectors, a few shared expressions (croniter costs about a millisecond a call).
    """
    tz = ZoneInfo(timezone) if timezone else UTC
    start = after.astimezone(tz)
    nxt = croniter(expression, start).get_next(datetime)
    assert isinstance(nxt, datetime)
    return nxt.astimezone(UTC)
