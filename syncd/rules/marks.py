"""Incremental marks read as times, and the mark a completed crawl stores (DESIGN.md §12).

A mark is stored as the records hold it (ISO 8601 text, Unix seconds or milliseconds, as
numbers or numeric text). :func:`as_time` reads one as a time: ISO 8601 text (``Z``,
``+00:00`` and ``+0000`` offsets; no offset means UTC), or Unix time as a number or numeric
text — seconds, or milliseconds when its magnitude is 10^11 or more (a date after the year
5000 in seconds, before 1973 in milliseconds).

A completed crawl's mark never passes the crawl's start (:func:`capped_mark`): a record
edited while the crawl ran, on a page it had already read, has a time after the start, so
the next crawl asks for it again. Pure: no I/O, no clock (the start is passed in).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from decimal import ROUND_FLOOR, Decimal
from typing import Any

__all__ = [
    "MARK",
    "MS_FROM",
    "STARTED",
    "as_number",
    "as_time",
    "capped_mark",
    "is_time_mark",
    "iso_time",
    "started_text",
    "written_like",
]

#: The key of the largest value of the incremental field a crawl saw, in a source's state.
MARK = "high_water"
#: The key of the crawl's start (ISO 8601 UTC text, :func:`started_text`) in that state.
STARTED = "started"

#: From this magnitude a Unix time is in milliseconds.
MS_FROM = 1e11

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# ISO 8601 text as APIs write it: a date, then optionally a time (minutes, seconds, a
# fraction) and an offset. The groups say how to write another time the same way.
_ISO = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})"
    r"(?:(?P<sep>[Tt ])(?P<hm>\d{2}:\d{2})(?::(?P<s>\d{2})(?:(?P<dot>[.,])(?P<frac>\d+))?)?"
    r"(?P<offset>[Zz]|[+-]\d{2}(?::?\d{2})?)?)?"
)
_OFFSET = re.compile(r"(?P<sign>[+-])(?P<h>\d{2}):?(?P<m>\d{2})?")


def as_number(value: Any) -> float | None:
    """``value`` as a finite number if it is one or numeric text (``None`` otherwise)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def as_time(value: Any) -> datetime:
    """The mark as an aware UTC time (``ValueError`` when it is none, or out of the range
    of times)."""
    try:
        return _as_time(value)
    except (OverflowError, OSError) as exc:  # e.g. 1e20 seconds: no such datetime
        raise ValueError(f"not a time in range: {value!r}") from exc


def _as_time(value: Any) -> datetime:
    number = as_number(value)
    if number is not None:
        seconds = number / 1000 if abs(number) >= MS_FROM else number
        return datetime.fromtimestamp(seconds, UTC)
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value.strip())
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    raise ValueError(f"not a time: {value!r}")


def _iso_shape(value: Any) -> re.Match[str] | None:
    """The shape of ``value`` if it is ISO 8601 text (a date, a time, an offset)."""
    if not isinstance(value, str):
        return None
    shape = _ISO.fullmatch(value.strip())
    if shape is None or iso_time(value) is None:
        return None
    return shape


def iso_time(value: str) -> datetime | None:
    """``value`` as an aware UTC time if it is ISO 8601 text (``None`` otherwise)."""
    if not value[:4].isdigit() or value[4:5] != "-":
        return None
    try:
        return as_time(value)
    except ValueError:
        return None


def is_time_mark(value: Any, fmt: str = "as_stored") -> bool:
    """Whether the mark ``value`` of a field sent in format ``fmt`` is a time: any value
    :func:`as_time` reads when ``fmt`` names a time (``iso8601``, ``unix``, ``unix_ms``, a
    strftime pattern); only ISO 8601 text with ``as_stored`` (a plain number there is a
    sequence number, a version, an opaque token: ``format: unix`` says it is a time)."""
    if value is None or isinstance(value, bool):
        return False
    if fmt == "as_stored":
        return _iso_shape(value) is not None
    try:
        as_time(value)
    except ValueError:
        return False
    return True


def started_text(moment: datetime) -> str:
    """A crawl's start as a source's state keeps it: ISO 8601 UTC with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def written_like(moment: datetime, sample: Any) -> Any:
    """``moment`` written the way ``sample`` (a mark that :func:`is_time_mark`) is written,
    rounded down to its precision so that it never reads later than ``moment``: Unix seconds
    stay seconds and milliseconds milliseconds (numbers stay numbers, numeric text stays text
    with as many decimals), ISO 8601 text keeps its separator, its precision and its kind of
    offset (``Z``, ``+00:00``, ``+0000``, none, another zone's). ``ValueError`` for a sample
    that is neither."""
    micros = (moment - _EPOCH) // _MICROSECOND
    number = as_number(sample)
    if number is not None:
        return _unix_like(micros, sample, abs(number) >= MS_FROM)
    shape = _iso_shape(sample)
    if shape is None:
        raise ValueError(f"not a time: {sample!r}")
    return _iso_like(_EPOCH + micros * _MICROSECOND, shape)


def _unix_like(micros: int, sample: Any, millis: bool) -> Any:
    unit = 1000 if millis else 1_000_000
    if isinstance(sample, int):
        return micros // unit
    if isinstance(sample, float):
        return micros / (1000 if millis else 1_000_000)
    fraction = re.fullmatch(r"[+-]?\d*\.(\d+)", str(sample).strip())
    decimals = len(fraction[1]) if fraction else 0
    value = (Decimal(micros) / unit).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_FLOOR)
    return f"{value:.{decimals}f}"


def _iso_like(moment: datetime, shape: re.Match[str]) -> str:
    offset = shape["offset"]
    zone = _zone(offset)
    local = moment.astimezone(zone)
    if shape["hm"] is None:
        return local.strftime("%Y-%m-%d")
    text = local.strftime(f"%Y-%m-%d{shape['sep']}%H:%M")
    if shape["s"] is not None:
        text += local.strftime(":%S")
        if shape["frac"] is not None:
            digits = len(shape["frac"])
            frac = f"{local.microsecond:06d}"[:digits].ljust(digits, "0")
            text += shape["dot"] + frac
    return text + (offset or "")


def _zone(offset: str | None) -> timezone:
    """The zone an ISO offset names (none: UTC)."""
    if offset is None or offset in "Zz":
        return UTC
    parts = _OFFSET.fullmatch(offset)
    assert parts is not None  # the shape matched it
    delta = timedelta(hours=int(parts["h"]), minutes=int(parts["m"] or 0))
    return timezone(-delta if parts["sign"] == "-" else delta)


def capped_mark(high_water: Any, started: Any, fmt: str = "as_stored") -> Any:
    """The mark a completed crawl stores: the earlier of ``high_water`` (the largest value
    of the field it saw) and ``started`` (its start, :func:`started_text`), written as the
    field's values are; ``high_water`` itself when it is no later, when it is not a time
    (:func:`is_time_mark`), or when the start is unknown (a crawl begun before starts were
    kept)."""
    if not isinstance(started, str) or not is_time_mark(high_water, fmt):
        return high_water
    try:
        start = as_time(started)
    except ValueError:
        return high_water
    if as_time(high_water) <= start:
        return high_water
    return written_like(start, high_water)
