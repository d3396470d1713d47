"""The JSON text of payloads: the canonical writer (one text for the hash and for storage),
the exact reader (integers of any size), and the content hash."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import date, datetime
from datetime import time as time_of_day
from typing import Any

import orjson

_JSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


class PayloadError(ValueError):
    """A payload that cannot be stored as JSON text (NaN, infinity, a lone surrogate, a
    nesting too deep, an integer too long to write)."""


def _default(value: Any) -> str:
    return str(value)


def _default_exact(value: Any) -> str:
    # Dates as orjson writes them, so that both paths agree where they can.
    if isinstance(value, datetime | date | time_of_day):
        return value.isoformat()
    return str(value)


# The exact path, for what orjson refuses: integers beyond 64 bits (Python ints keep every
# digit), lone surrogates (then refused when encoded), nesting deeper than orjson allows.
_EXACT = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    default=_default_exact,
)


def canonical_json(payload: Any) -> bytes:
    """The payload's canonical JSON text (UTF-8): compact, keys sorted, non-ASCII kept,
    control characters (NUL included) escaped, integers of any size with every digit.

    orjson writes it; only what orjson refuses (an integer beyond 64 bits, say) goes through
    an exact stdlib path. Values JSON has no type for (a plugin's ``datetime``, ``set`` …)
    are written as strings. :class:`PayloadError` when the payload cannot be JSON text at
    all: NaN or infinity, a lone surrogate, nesting too deep.
    """
    try:
        blob = orjson.dumps(payload, option=_JSON_OPTIONS, default=_default)
    except TypeError:  # orjson.JSONEncodeError
        return _exact_json(payload)
    # orjson writes NaN and infinity as null: look for them only when a null was written.
    if b"null" in blob and not _all_finite(payload):
        raise PayloadError("NaN and infinity are not JSON numbers")
    return blob


def _exact_json(payload: Any) -> bytes:
    try:
        return _EXACT.encode(payload).encode("utf-8")
    except RecursionError:
        raise PayloadError("nested too deeply") from None
    except UnicodeEncodeError:
        raise PayloadError("text is not valid Unicode (a lone surrogate)") from None
    except (ValueError, TypeError) as exc:
        raise PayloadError(str(exc)) from None


def _all_finite(value: Any) -> bool:
    """No NaN or infinity anywhere in ``value`` (orjson would write them as null)."""
    stack = [value]
    while stack:
        item = stack.pop()
        children: Any
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            if isinstance(item, float) and not math.isfinite(item):
                return False
            continue
        for child in children:
            kind = type(child)
            if kind is str or kind is int or child is None or kind is bool:
                continue  # the usual scalars, without a trip through the stack
            if kind is float:
                if not math.isfinite(child):
                    return False
            else:
                stack.append(child)
    return True


# 19 digits in a row may be an integer beyond 64 bits, which orjson would read as a float.
# Found by mapping every byte of the UTF-8 text to "1" (an ASCII digit) or "0" and searching
# for nineteen "1"s: ~1 µs for a 1 KB payload where a regular expression took ~8 µs (a claim
# parses each of its documents' payloads). Bytes of a multi-byte character are >= 0x80, so
# they never look like digits.
_DIGITS = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_RUN = b"1" * 19


def has_long_number(text: str | bytes) -> bool:
    """Whether ``text`` holds 19 ASCII digits in a row (possibly an integer beyond 64 bits)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return _LONG_RUN in raw.translate(_DIGITS)


def parse_json(text: str | bytes) -> Any:
    """Parse JSON text exactly: integers of any size stay integers (orjson when the text
    holds no long number, the stdlib parser otherwise)."""
    if has_long_number(text):
        return json.loads(text)
    return orjson.loads(text)


def content_hash(payload: Any) -> str:
    """A stable hash of a JSON-serialisable payload (key order does not matter): SHA-256
    of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(payload)).hexdigest()
