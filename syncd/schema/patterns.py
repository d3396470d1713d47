"""Grammars the server enforces and the JSON Schema shows, written once as patterns.

A pattern here is both: the check refuses what it does not match (before the library check
that follows it: croniter, yarl), so the description is never looser than the server for
what the pattern covers. Patterns are ECMA-262 and Python ``re`` alike (no flags, ``\\uhhhh``
escapes, lookaheads only).
"""

from __future__ import annotations

import functools
import re
import zoneinfo

# The characters ``str.split()`` splits on (``str.isspace()``), which the cron check
# collapses; ECMA's ``\s`` is another set.
BLANK = (
    "[\\t\\n\\u000b\\u000c\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680"
    "\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
)


def _ci(word: str) -> str:
    """``jan`` → ``[Jj][Aa][Nn]`` (no flags in JSON Schema patterns)."""
    return "".join(f"[{c.upper()}{c.lower()}]" for c in word)


def _field(number: str, names: tuple[str, ...] = ()) -> str:
    value = "|".join([number, *map(_ci, names)])
    item = f"(\\*|({value})(-({value}))?)(/[1-9][0-9]?)?"
    return f"({item})(,({item}))*"


_MINUTE = _field("0|[1-9]|[1-5][0-9]")
_HOUR = _field("0|[1-9]|1[0-9]|2[0-3]")
_DOM = _field("[1-9]|[12][0-9]|3[01]")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH = _field("[1-9]|1[0-2]", _MONTHS)
_DOW = _field("[0-7]", ("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
_F = f"[^{BLANK[1:-1]}]+"  # any one field
_SEP = f"{BLANK}+"


def _never(days: str, months: tuple[str, ...]) -> str:
    names = "|".join([*months, *(_ci(_MONTHS[int(m) - 1]) for m in months)])
    return f"(?!{BLANK}*{_F}{_SEP}{_F}{_SEP}({days}){_SEP}({names}){_SEP})"


CRON_PATTERN = (
    "^"
    # A day that no month of the expression has never fires (``0 0 31 2 *``): refused. Only
    # a single day with a single month is described; lists are the server's to refuse.
    + _never("30|31", ("2",))
    + _never("31", ("4", "6", "9", "11"))
    + f"{BLANK}*{_MINUTE}{_SEP}{_HOUR}{_SEP}{_DOM}{_SEP}{_MONTH}{_SEP}{_DOW}{BLANK}*$"
)
"""A five-field cron expression: numbers in each field's range (no leading zero), ``*``,
ranges, lists, steps 1-99, month and weekday names (any case), fields separated by blanks."""

_IPV4 = (
    "((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
)
_H16 = "[0-9A-Fa-f]{1,4}"
_LS32 = f"({_H16}:{_H16}|{_IPV4})"
_IPV6 = "|".join(
    [
        f"({_H16}:){{6}}{_LS32}",
        f"::({_H16}:){{5}}{_LS32}",
        f"({_H16})?::({_H16}:){{4}}{_LS32}",
        f"(({_H16}:){{0,1}}{_H16})?::({_H16}:){{3}}{_LS32}",
        f"(({_H16}:){{0,2}}{_H16})?::({_H16}:){{2}}{_LS32}",
        f"(({_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
        f"(({_H16}:){{0,4}}{_H16})?::{_LS32}",
        f"(({_H16}:){{0,5}}{_H16})?::{_H16}",
        f"(({_H16}:){{0,6}}{_H16})?::",
    ]
)
# International labels: letters of scripts the IDNA codec takes as they are, at most 8 of
# them with ASCII so that the encoded label stays under 63 characters.
_INTL = (
    "\\u00df-\\u00f6\\u00f8-\\u00ff\\u03b1-\\u03c9\\u0430-\\u044f"
    "\\u3041-\\u3096\\u30a1-\\u30fa\\u4e00-\\u9fff\\uac00-\\ud7a3"
)
_LABEL = f"([A-Za-z0-9_-]{{1,63}}|[A-Za-z0-9_{_INTL}-]{{1,8}})"
_HOST = f"(\\[({_IPV6})\\]|{_LABEL}(\\.{_LABEL})*\\.?)"
_PORT = "(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
_USERINFO = "[A-Za-z0-9._~!$&'()*+,;=:%-]*@"
URL_PATTERN = f"^[Hh][Tt][Tt][Pp][Ss]?://({_USERINFO})?{_HOST}(:{_PORT})?([/?#][^\\u0000]*)?$"
"""An http(s) URL: a host name (ASCII labels of 1-63 characters, or labels of at most 8
letters that may be Latin, Greek, Cyrillic, kana, CJK or Hangul; other international names
in their ``xn--`` form), an IPv4 or a bracketed IPv6 address; an optional port 1-65535; any
path, query and fragment without NUL."""


@functools.cache
def compiled(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled (cached)."""
    return re.compile(pattern)


@functools.cache
def time_zones() -> tuple[str, ...]:
    """The IANA time zone names this machine knows, sorted (``sync_timezone``'s enum)."""
    return tuple(sorted(zoneinfo.available_timezones()))
