"""Validation of connector bodies (``POST /connectors``, ``PATCH /connectors/{id}``).

Pure: no I/O. The daemon calls it for every create and update, so the HTTP API and embedding
users get the same checks and the same messages. Every bad field is reported at once in a
:class:`~syncd.errors.ValidationError` keyed by its dotted path (``source.url``,
``retry_on_status.1``); the body as a whole is keyed ``body``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from syncd import schedule
from syncd.errors import ValidationError
from syncd.models import ConnectorStatus

NAME_MAX_LENGTH = 200
PAGE_RETRIES_MAX = 20
DEFAULT_SOURCE_TYPE = "http"
DEFAULT_INDEXER: Mapping[str, Any] = {"type": "store"}

MSG_NOT_OBJECT = "Must be a JSON object"
MSG_REQUIRED = "Field required"
MSG_UNKNOWN = "Unknown field"

CREATE_FIELDS = (
    "name",
    "source",
    "indexer",
    "sync_schedule",
    "sync_timezone",
    "page_retries",
    "page_retry_backoff",
    "throttle_seconds",
    "retry_on_status",
)
PATCH_FIELDS = (*CREATE_FIELDS, "status")
PATCHABLE_STATUSES = (ConnectorStatus.ACTIVE, ConnectorStatus.PAUSED)


@dataclass(frozen=True)
class SyncDefaults:
    """Daemon-wide defaults of the four paginator keys, used when a create omits them."""

    page_retries: int = 3
    page_retry_backoff: float = 2.0
    throttle_seconds: float = 0.0
    retry_on_status: tuple[int, ...] = (502, 503, 504)


def parse_create(
    body: Any,
    *,
    defaults: SyncDefaults,
    source_types: Collection[str],
    indexer_types: Collection[str],
) -> dict[str, Any]:
    """Validate a create body; return every connector field it sets, defaults filled in.

    Keys are :class:`~syncd.models.Connector` field names. Raises :class:`ValidationError`
    listing every bad field.
    """
    errors: dict[str, str] = {}
    if not isinstance(body, Mapping):
        raise ValidationError({"body": MSG_NOT_OBJECT})
    _check_unknown(body, CREATE_FIELDS, "", errors)
    for required in ("name", "source"):
        if required not in body:
            errors[required] = MSG_REQUIRED
    out: dict[str, Any] = {
        "indexer": dict(DEFAULT_INDEXER),
        "sync_schedule": None,
        "sync_timezone": None,
        "page_retries": defaults.page_retries,
        "page_retry_backoff": defaults.page_retry_backoff,
        "throttle_seconds": defaults.throttle_seconds,
        "retry_on_status": tuple(defaults.retry_on_status),
    }
    out.update(_parse_fields(body, source_types, indexer_types, errors))
    if errors:
        raise ValidationError(errors)
    return out


def parse_patch(
    body: Any, *, source_types: Collection[str], indexer_types: Collection[str]
) -> dict[str, Any]:
    """Validate a PATCH body; return only the fields it sets.

    ``status`` (``active`` or ``paused``) comes back as a :class:`ConnectorStatus`;
    ``sync_schedule`` / ``sync_timezone`` may be ``None`` (cleared). A ``source`` or
    ``indexer`` replaces the previous one as a whole.
    """
    errors: dict[str, str] = {}
    if not isinstance(body, Mapping):
        raise ValidationError({"body": MSG_NOT_OBJECT})
    _check_unknown(body, PATCH_FIELDS, "", errors)
    out = _parse_fields(body, source_types, indexer_types, errors)
    if "status" in body:
        value = body["status"]
        allowed = [s.value for s in PATCHABLE_STATUSES]
        if isinstance(value, str) and value in allowed:
            out["status"] = ConnectorStatus(value)
        else:
            errors["status"] = f"Must be one of: {', '.join(allowed)}"
    if errors:
        raise ValidationError(errors)
    return out


# --- fields -------------------------------------------------------------------------


def _parse_fields(
    body: Mapping[str, Any],
    source_types: Collection[str],
    indexer_types: Collection[str],
    errors: dict[str, str],
) -> dict[str, Any]:
    """Validate the fields shared by create and patch that are present in ``body``."""
    parsers: dict[str, Callable[[Any, dict[str, str]], Any]] = {
        "name": _name,
        "source": lambda v, e: _source(v, source_types, e),
        "indexer": lambda v, e: _indexer(v, indexer_types, e),
        "sync_schedule": _schedule,
        "sync_timezone": _timezone,
        "page_retries": _page_retries,
        "page_retry_backoff": lambda v, e: _non_negative("page_retry_backoff", v, e),
        "throttle_seconds": lambda v, e: _non_negative("throttle_seconds", v, e),
        "retry_on_status": _retry_on_status,
    }
    out: dict[str, Any] = {}
    for key, parse in parsers.items():
        if key in body:
            before = len(errors)
            value = parse(body[key], errors)
            if len(errors) == before:
                out[key] = value
    return out


def _check_unknown(
    obj: Mapping[str, Any], allowed: Collection[str], prefix: str, errors: dict[str, str]
) -> None:
    for key in obj:
        if key not in allowed:
            errors[f"{prefix}{key}"] = MSG_UNKNOWN


def _name(value: Any, errors: dict[str, str]) -> str | None:
    if not isinstance(value, str):
        errors["name"] = "Must be a string"
        return None
    # Surrounding blanks would make two names that look identical differ.
    name = value.strip()
    if not name:
        errors["name"] = "Must not be empty"
    elif len(name) > NAME_MAX_LENGTH:
        errors["name"] = f"Must be at most {NAME_MAX_LENGTH} characters"
    return name


def _source(value: Any, types: Collection[str], errors: dict[str, str]) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        errors["source"] = MSG_NOT_OBJECT
        return None
    source = dict(value)
    kind = source.setdefault("type", DEFAULT_SOURCE_TYPE)
    if not isinstance(kind, str):
        errors["source.type"] = "Must be a string"
        return None
    if kind not in types:
        errors["source.type"] = f"Unknown source type {kind!r}; known: {_known(types)}"
        return None
    if kind == "http":
        # Imported here: the http source pulls in the transport (aiohttp), which a caller
        # validating bodies does not otherwise need.
        from syncd.sources.http import validate_http_source

        errors.update(validate_http_source(source))
    # Plugin sources validate their own config when they are built.
    return source


def _indexer(value: Any, types: Collection[str], errors: dict[str, str]) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        errors["indexer"] = MSG_NOT_OBJECT
        return None
    indexer = dict(value)
    kind = indexer.get("type")
    if kind is None:
        errors["indexer.type"] = MSG_REQUIRED
        return None
    if not isinstance(kind, str):
        errors["indexer.type"] = "Must be a string"
        return None
    if kind not in types:
        errors["indexer.type"] = f"Unknown indexer type {kind!r}; known: {_known(types)}"
        return None
    if kind == "store":
        _check_unknown(indexer, ("type",), "indexer.", errors)
    elif kind == "webhook":
        _check_unknown(indexer, ("type", "url", "headers"), "indexer.", errors)
        if "url" not in indexer:
            errors["indexer.url"] = MSG_REQUIRED
        elif not _is_http_url(indexer["url"]):
            errors["indexer.url"] = "Must be an http:// or https:// URL"
        headers = indexer.get("headers")
        if headers is not None:
            if not isinstance(headers, Mapping):
                errors["indexer.headers"] = MSG_NOT_OBJECT
            else:
                for name, header in headers.items():
                    if not isinstance(header, str):
                        errors[f"indexer.headers.{name}"] = "Must be a string"
    return indexer


def _schedule(value: Any, errors: dict[str, str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        errors["sync_schedule"] = "Must be a string or null"
        return None
    expression = " ".join(value.split())
    if not schedule.is_valid(expression):
        errors["sync_schedule"] = "Must be a valid 5-field cron expression"
    return expression


def _timezone(value: Any, errors: dict[str, str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not schedule.is_valid_timezone(value):
        errors["sync_timezone"] = "Must be an IANA time zone name (e.g. Europe/Paris) or null"
        return None
    return value


def _page_retries(value: Any, errors: dict[str, str]) -> int | None:
    if not _is_int(value) or not 0 <= value <= PAGE_RETRIES_MAX:
        errors["page_retries"] = f"Must be an integer between 0 and {PAGE_RETRIES_MAX}"
        return None
    return int(value)


def _non_negative(key: str, value: Any, errors: dict[str, str]) -> float | None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )
    if not ok:
        errors[key] = "Must be a finite number >= 0"
        return None
    return float(value)


def _retry_on_status(value: Any, errors: dict[str, str]) -> tuple[int, ...] | None:
    if not isinstance(value, list | tuple):
        errors["retry_on_status"] = "Must be a list of HTTP status codes"
        return None
    out: list[int] = []
    for i, status in enumerate(value):
        if not _is_int(status) or not 400 <= status <= 599:
            errors[f"retry_on_status.{i}"] = "Must be an integer between 400 and 599"
        elif status not in out:
            out.append(int(status))
    return tuple(out)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_http_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _known(types: Collection[str]) -> str:
    return ", ".join(sorted(types)) or "none"
