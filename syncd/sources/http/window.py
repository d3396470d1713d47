"""A backfill's window in the ``http`` source (DESIGN.md §12, "Steering a crawl"): reading a
mark or a window bound as the connector's ``incremental.format`` does, the request of a
window, and the records past its end. Pure: no I/O, no clock.

A backfill crawls ``[since, until)``: ``since`` goes where the mark goes (``param``, in a
``template``) without ``lag``; ``until`` goes in ``until_param`` and/or ``window_template``
(``{since}`` and ``{until}``) when the config names them. Whatever the source is sent,
records whose field is at or after ``until`` are not made documents: they are counted as
filtered.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from syncd.models import CrawlWindow
from syncd.paths import MISSING, get_path
from syncd.sources.http.marks import as_time, mark_value
from syncd.sources.http.pagination import PageRequest

__all__ = ["beyond", "read_mark", "window_request"]

MSG_NO_INCREMENTAL = "The connector's source has no incremental field"
_TIME_KIND = 1


def read_mark(config: Mapping[str, Any], value: Any) -> tuple[int, Any]:
    """``value`` (a mark, a window bound) as the source ``config`` reads it: a key ordering
    the values of its incremental field, ``(kind, value)``. ``ValueError`` when the config
    has no ``incremental``, or its ``format`` (and ``lag``) cannot read ``value``."""
    inc = config.get("incremental")
    if not isinstance(inc, Mapping):
        raise ValueError(MSG_NO_INCREMENTAL)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("Must be a string or a number")
    fmt = str(inc.get("format", "as_stored"))
    try:
        mark_value(value, fmt, float(inc.get("lag", 0) or 0))
    except ValueError:
        raise ValueError(
            f"Must be a time (ISO 8601 text, or Unix seconds or milliseconds): the incremental "
            f"format {fmt!r} cannot read {value!r}"
        ) from None
    return _key(value, fmt)


def _key(value: Any, fmt: str) -> tuple[int, Any]:
    """The order of a readable value: times as times under a time format; else numbers (and
    numeric text) by value, ISO 8601 text as times, other text as text."""
    if fmt != "as_stored":
        return (_TIME_KIND, as_time(value))
    number = _number(value)
    if number is not None:
        return (0, number)
    try:
        return (_TIME_KIND, as_time(value))
    except ValueError:
        return (2, str(value))


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = Decimal(value.strip() if isinstance(value, str) else value)
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def beyond(record: Any, field: str, until: tuple[int, Any], fmt: str) -> bool:
    """Whether ``record``'s ``field`` is at or after ``until`` (a :func:`read_mark` key). A
    record whose value cannot be read, or is of another kind, is not known to be past the
    window: it is kept."""
    value = get_path(record, field) if isinstance(record, Mapping) else MISSING
    if value is MISSING or value is None or isinstance(value, bool):
        return False
    try:
        key = _key(value, fmt)
    except (ValueError, OverflowError, OSError):
        return False
    if key[0] != until[0]:
        return False
    at: Any = key[1]
    end: Any = until[1]
    if isinstance(at, datetime) and isinstance(end, datetime):
        return at >= end
    return bool(at >= end)


def window_request(base: PageRequest, inc: Mapping[str, Any], window: CrawlWindow) -> PageRequest:
    """``base`` with a backfill's window placed: ``since`` as the mark is (``param``, in
    ``template``), with no ``lag``; ``until`` in ``until_param`` and in ``window_template``,
    which replaces ``template`` when the window has an end (``ValueError`` when the format
    cannot write a bound)."""
    fmt = str(inc.get("format", "as_stored"))
    where = str(inc.get("in", "query"))
    since = mark_value(window.since, fmt)
    until = None if window.until is None else mark_value(window.until, fmt)
    template = inc.get("template")
    if until is not None and inc.get("window_template") is not None:
        template = inc["window_template"]
    value: Any = since
    if template is not None:
        value = str(template).replace("{since}", str(since))
        if until is not None:
            value = value.replace("{until}", str(until))
    request = base.with_value(where, str(inc["param"]), value)
    until_param = inc.get("until_param")
    if until is not None and until_param is not None:
        request = request.with_value(where, str(until_param), until)
    return request
