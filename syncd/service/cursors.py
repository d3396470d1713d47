"""List cursors: the opaque position of a page in a list of connectors, runs or documents.

A cursor is the base64url text (unpadded) of the last key listed, ``~`` that of an empty key
(stored by versions that allowed one). The service hands out :func:`encode_cursor` and reads
back :func:`decode_cursor`; the API takes a ``cursor`` query value through
:func:`parse_cursor`, which accepts exactly what :data:`CURSOR_PATTERN` (the OpenAPI
document's) describes. Each refusal is a :class:`~syncd.errors.ValidationError` keyed
``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import re

from syncd.errors import ValidationError

EMPTY_CURSOR = "~"
"""The cursor of an empty key."""
CURSOR_MAX_LENGTH = 1024

_B64 = "[A-Za-z0-9_-]"
# A list cursor: base64url without padding (never 4n+1 characters long) of text without NUL,
# or "~". The lookaheads refuse each way a group of 4 (or the last 2 or 3) characters can
# encode a zero byte: A[A-P] (first byte), .[AQgw][A-D] (second), ..[AEIMQUYcgkosw048]A (third).
_NO_ZERO_1 = "(?!A[A-P])"
_NO_ZERO_2 = f"(?!{_B64}[AQgw][A-D])"
_NO_ZERO_3 = f"(?!{_B64}{{2}}[AEIMQUYcgkosw048]A)"
CURSOR_PATTERN = (
    f"^(~|({_NO_ZERO_1}{_NO_ZERO_2}{_NO_ZERO_3}{_B64}{{4}})*"
    f"({_NO_ZERO_1}{_NO_ZERO_2}{_NO_ZERO_3}{_B64}{{4}}"
    f"|{_NO_ZERO_1}{_B64}{{2}}"
    f"|{_NO_ZERO_1}{_NO_ZERO_2}{_B64}{{3}}))$"
)
"""The cursors :func:`parse_cursor` takes, as a regular expression (the OpenAPI pattern)."""

_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")


def _invalid() -> ValidationError:
    return ValidationError({"cursor": "Invalid cursor"})


def encode_cursor(value: str) -> str:
    """An opaque list cursor for ``value``."""
    if not value:
        # An empty id (stored by versions that allowed it) still gets a cursor the API takes.
        return EMPTY_CURSOR
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    """The value behind a cursor from :func:`encode_cursor`; 422 on anything else."""
    if cursor is None:
        return None
    if cursor == EMPTY_CURSOR:
        return ""
    try:
        padded = (cursor + "=" * (-len(cursor) % 4)).encode()
        value = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise _invalid() from None
    if not value or "\x00" in value:
        raise _invalid()
    return value


def parse_cursor(raw: str) -> str:
    """A ``cursor`` query value as the service takes it: exactly what
    :data:`CURSOR_PATTERN` describes.

    A cursor is opaque but forgeable. Any base64url text (unpadded) is a position in the
    list, even one this daemon did not hand out; bytes that are not UTF-8 are read with
    U+FFFD in their place. One that decodes to a NUL is refused (no store can compare it:
    PostgreSQL fails), and so is anything that is not base64url.
    """
    if raw == EMPTY_CURSOR:
        return raw
    if len(raw) > CURSOR_MAX_LENGTH or len(raw) % 4 == 1 or not _BASE64URL.fullmatch(raw):
        raise _invalid()
    data = base64.b64decode(raw + "=" * (-len(raw) % 4), altchars=b"-_", validate=True)
    if b"\0" in data:
        raise _invalid()
    try:
        data.decode()
    except UnicodeDecodeError:
        return encode_cursor(data.decode(errors="replace"))
    return raw
