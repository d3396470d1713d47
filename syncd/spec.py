"""Validation of connector bodies (``POST /connectors``, ``PATCH /connectors/{id}``).

Pure: no I/O. The daemon calls it for every create and update, so the HTTP API and embedding
users get the same checks and the same messages. Every bad field is reported at once in a
:class:`~syncd.errors.ValidationError` keyed by its dotted path (``source.url``,
``retry_on_status.1``); the body as a whole is keyed ``body``.

Besides each field's own rules, every value anywhere in a body (plugin configs included) must
be one every store holds and reads back unchanged: text without NUL characters or lone
surrogates (PostgreSQL refuses both), integers of 64 bits (the stores' JSON reader turns
larger ones into floats, or fails), finite floats, at most :data:`DEPTH_MAX` levels deep.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from yarl import URL

from syncd import schedule
from syncd.errors import ValidationError
from syncd.models import ConnectorStatus, PaginatorSettings

NAME_MAX_LENGTH = 200
PAGE_RETRIES_MAX = 20
"""Retries per page. Each waits twice as long as the one before: more would wait for years."""
SECONDS_MAX = 3600
"""Upper bound of ``page_retry_backoff`` and ``throttle_seconds`` (one hour)."""
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""Range of any integer in a body: what the stores read back as an integer."""
DEPTH_MAX = 32
"""Nesting levels of objects and arrays in a body."""
PORT_MIN, PORT_MAX = 1, 65535
DEFAULT_SOURCE_TYPE = "http"
DEFAULT_INDEXER: Mapping[str, Any] = {"type": "store"}

MSG_NOT_OBJECT = "Must be a JSON object"
MSG_REQUIRED = "Field required"
MSG_UNKNOWN = "Unknown field"
MSG_URL = "Must be an http:// or https:// URL"
MSG_NUL = "Must not contain NUL characters (\\u0000)"
MSG_SURROGATE = "Must be valid Unicode text (no lone surrogates)"
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# The port of an absolute URL's authority (after any userinfo; an IPv6 host is bracketed).
_PORT = re.compile(
    r"https?://(?:[^/?#@]*@)?(?:\[[^\]/?#]*\]|[^:/?#]*):([0-9]+)(?:[/?#]|$)", re.IGNORECASE
)

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


SyncDefaults = PaginatorSettings
"""The older name of :class:`~syncd.models.PaginatorSettings` (the daemon-wide defaults of
the four paginator keys, used when a create omits them); kept for existing imports."""


class Kinds(Protocol):
    """The source and indexer kinds a body may name (:class:`syncd.plugins.Registry`)."""

    @property
    def source_names(self) -> frozenset[str]: ...

    @property
    def indexer_names(self) -> frozenset[str]: ...

    def find_source(self, name: str) -> _Kind | None: ...

    def find_indexer(self, name: str) -> _Kind | None: ...


class _Kind(Protocol):
    @property
    def validate(self) -> Callable[[Mapping[str, Any]], Mapping[str, str]] | None: ...


def parse_create(body: Any, *, defaults: PaginatorSettings, kinds: Kinds) -> dict[str, Any]:
    """Validate a create body; return every connector field it sets, defaults filled in.

    Keys are :class:`~syncd.models.Connector` field names. Raises :class:`ValidationError`
    listing every bad field.
    """
    errors: dict[str, str] = {}
    if not isinstance(body, Mapping):
        raise ValidationError({"body": MSG_NOT_OBJECT})
    check_unknown(body, CREATE_FIELDS, "", errors)
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
    out.update(_parse_fields(body, kinds, errors))
    _check_storable(body, errors)
    if errors:
        raise ValidationError(errors)
    return out


def parse_patch(body: Any, *, kinds: Kinds) -> dict[str, Any]:
    """Validate a PATCH body; return only the fields it sets.

    ``status`` (``active`` or ``paused``) comes back as a :class:`ConnectorStatus`;
    ``sync_schedule`` / ``sync_timezone`` may be ``None`` (cleared). A ``source`` or
    ``indexer`` replaces the previous one as a whole.
    """
    errors: dict[str, str] = {}
    if not isinstance(body, Mapping):
        raise ValidationError({"body": MSG_NOT_OBJECT})
    check_unknown(body, PATCH_FIELDS, "", errors)
    out = _parse_fields(body, kinds, errors)
    if "status" in body:
        value = body["status"]
        allowed = [s.value for s in PATCHABLE_STATUSES]
        if isinstance(value, str) and value in allowed:
            out["status"] = ConnectorStatus(value)
        else:
            errors["status"] = f"Must be one of: {', '.join(allowed)}"
    _check_storable(body, errors)
    if errors:
        raise ValidationError(errors)
    return out


# --- fields -------------------------------------------------------------------------


def _parse_fields(body: Mapping[str, Any], kinds: Kinds, errors: dict[str, str]) -> dict[str, Any]:
    """Validate the fields shared by create and patch that are present in ``body``."""
    parsers: dict[str, Callable[[Any, dict[str, str]], Any]] = {
        "name": _name,
        "source": lambda v, e: _source(v, kinds, e),
        "indexer": lambda v, e: _indexer(v, kinds, e),
        "sync_schedule": _schedule,
        "sync_timezone": _timezone,
        "page_retries": _page_retries,
        "page_retry_backoff": lambda v, e: _seconds("page_retry_backoff", v, e),
        "throttle_seconds": lambda v, e: _seconds("throttle_seconds", v, e),
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


def check_unknown(
    obj: Mapping[str, Any], allowed: Collection[str], prefix: str, errors: dict[str, str]
) -> None:
    """Name each key of ``obj`` not in ``allowed`` (``prefix`` + key) as unknown."""
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


def _source(value: Any, kinds: Kinds, errors: dict[str, str]) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        errors["source"] = MSG_NOT_OBJECT
        return None
    source = dict(value)
    name = source.setdefault("type", DEFAULT_SOURCE_TYPE)
    if not isinstance(name, str):
        errors["source.type"] = "Must be a string"
        return None
    kind = kinds.find_source(name)
    if kind is None:
        errors["source.type"] = f"Unknown source type {name!r}; known: {_known(kinds.source_names)}"
        return None
    # A kind without a validator (a plain plugin factory) checks its config when built.
    if kind.validate is not None:
        errors.update(kind.validate(source))
    return source


def _indexer(value: Any, kinds: Kinds, errors: dict[str, str]) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        errors["indexer"] = MSG_NOT_OBJECT
        return None
    indexer = dict(value)
    name = indexer.get("type")
    if name is None:
        errors["indexer.type"] = MSG_REQUIRED
        return None
    if not isinstance(name, str):
        errors["indexer.type"] = "Must be a string"
        return None
    kind = kinds.find_indexer(name)
    if kind is None:
        errors["indexer.type"] = (
            f"Unknown indexer type {name!r}; known: {_known(kinds.indexer_names)}"
        )
        return None
    if kind.validate is not None:
        errors.update(kind.validate(indexer))
    return indexer


def check_headers(headers: Any, where: str, errors: dict[str, str]) -> None:
    """Headers that every request could send: the same rules as the http source's."""
    if headers is None:
        return
    if not isinstance(headers, Mapping):
        errors[where] = MSG_NOT_OBJECT
        return
    # Imported here, like the http source: the sources package pulls in the transport.
    from syncd.sources.secrets import check_refs

    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            errors[f"{where}.{name}"] = "Invalid header name"
        elif not isinstance(value, str):
            errors[f"{where}.{name}"] = "Must be a string"
        elif problem := check_refs(value):
            errors[f"{where}.{name}"] = problem
        elif "\n" in value or "\r" in value:
            errors[f"{where}.{name}"] = "Must not contain line breaks"


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


def _seconds(key: str, value: Any, errors: dict[str, str]) -> float | None:
    # Compared before any float(): a 400-digit integer does not fit a float; NaN fails both.
    if not _is_number(value) or not 0 <= value <= SECONDS_MAX:
        errors[key] = f"Must be a number of seconds between 0 and {SECONDS_MAX}"
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


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def url_problem(value: Any) -> str | None:
    """Why ``value`` is not a URL the transport can request (``None`` when it is).

    Parsed with yarl, as the transport parses it: absolute ``http``/``https``, a host that
    encodes (IDNA: no empty label, none over 63 characters), a port from 1 to 65535.
    """
    if not isinstance(value, str):
        return MSG_URL
    # Checked first: yarl refuses a port over 65535 with the same error as any bad URL.
    port_text = match[1] if (match := _PORT.match(value)) else None
    if port_text is not None and (len(port_text) > 5 or not PORT_MIN <= int(port_text) <= PORT_MAX):
        return f"Port must be between {PORT_MIN} and {PORT_MAX}"
    try:
        url = URL(value)
        scheme, host, port = url.scheme, url.host, url.port
    except ValueError:  # port out of range or not a number, unclosed IPv6 bracket, bad IDNA
        return MSG_URL
    if scheme not in ("http", "https") or not host:
        return MSG_URL
    if port is None or not PORT_MIN <= port <= PORT_MAX:
        return f"Port must be between {PORT_MIN} and {PORT_MAX}"
    try:
        host.encode("idna")  # what the resolver does on every request
    except UnicodeError:
        return "Invalid host name"
    return None


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


def _known(types: Collection[str]) -> str:
    return ", ".join(sorted(types)) or "none"
