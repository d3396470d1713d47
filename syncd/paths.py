"""Paths into JSON values: one syntax wherever a connector names a place in a record or a
response (``records``, ``id_field``, cursors, end signals, ``incremental``, ``hash_fields``).

Two spellings, told apart by the first character:

- **JSON Pointer** (RFC 6901) when the path starts with ``/``: ``/@odata.nextLink``,
  ``/data/0/id``, ``/a~1b`` (``~1`` is ``/``, ``~0`` is ``~``). It names any key: dots,
  ``@``, ``$``, spaces, the empty key.
- **Dotted** otherwise: ``meta.next``, ``items.0.id``; each part is non-empty and holds no dot.

A part reads an object's key, or an array's index when the value there is an array and the
part is a decimal index (``0``, ``12``; RFC 6901 allows no leading zeros). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

__all__ = ["MISSING", "get_parts", "get_path", "parse_path", "path_problem", "set_path"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""What :func:`get_path` returns where a path leads nowhere."""

# RFC 6901: in a pointer, "~" is only ever the start of "~0" or "~1".
_LONE_TILDE = re.compile(r"~(?![01])")

MSG_PATH = (
    "Must be a dotted path (non-empty parts, e.g. meta.next) or a JSON Pointer "
    "(starting with /, e.g. /@odata.nextLink)"
)


def path_problem(text: Any) -> str | None:
    """Why ``text`` is not a path, or ``None``."""
    if not isinstance(text, str) or not text or "\u0000" in text:
        return MSG_PATH
    if text.startswith("/"):
        return MSG_PATH if _LONE_TILDE.search(text) else None
    return None if all(text.split(".")) else MSG_PATH


@lru_cache(maxsize=4096)
def parse_path(text: str) -> tuple[str, ...]:
    """The parts of a valid path (``ValueError`` for an invalid one)."""
    if problem := path_problem(text):
        raise ValueError(f"{text!r}: {problem}")
    if text.startswith("/"):
        return tuple(p.replace("~1", "/").replace("~0", "~") for p in text[1:].split("/"))
    return tuple(text.split("."))


def _index(part: str, size: int) -> int | None:
    # ASCII digits only (RFC 6901 §4): str.isdigit() also takes superscripts and the
    # digits of other scripts.
    if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
        return None
    index = int(part)
    return index if index < size else None


def get_parts(data: Any, parts: tuple[str, ...]) -> Any:
    """The value at ``parts`` (from :func:`parse_path`) in ``data``, or :data:`MISSING`."""
    value = data
    for part in parts:
        # type() first: JSON objects are dicts, and the Mapping ABC check is slow.
        if type(value) is dict or isinstance(value, Mapping):
            if part not in value:
                return MISSING
            value = value[part]
        elif isinstance(value, list):
            index = _index(part, len(value))
            if index is None:
                return MISSING
            value = value[index]
        else:
            return MISSING
    return value


def get_path(data: Any, path: str) -> Any:
    """The value at ``path`` in ``data``, or :data:`MISSING`."""
    return get_parts(data, parse_path(path))


def set_path(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of object ``data`` with ``value`` at ``path``: the objects on the way are
    copied (or made where missing), so ``data`` itself is never changed. An array on the
    way takes an existing index; anything else there is replaced by an object."""
    out: dict[str, Any] = _set(data, parse_path(path), value)
    return out


def _set(node: Any, parts: tuple[str, ...], value: Any) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(node, list):
        index = _index(head, len(node))
        if index is not None:
            copy = list(node)
            copy[index] = _set(node[index], rest, value)
            return copy
    out = dict(node) if isinstance(node, Mapping) else {}
    out[head] = _set(out.get(head), rest, value)
    return out
