"""Rate limits announced in response headers: which answer is a rate-limit refusal, and how
long it says to wait. Pure functions: the wall-clock time is passed in.

A response is a **rate-limit refusal** when it is

- ``429 Too Many Requests``, or
- ``403 Forbidden`` with a remaining count of ``0`` in any of the families below (GitHub's
  primary rate limit answers 403, sometimes 429, with ``x-ratelimit-remaining: 0``). Any other
  403 is a plain refusal;

and it **announces when to come back**, in any of these fields:

``Retry-After``
    RFC 9110 §10.2.3, seconds or an HTTP-date; clamped to 60 s (DESIGN.md §6).
``x-ratelimit-remaining`` / ``x-ratelimit-reset``
    the de-facto family; GitHub documents the reset as Unix epoch seconds.
``RateLimit-Remaining`` / ``RateLimit-Reset``
    draft-ietf-httpapi-ratelimit-headers ("RateLimit header fields for HTTP",
    https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/) up to -06: the
    reset in delta seconds.
``RateLimit``
    the same draft's structured field: from -07, a Dictionary
    ``limit=100, remaining=0, reset=50``; from -08 (-10 at the time of writing), a List of
    service-limit items ``"policy";r=0;t=50`` (``r`` remaining quota units, ``t`` seconds
    until more quota is available; several items, possibly over several ``RateLimit``
    lines). A malformed field is ignored as a whole, as the draft requires (§7 of -10).
    ``RateLimit-Policy`` is informative and not read.

The wait (:func:`rate_limit`):

- each family pairs a remaining count with a reset; a reset counts when its remaining count
  is ``0``, or not given. A quota with units left did not cause the refusal: its reset is
  ignored. With several exhausted quotas, the latest reset counts;
- ``Retry-After`` (clamped to 60 s) and that reset are both honoured: the wait is the longer
  of the two (the draft gives Retry-After precedence and lets the client ignore the reset;
  GitHub documents honouring both; waiting the longer does not retry into a refusal the
  other one announced);
- a reset value of at least 10**12 is a Unix time in milliseconds, of at least 10**9
  (September 2001) a Unix time in seconds, anything smaller a number of seconds from now.
  The rule is the same for every field: GitHub sends epoch seconds in ``x-ratelimit-reset``,
  other APIs send seconds-until-reset under the same name, and the draft's fields are delta
  seconds; no real delta reaches 10**9 seconds (31 years), and no current Unix time is below;
- a Unix time (and a Retry-After HTTP-date) is measured from the response's ``Date`` (the
  server's clock, so a skewed local clock neither shortens nor stretches the wait; Date's
  whole seconds only ever lengthen it), or from the local clock without a valid Date;
- at least :data:`MIN_RATE_LIMIT_WAIT` (a reset already past, or ``Retry-After: 0``, must
  not turn into an immediate retry loop).

The caller bounds the reset (:meth:`RateLimit.beyond`): the transport fails a request whose
reset is further away than ``http.max_rate_limit_wait_seconds`` instead of sleeping for hours
(the draft's §8.5.1 asks clients for such a threshold). Retry-After alone is never beyond it:
it has its own 60 s clamp.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from syncd.http.retry_after import clamp_retry_after, parse_retry_after

__all__ = [
    "DEFAULT_MAX_RATE_LIMIT_WAIT",
    "MIN_RATE_LIMIT_WAIT",
    "RATE_LIMIT_STATUSES",
    "Quota",
    "RateLimit",
    "parse_ratelimit_field",
    "quotas",
    "rate_limit",
    "refusal_note",
    "reset_seconds",
]

RATE_LIMIT_STATUSES = frozenset({403, 429})
"""Statuses that may be rate-limit refusals (403 only with a remaining count of 0)."""

MIN_RATE_LIMIT_WAIT = 1.0
"""The shortest rate-limit wait, in seconds."""

DEFAULT_MAX_RATE_LIMIT_WAIT = 900.0
"""The furthest reset waited for by default (``http.max_rate_limit_wait_seconds``)."""

_EPOCH_SECONDS = 1e9
_EPOCH_MILLISECONDS = 1e12

# The fields read, by lower-case name.
_RETRY_AFTER = "retry-after"
_DATE = "date"
_STRUCTURED = "ratelimit"
_FAMILIES = (
    ("x-ratelimit-remaining", "x-ratelimit-reset"),
    ("ratelimit-remaining", "ratelimit-reset"),
)
_NAMES = frozenset({_RETRY_AFTER, _DATE, _STRUCTURED, *(n for pair in _FAMILIES for n in pair)})

_KEY = re.compile(r"[a-z*][a-z0-9_.*-]*")
_TOKEN = re.compile(r"[A-Za-z*][A-Za-z0-9!#$%&'*+\-.^_`|~:/]*")
_STRING = re.compile(r'"(?:[^"\\]|\\["\\])*"')


@dataclass(frozen=True)
class Quota:
    """One announced quota: units ``remaining`` (``None``: not said) and seconds until its
    ``reset`` (``None``: not said), from header ``field``."""

    remaining: float | None
    reset: float | None
    field: str

    @property
    def exhausted(self) -> bool:
        """Whether no unit is left."""
        return self.remaining is not None and self.remaining <= 0


@dataclass(frozen=True)
class RateLimit:
    """A rate-limit refusal and when to come back.

    ``wait``: seconds to hold the host from the response on (at least
    :data:`MIN_RATE_LIMIT_WAIT`, Retry-After clamped, the reset not bounded); ``reset``: seconds
    until the exhausted quota's reset (``None`` when only Retry-After told); ``field``: the
    header that decided the wait; ``until``: the end of the wait (UTC).
    """

    wait: float
    reset: float | None
    field: str
    until: datetime

    def beyond(self, max_wait: float) -> bool:
        """Whether the announced reset is further away than ``max_wait`` seconds (a clamped
        Retry-After never is)."""
        return self.reset is not None and self.reset > max_wait


def reset_seconds(value: str | None, *, now: float) -> float | None:
    """Seconds from ``now`` (Unix seconds) until the reset ``value`` announces, by the rule
    of the module docstring (epoch milliseconds, epoch seconds or delta seconds); ``None``
    when absent or not a non-negative number. A reset in the past is ``0.0``."""
    number = _number(value)
    if number is None:
        return None
    if number >= _EPOCH_MILLISECONDS:
        return max(0.0, number / 1000 - now)
    if number >= _EPOCH_SECONDS:
        return max(0.0, number - now)
    return number


def parse_ratelimit_field(value: str, *, now: float) -> list[Quota] | None:
    """The quotas of a structured ``RateLimit`` field (both forms of the module docstring);
    ``None`` when the field is malformed (and so to be ignored)."""
    members = _split(value, ",")
    if members is None or not members:
        return None
    items: list[Quota] = []
    dictionary: dict[str, str] = {}
    for member in members:
        parts = _split(member, ";")
        if parts is None or not parts[0]:
            return None
        head, params = parts[0], parts[1:]
        key, sep, bare = head.partition("=")
        if sep and not head.startswith('"'):
            # A Dictionary member (-07); its parameters are to be ignored.
            if not _KEY.fullmatch(key.strip()):
                return None
            dictionary[key.strip()] = bare.strip()
            continue
        if not (_STRING.fullmatch(head) or _TOKEN.fullmatch(head)):
            return None
        parsed = _params(params)
        if parsed is None:
            return None
        quota = _item(parsed, now)
        if quota is None:
            return None
        items.append(quota)
    if dictionary and items:
        return None
    if dictionary:
        quota = _item(dictionary, now, remaining="remaining", reset="reset")
        return None if quota is None else [quota]
    return items


def quotas(headers: Mapping[str, str], *, now: float) -> list[Quota]:
    """Every quota announced in ``headers`` (see :func:`rate_limit` for ``now``)."""
    fields = _fields(headers)
    return _quotas(fields, _reference(fields, now))


def rate_limit(status: int, headers: Mapping[str, str], *, now: float) -> RateLimit | None:
    """The rate-limit refusal a response with ``status`` and ``headers`` is, or ``None`` when
    it is none (see the module docstring). ``now`` is the local wall clock (Unix seconds),
    used for epoch values when the response has no valid ``Date``."""
    if status not in RATE_LIMIT_STATUSES:
        return None
    fields = _fields(headers)
    reference = _reference(fields, now)
    found = _quotas(fields, reference)
    exhausted = [q for q in found if q.exhausted]
    if status == 403 and not exhausted:
        return None
    counted = exhausted or [q for q in found if q.remaining is None]
    resets = [q for q in counted if q.reset is not None]
    latest = max(resets, key=lambda q: q.reset or 0.0, default=None)
    reset = latest.reset if latest is not None else None
    retry_after = parse_retry_after(
        fields.get(_RETRY_AFTER), now=datetime.fromtimestamp(reference, UTC)
    )
    if retry_after is not None:
        retry_after = clamp_retry_after(retry_after)
    if reset is None and retry_after is None:
        return None
    if latest is not None and reset is not None and (retry_after is None or reset > retry_after):
        wait, field = reset, latest.field
    else:
        wait, field = retry_after or 0.0, "Retry-After"
    wait = max(wait, MIN_RATE_LIMIT_WAIT)
    return RateLimit(wait, reset, field, datetime.fromtimestamp(now + wait, UTC))


def refusal_note(limit: RateLimit, *, max_wait: float, waits: int) -> str:
    """Why a rate-limit refusal fails its request instead of being waited out, for the
    error's message: its reset lies beyond ``max_wait``, or it came after ``waits``
    rate-limit waits (0: the request was not to be waited for at all)."""
    until = limit.until.strftime("%Y-%m-%dT%H:%M:%SZ")
    if limit.beyond(max_wait):
        return (
            f"rate limited until {until} (in {limit.wait:.0f} s, from {limit.field}): "
            f"beyond http.max_rate_limit_wait_seconds ({max_wait:g} s), not waited for"
        )
    if waits > 0:
        plural = "s" if waits > 1 else ""
        return (
            f"rate limited until {until} (from {limit.field}): "
            f"still refused after {waits} rate-limit wait{plural}"
        )
    return f"rate limited until {until} (from {limit.field})"


# --- helpers ------------------------------------------------------------------------------


def _fields(headers: Mapping[str, str]) -> dict[str, str]:
    """The fields read here, by lower-case name; a repeated field's lines joined with ", "
    (a multidict's ``items()`` has every line)."""
    found: dict[str, list[str]] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in _NAMES:
            found.setdefault(lower, []).append(value)
    return {name: ", ".join(values) for name, values in found.items()}


def _reference(fields: Mapping[str, str], now: float) -> float:
    """The server's time of the response (its ``Date``), else ``now``."""
    text = fields.get(_DATE)
    if text:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return now
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    return now


def _quotas(fields: Mapping[str, str], reference: float) -> list[Quota]:
    found: list[Quota] = []
    for remaining_name, reset_name in _FAMILIES:
        remaining_text, reset_text = fields.get(remaining_name), fields.get(reset_name)
        if remaining_text is None and reset_text is None:
            continue
        found.append(
            Quota(
                _number(_bare(remaining_text)),
                reset_seconds(_bare(reset_text), now=reference),
                reset_name if reset_text is not None else remaining_name,
            )
        )
    structured = fields.get(_STRUCTURED)
    if structured is not None:
        found.extend(parse_ratelimit_field(structured, now=reference) or [])
    return found


def _bare(value: str | None) -> str | None:
    """A draft -06 Item without its parameters (``50;w=60`` → ``50``)."""
    return None if value is None else value.split(";", 1)[0]


def _item(
    params: Mapping[str, str], now: float, *, remaining: str = "r", reset: str = "t"
) -> Quota | None:
    """A quota from an item's parameters (or a -07 dictionary); ``None`` when one of the
    two values is present but not a non-negative number."""
    left = params.get(remaining)
    after = params.get(reset)
    parsed_left = _number(left)
    parsed_reset = reset_seconds(after, now=now)
    if (left is not None and parsed_left is None) or (after is not None and parsed_reset is None):
        return None
    return Quota(parsed_left, parsed_reset, "RateLimit")


def _params(parts: list[str]) -> dict[str, str] | None:
    params: dict[str, str] = {}
    for part in parts:
        key, _, value = part.partition("=")
        key = key.strip()
        if not _KEY.fullmatch(key):
            return None
        params[key] = value.strip() or "?1"
    return params


def _split(text: str, separator: str) -> list[str] | None:
    """``text`` split on ``separator`` outside quoted strings, each part stripped; ``None``
    for an unterminated string."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if quoted:
            current.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
            current.append(char)
        elif char == separator:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if quoted:
        return None
    parts.append("".join(current).strip())
    return parts


def _number(value: str | None) -> float | None:
    """A non-negative finite number, or ``None``."""
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(number) or number < 0:
        return None
    return number
