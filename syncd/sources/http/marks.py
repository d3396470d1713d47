"""Incremental marks as real APIs take them (DESIGN.md §8, "Real APIs"): the high-water value
of the incremental field, moved back by a lookback (``lag``) and written in the format the API
expects. Pure: no I/O, no clock.

The mark is stored as the records hold it; only what is sent is converted. Converting (a
format other than ``as_stored``, or a ``lag``) reads the mark as a time
(:func:`syncd.rules.marks.as_time`, the pure reading the crawl rules share).
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from typing import Any

from syncd.rules.marks import MS_FROM, as_number, as_time

__all__ = ["as_time", "mark_value"]


def mark_value(value: Any, fmt: str = "as_stored", lag: float = 0.0) -> Any:
    """What to send for the stored mark ``value``: a string or a number.

    ``ValueError`` when the conversion needs a time and ``value`` is none.
    """
    if fmt == "as_stored" and not lag:
        return value
    number = as_number(value)
    if fmt == "as_stored" and number is not None:
        # A numeric mark keeps its unit (milliseconds stay milliseconds) and its kind:
        # numeric text such as Slack's ts ("1704067500.000100") stays text, its digits
        # exact.
        step = lag * 1000 if abs(number) >= MS_FROM else lag
        if isinstance(value, str):
            return str(Decimal(value.strip()) - Decimal(str(step)))
        shifted = number - step
        return int(shifted) if isinstance(value, int) and shifted.is_integer() else shifted
    try:
        when = as_time(value) - timedelta(seconds=lag)
    except OverflowError as exc:  # the lag moves it before the year 1
        raise ValueError(f"not a time in range: {value!r}") from exc
    if fmt == "unix":
        return math.floor(when.timestamp())
    if fmt == "unix_ms":
        return math.floor(when.timestamp() * 1000)
    if fmt in ("iso8601", "as_stored"):
        text = when.strftime("%Y-%m-%dT%H:%M:%S")
        return text + (f".{when.microsecond:06d}Z" if when.microsecond else "Z")
    return when.strftime(fmt)
