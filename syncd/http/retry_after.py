"""Parsing of the HTTP ``Retry-After`` header (RFC 9110 §10.2.3).

The header is either a number of seconds or an HTTP-date. Both forms become a number of
seconds from ``now``; callers clamp it with :func:`clamp_retry_after` before sleeping, so a
server cannot park a crawl for hours.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

MAX_RETRY_AFTER = 60.0
"""The longest wait a ``Retry-After`` may impose, in seconds."""


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait according to a ``Retry-After`` value, or ``None`` if absent or invalid.

    ``now`` (timezone-aware) is the reference for the HTTP-date form; a date in the past
    gives ``0.0``. The result is not clamped.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        seconds = float(text)
    except ValueError:
        return _parse_http_date(text, now)
    # Decimal or negative numbers are not valid per the RFC; accept a non-negative decimal
    # (some servers send "1.5") and ignore everything else.
    if math.isfinite(seconds) and seconds >= 0:
        return seconds
    return None


def _parse_http_date(text: str, now: datetime | None) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        # HTTP-dates are always GMT.
        when = when.replace(tzinfo=UTC)
    reference = now if now is not None else datetime.now(UTC)
    return max(0.0, (when - reference).total_seconds())


def clamp_retry_after(seconds: float) -> float:
    """``seconds`` limited to ``[0, MAX_RETRY_AFTER]``."""
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
