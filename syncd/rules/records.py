"""From a crawled page's records to documents: the external id of a record, the part of it
the content hash covers (``hash_fields``), and :func:`document_inputs`."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from syncd.jsontext import PayloadError, canonical_json
from syncd.models import DocumentInput, Rejection
from syncd.paths import MISSING, get_parts, parse_path

MAX_EXTERNAL_ID_BYTES = 512
"""The longest external id, in UTF-8 bytes: it fits a PostgreSQL index entry and its list
cursor fits the API's cursor length limit on every backend."""


def external_id_of(record: Any, path: Sequence[str], name: str | None = None) -> str:
    """The external id of a record: the value at ``path`` (parts, from
    :func:`~syncd.paths.parse_path`; ``name`` is the path as written, for the reasons), a
    non-empty string or an integer (written in decimal). :class:`ValueError` with the reason
    otherwise."""
    name = ".".join(path) if name is None else name
    if not isinstance(record, Mapping):
        raise ValueError("record is not an object")
    value: Any = get_parts(record, tuple(path))
    if value is MISSING:
        raise ValueError(f"id field {name!r} is missing")
    if isinstance(value, bool):
        raise ValueError(f"id field {name!r} is a boolean")
    if isinstance(value, int):
        try:
            text = str(int(value))
        except ValueError:  # beyond Python's digit limit for int -> str
            raise ValueError(
                f"id field {name!r} is longer than {MAX_EXTERNAL_ID_BYTES} bytes"
            ) from None
    elif isinstance(value, str):
        text = value
        if not text:
            raise ValueError(f"id field {name!r} is an empty string")
    else:
        raise ValueError(f"id field {name!r} is {_kind(value)}")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"id field {name!r} is not valid Unicode (a lone surrogate)") from None
    if "\x00" in text:
        # PostgreSQL text cannot hold NUL; refused everywhere so that backends agree.
        raise ValueError(f"id field {name!r} contains a NUL character")
    if size > MAX_EXTERNAL_ID_BYTES:
        raise ValueError(f"id field {name!r} is longer than {MAX_EXTERNAL_ID_BYTES} bytes")
    return text


def _plain_id(record: dict[str, Any], key: str) -> str | None:
    """The id at ``key`` when it is obviously valid -- what :func:`external_id_of` would
    return -- else ``None`` (the general check then decides, with its reason)."""
    value: Any = record.get(key)
    kind = type(value)
    if kind is str:
        # ASCII: one byte a character, and no lone surrogate (str.isascii is O(1)).
        if (
            value
            and value.isascii()
            and len(value) <= MAX_EXTERNAL_ID_BYTES
            and "\x00" not in value
        ):
            return str(value)  # the same object: already a str
    elif kind is int and -_SMALL_INT < value < _SMALL_INT:
        return str(value)
    return None


# Integers below this are written in fewer digits than any length limit.
_SMALL_INT = 10**18


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return "a number that is not an integer"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return f"of type {type(value).__name__}"


def hash_paths(hash_fields: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """The paths of ``hash_fields`` split into parts, each once, without a path that
    another one of them contains (``a.b`` goes when ``a`` is there: ``a`` covers it)."""
    paths = {parse_path(f) for f in hash_fields}
    return tuple(sorted(p for p in paths if not any(p[:n] in paths for n in range(1, len(p)))))


def hashed_part(record: Mapping[str, Any], paths: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The sub-document of ``record`` made of ``paths`` (from :func:`hash_paths`): each
    value at its place in nested objects, e.g. ``{"meta": {"title": …}}`` for
    ``meta.title``. A path that is missing, or runs through a value that is not an object,
    is absent from it (a present ``null`` is kept, so it differs from a missing field)."""
    out: dict[str, Any] = {}
    for path in paths:
        value = get_parts(record, tuple(path))
        if value is not MISSING:
            # No path is a prefix of another: every object on the way is one made here.
            node = out
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value
    return out


def document_inputs(
    records: Sequence[Any], id_field: str = "id", hash_fields: Sequence[str] | None = None
) -> tuple[list[DocumentInput], list[Rejection]]:
    """Turn a page's records into documents keyed by ``id_field`` (a path: :mod:`syncd.paths`).

    Returns the documents and the records rejected, each with its index in the page and a
    reason: a record without a usable id (:func:`external_id_of`) or whose payload cannot
    be stored (:class:`PayloadError`). A rejected record never fails the page.

    The content hash is the SHA-256 of the record's canonical JSON or, with ``hash_fields``
    (paths), of the canonical JSON of the sub-document those paths make
    (:func:`hashed_part`), so that a change elsewhere in the record (a view count, a fetch
    time) does not change it. The payload is the whole record either way. Paths that cover
    the whole record give the whole record's hash.
    """
    path = parse_path(id_field)
    top = path[0] if len(path) == 1 else None
    parts = hash_paths(hash_fields) if hash_fields is not None else None
    sha256 = hashlib.sha256
    out: list[DocumentInput] = []
    rejected: list[Rejection] = []
    for index, rec in enumerate(records):
        # The usual record (a dict whose id is a short ASCII string or a small integer at a
        # top-level key) skips the general checks; anything else goes through them.
        external_id = _plain_id(rec, top) if top is not None and type(rec) is dict else None
        if external_id is None:
            try:
                external_id = external_id_of(rec, path, id_field)
            except ValueError as exc:
                rejected.append(Rejection(index, str(exc)))
                continue
        try:
            blob = canonical_json(rec)
        except PayloadError as exc:
            rejected.append(Rejection(index, f"payload cannot be stored: {exc}"[:200]))
            continue
        # The sub-document's values are the record's, already checked storable just above.
        hashed = blob if parts is None else canonical_json(hashed_part(rec, parts))
        out.append(DocumentInput(external_id, rec, sha256(hashed).hexdigest(), blob.decode()))
    return out, rejected
