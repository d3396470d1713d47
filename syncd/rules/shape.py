"""The document shape (DESIGN.md §7): what a connector's ``document`` mapping reads from a
record — ``title``, ``text``, ``url``, ``updated_at`` and ``metadata``.

A mapping (kept as its user wrote it, validated by :mod:`syncd.schema.document`):

- ``title``, ``url``: a path (:mod:`syncd.paths`) or ``{"template": "…"}``;
- ``text``: a path, a list of paths (the values present joined by a blank line) or a
  template; with ``text_format: "html"`` the text is HTML turned into plain text
  (:func:`html_text`);
- ``updated_at``: a path to an RFC 3339 / ISO 8601 time or a Unix time in seconds, given as
  RFC 3339 in UTC (``2024-05-01T12:00:00Z``);
- ``metadata``: names → paths, each value as JSON (a name whose path is missing is left out).

A template is text with ``{path}`` placeholders (``{{`` and ``}}`` are literal braces); a
placeholder whose path is missing reads as empty. A value is text as is, a number or boolean
as its JSON text, a list of scalars as its items one per line, an object as its JSON text; a
missing, null or empty value is ``None``. Shaping never fails a document: a field it cannot
read is ``None``, and the payload still carries the whole record. Pure: no I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import orjson

from syncd import paths
from syncd.jsontext import canonical_json
from syncd.models import Document, DocumentFields

__all__ = [
    "MSG_TEMPLATE",
    "Shaper",
    "fields_object",
    "html_text",
    "is_costly",
    "parse_template",
    "shaped",
    "shaper",
    "template_problem",
]

MSG_TEMPLATE = (
    "Must be text with {path} placeholders (a dotted path or a JSON Pointer); "
    "write {{ and }} for literal braces"
)
TEXT_SEPARATOR = "\n\n"

# A parsed template: literal text and placeholders (a path's parts), in order.
_Piece = str | tuple[str, ...]


def parse_template(template: str) -> tuple[_Piece, ...]:
    """The pieces of ``template``; ``ValueError`` (:data:`MSG_TEMPLATE`) when a brace is
    unbalanced or a placeholder is not a path."""
    pieces: list[_Piece] = []
    literal: list[str] = []
    i, n = 0, len(template)
    while i < n:
        char = template[i]
        if char in "{}" and template.startswith(char * 2, i):
            literal.append(char)
            i += 2
        elif char == "}":
            raise ValueError(MSG_TEMPLATE)
        elif char == "{":
            end = template.find("}", i + 1)
            path = template[i + 1 : end] if end > 0 else ""
            if end < 0 or "{" in path or paths.path_problem(path):
                raise ValueError(MSG_TEMPLATE)
            if literal:
                pieces.append("".join(literal))
                literal.clear()
            pieces.append(paths.parse_path(path))
            i = end + 1
        else:
            literal.append(char)
            i += 1
    if literal:
        pieces.append("".join(literal))
    return tuple(pieces)


def template_problem(template: Any) -> str | None:
    """Why ``template`` is not a template, or ``None``."""
    if not isinstance(template, str) or not template:
        return MSG_TEMPLATE
    try:
        pieces = parse_template(template)
    except ValueError as exc:
        return str(exc)
    if not any(isinstance(p, tuple) for p in pieces):
        return "Must hold at least one {path} placeholder"
    return None


def html_text(html: str) -> str:
    """Plain text of an HTML fragment or page, laid out as a browser shows it (blocks on
    lines of their own, list items, table cells apart), by ``inscriptis``."""
    # Imported here: only connectors with `text_format: html` load lxml.
    from inscriptis import get_text

    return str(get_text(html))


def _text(value: Any) -> str | None:
    """A record value as the text of a field (see the module docstring)."""
    if value is paths.MISSING or value is None:
        return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, bool | int | float):
        return _json(value)
    if isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
        lines = [t for t in map(_text, value) if t is not None]
        return "\n".join(lines) or None
    return _json(value)


def _json(value: Any) -> str | None:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits, which orjson refuses
        return str(value) if isinstance(value, int) else None


def _time(value: Any) -> str | None:
    """``value`` as an RFC 3339 UTC time, or ``None`` when it is not a time."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value) or abs(value) > 253_402_300_799:  # past year 9999
            return None
        when = datetime.fromtimestamp(value, UTC)
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip().replace("z", "Z"))
        except ValueError:
            return None
        if when.tzinfo is None:  # a time without an offset is read as UTC
            when = when.replace(tzinfo=UTC)
    else:
        return None
    spec = "microseconds" if when.microsecond else "seconds"
    return when.astimezone(UTC).isoformat(timespec=spec).replace("+00:00", "Z")


_Read = Callable[[Any], str | None]


def _reader(spec: Any, convert: Callable[[str], str] | None = None) -> _Read:
    """How one of ``title``, ``text``, ``url`` is read from a record; ``convert`` turns each
    value read (a path's, or a filled template) into its final text."""
    if isinstance(spec, Mapping):
        pieces = parse_template(spec["template"])

        def fill(record: Any) -> str | None:
            out: list[str] = []
            found = False
            for piece in pieces:
                if isinstance(piece, str):
                    out.append(piece)
                elif (text := _text(paths.get_parts(record, piece))) is not None:
                    out.append(text)
                    found = True
            # Every placeholder missing: nothing of the record is there to show.
            return _final("".join(out), convert) if found else None

        return fill
    if isinstance(spec, str):
        parts = paths.parse_path(spec)

        def read(record: Any) -> str | None:
            text = _text(paths.get_parts(record, parts))
            return None if text is None else _final(text, convert)

        return read
    readers = [_reader(s, convert) for s in spec]

    def join(record: Any) -> str | None:
        found = [t for t in (read(record) for read in readers) if t is not None]
        return TEXT_SEPARATOR.join(found) or None

    return join


def _final(text: str, convert: Callable[[str], str] | None) -> str | None:
    text = (convert(text) if convert is not None else text).strip()
    return text or None


class Shaper:
    """A compiled ``document`` mapping: ``shaper(record)`` is the record's
    :class:`~syncd.models.DocumentFields`."""

    def __init__(self, mapping: Mapping[str, Any]) -> None:
        none: _Read = lambda _record: None  # noqa: E731
        self._title = _reader(mapping["title"]) if "title" in mapping else none
        self._url = _reader(mapping["url"]) if "url" in mapping else none
        convert = html_text if mapping.get("text_format") == "html" else None
        self._text = _reader(mapping["text"], convert) if "text" in mapping else none
        updated = mapping.get("updated_at")
        self._updated = paths.parse_path(updated) if updated is not None else None
        self._metadata = tuple(
            (name, paths.parse_path(path)) for name, path in (mapping.get("metadata") or {}).items()
        )

    def __call__(self, record: Any) -> DocumentFields:
        updated = None
        if self._updated is not None:
            updated = _time(paths.get_parts(record, self._updated))
        metadata = {}
        for name, parts in self._metadata:
            value = paths.get_parts(record, parts)
            if value is not paths.MISSING:
                metadata[name] = value
        return DocumentFields(
            title=self._title(record),
            text=self._text(record),
            url=self._url(record),
            updated_at=updated,
            metadata=metadata,
        )


@functools.lru_cache(maxsize=256)
def _compiled(key: bytes) -> Shaper:
    return Shaper(orjson.loads(key))


def shaper(mapping: Mapping[str, Any]) -> Shaper:
    """The compiled ``mapping`` (cached by its content: connectors share few mappings)."""
    return _compiled(orjson.dumps(mapping, option=orjson.OPT_SORT_KEYS))


def shaped(mapping: Mapping[str, Any], documents: Sequence[Document]) -> list[Document]:
    """``documents`` with their ``fields`` read from their payloads under ``mapping``."""
    shape = shaper(mapping)
    return [replace(d, fields=shape(d.payload)) for d in documents]


def fields_object(fields: DocumentFields) -> dict[str, Any]:
    """``fields`` as the JSON object indexers send (``metadata`` as its canonical JSON text,
    which keeps integers of any size)."""
    return {
        "title": fields.title,
        "text": fields.text,
        "url": fields.url,
        "updated_at": fields.updated_at,
        "metadata": orjson.Fragment(canonical_json(dict(fields.metadata))),
    }


def is_costly(mapping: Mapping[str, Any]) -> bool:
    """Whether shaping under ``mapping`` costs enough to leave the event loop (HTML)."""
    return mapping.get("text_format") == "html"
