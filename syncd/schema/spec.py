"""Validation of connector bodies (``POST /connectors``, ``PATCH /connectors/{id}``).

Pure: no I/O. The daemon calls it for every create and update, so the HTTP API and embedding
users get the same checks and the same messages. Every bad field is reported at once in a
:class:`~syncd.errors.ValidationError` keyed by its dotted path (``source.url``,
``retry_on_status.1``); the body as a whole is keyed ``body``. The checks of each field come
from the connector models of :mod:`syncd.schema` (built per registry of kinds), the ones the
JSON Schema of a connector file is generated from.

Besides each field's own rules, every value anywhere in a body (plugin configs included) must
be one every store holds and reads back unchanged: text without NUL characters or lone
surrogates (PostgreSQL refuses both), integers of 64 bits (the stores' JSON reader turns
larger ones into floats, or fails), finite floats, at most :data:`DEPTH_MAX` levels deep.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticError

from syncd.errors import ValidationError
from syncd.models import ConnectorStatus, PaginatorSettings
from syncd.schema.connector import (
    DEFAULT_INDEXER,
    DEFAULT_SOURCE_TYPE,
    Kinds,
    connector_models,
)
from syncd.schema.fields import (
    MSG_NOT_OBJECT,
    MSG_UNKNOWN,
    field_errors,
)

__all__ = [
    "DEPTH_MAX",
    "INT_MAX",
    "INT_MIN",
    "MSG_NUL",
    "MSG_SURROGATE",
    "check_unknown",
    "parse_create",
    "parse_patch",
    "text_problem",
]

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""Range of any integer in a body: what the stores read back as an integer."""
DEPTH_MAX = 32
"""Nesting levels of objects and arrays in a body."""

MSG_NUL = "Must not contain NUL characters (\\u0000)"
MSG_SURROGATE = "Must be valid Unicode text (no lone surrogates)"


def parse_create(body: Any, *, defaults: PaginatorSettings, kinds: Kinds) -> dict[str, Any]:
    """Validate a create body; return every connector field it sets, defaults filled in.

    Keys are :class:`~syncd.models.Connector` field names. Raises :class:`ValidationError`
    listing every bad field.
    """
    if not isinstance(body, Mapping):
        raise ValidationError({"body": MSG_NOT_OBJECT})
    out: dict[str, Any] = {
        "indexer": dict(DEFAULT_INDEXER),
        "sync_schedule": None,
        "sync_timezone": None,
        "page_retries": defaults.page_retries,
        "page_retry_backoff": defaults.page_retry_backoff,
        "throttle_seconds": defaults.throttle_seconds,
        "retry_on_status": tuple(defaults.retry_on_status),
    }
    out.update(_validate(body, connector_models(kinds).create))
    return out


def parse_patch(body: Any, *, kinds: Kinds) -> dict[str, Any]:
    """Validate a PATCH body; return only the fields it sets.

    ``status`` (``active`` or ``paused``) comes back as a :class:`ConnectorStatus`;
    ``sync_schedule`` / ``sync_timezone`` may be ``None`` (cleared). A ``source`` or
    ``indexer`` replaces the previous one as a whole.
    """
    if not isinstance(body, Mapping):
        raise ValidationError({"body": MSG_NOT_OBJECT})
    return _validate(body, connector_models(kinds).patch)


def _validate(body: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """The fields ``body`` sets, checked by ``model`` and as storable; every error at once.

    ``source`` and ``indexer`` are kept exactly as sent (plus the source's default ``type``):
    a stored config is shown back to its users, so no default is written into it.
    """
    errors: dict[str, str] = {}
    fields: dict[str, Any] = {}
    try:
        validated = model.model_validate(dict(body))
    except PydanticError as exc:
        errors.update(field_errors(exc))
    else:
        for key in type(validated).model_fields:
            if key in validated.model_fields_set:
                fields[key] = getattr(validated, key)
        if "source" in fields:
            fields["source"] = dict(body["source"])
            fields["source"].setdefault("type", DEFAULT_SOURCE_TYPE)
        if "indexer" in fields:
            fields["indexer"] = dict(body["indexer"])
        if "document" in fields:
            # Kept as sent, as the source and indexer are: shown back to its users.
            fields["document"] = None if body["document"] is None else dict(body["document"])
        if "retry_on_status" in fields:
            fields["retry_on_status"] = tuple(dict.fromkeys(fields["retry_on_status"]))
        if fields.get("hash_fields") is not None:
            fields["hash_fields"] = tuple(dict.fromkeys(fields["hash_fields"]))
        if "status" in fields:
            fields["status"] = ConnectorStatus(fields["status"])
    _check_storable(body, errors)
    if errors:
        raise ValidationError(errors)
    return fields


def check_unknown(
    obj: Mapping[str, Any], allowed: Collection[str], prefix: str, errors: dict[str, str]
) -> None:
    """Name each key of ``obj`` not in ``allowed`` (``prefix`` + key) as unknown."""
    for key in obj:
        if key not in allowed:
            errors[f"{prefix}{key}"] = MSG_UNKNOWN


def _check_storable(body: Mapping[str, Any], errors: dict[str, str]) -> None:
    """Add an error for every value of ``body`` that a store cannot hold unchanged.

    Text problems replace a field's own error (a NUL says more than "not a valid cron
    expression"); number problems only fill paths without one, so a field's range message
    wins. Walked with a stack: a deep body must not exhaust recursion.
    """
    stack: list[tuple[str, Any, int]] = [("", body, 0)]
    while stack:
        where, value, depth = stack.pop()
        if isinstance(value, str):
            if problem := text_problem(value):
                errors[where] = problem
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if not INT_MIN <= value <= INT_MAX:
                errors.setdefault(where, f"Must be an integer between {INT_MIN} and {INT_MAX}")
        elif isinstance(value, float):
            if not math.isfinite(value):
                errors.setdefault(where, "Must be a finite number")
        elif isinstance(value, Mapping | list | tuple):
            if depth >= DEPTH_MAX:
                errors[where] = f"Must not be nested more than {DEPTH_MAX} levels deep"
                continue
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            children: list[tuple[str, Any, int]] = []
            for key, child in items:
                if not isinstance(key, str | int):  # a list's index, or from an embedding caller
                    errors[where or "body"] = "Keys must be strings"
                elif isinstance(key, str) and (problem := text_problem(key)):
                    errors[where or "body"] = f"Key {key!r}: {problem}"
                children.append((f"{where}.{key}" if where else str(key), child, depth + 1))
            stack.extend(reversed(children))  # reported in document order


def text_problem(text: str) -> str | None:
    """Why no store can hold ``text`` (``None`` when every one can)."""
    if "\x00" in text:
        return MSG_NUL
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return MSG_SURROGATE
    return None
