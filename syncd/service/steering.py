"""The checks of a steered crawl against its connector (DESIGN.md §12): a mode needs what the
connector's source has, a mark or a window bound must be one its ``format`` reads, and a
window must not be empty. The body's own checks (:mod:`syncd.schema.steering`) come first;
these follow once the connector is known, before any state is looked at.
"""

from __future__ import annotations

from typing import Any

from syncd import rules
from syncd.errors import ValidationError
from syncd.models import Connector, CrawlMode
from syncd.plugins import Registry

__all__ = ["MSG_NO_INCREMENTAL", "check_mark", "check_steer", "mark_reader"]

_PAIR = 2

MSG_NO_INCREMENTAL = "The connector's source has no `incremental`, so no mark"
MSG_FULL_ONLY = "Must be full: the connector's source has no `incremental`"
MSG_SAME_KIND = "Must be a value of the same kind as since (both times, numbers or text)"


def mark_reader(connector: Connector, registry: Registry) -> rules.MarkReader:
    """How the connector's source reads a value of its incremental field (its kind's
    ``read_mark``, else numbers and text as they are)."""
    read = registry.source(connector.source).read_mark
    if read is None:
        return rules.plain_mark
    source = connector.source
    return lambda value: read(source, value)


def check_steer(connector: Connector, steer: rules.Steer, registry: Registry) -> None:
    """``ValidationError`` when the connector cannot crawl as ``steer`` asks: ``incremental``
    or ``backfill`` of a source without ``incremental``, a bound its format cannot read, or
    ``since`` not before ``until``."""
    if steer.mode is CrawlMode.FULL:
        return
    if not rules.is_incremental(connector.source):
        raise ValidationError({"mode": MSG_FULL_ONLY})
    window = steer.window
    if window is None:
        return
    read = mark_reader(connector, registry)
    errors: dict[str, str] = {}
    keys: dict[str, Any] = {}
    for name, value in (("since", window.since), ("until", window.until)):
        if value is None:
            continue
        try:
            keys[name] = read(value)
        except ValueError as exc:
            errors[name] = str(exc)
    if not errors and "until" in keys:
        since, until = keys["since"], keys["until"]
        if _kind(since) != _kind(until):
            errors["until"] = MSG_SAME_KIND
        elif not since < until:
            errors["since"] = "Must be before until"
    if errors:
        raise ValidationError(errors)


def check_mark(connector: Connector, mark: Any, registry: Registry, *, field: str) -> None:
    """``ValidationError`` (at ``field``) when the connector has no mark (no
    ``incremental``), or its format cannot read ``mark`` (``None``: only the former)."""
    if not rules.is_incremental(connector.source):
        raise ValidationError({field: MSG_NO_INCREMENTAL})
    if mark is None:
        return
    try:
        mark_reader(connector, registry)(mark)
    except ValueError as exc:
        raise ValidationError({field: str(exc)}) from None


def _kind(key: Any) -> Any:
    """The kind of an order key: a reader's ``(kind, value)`` pair, else the value's type."""
    if isinstance(key, tuple) and len(key) == _PAIR:
        return key[0]
    return type(key)
