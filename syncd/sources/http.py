"""The built-in ``http`` source: a JSON API crawled page by page (DESIGN.md §8).

Config keys: ``url``, ``params``, ``headers`` (values may hold ``${env:NAME}`` /
``${file:/path}``, resolved per request), ``records`` (dotted path to the record array; absent
means the body itself is the array), ``id_field`` (read by the sync engine), ``pagination``
(one of :data:`~syncd.sources.pagination.PAGINATION_TYPES`, cursor by default),
``incremental`` (``{"field", "param"}``), ``timeout`` (``{"read", "connect"}``), ``max_pages``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from syncd.errors import SourceError
from syncd.http.timeouts import resolve_timeouts
from syncd.http.transport import safe_url
from syncd.logs import register_secret
from syncd.models import Page
from syncd.sources.base import SourceContext
from syncd.sources.pagination import (
    MISSING,
    PAGINATION_TYPES,
    QueryParams,
    build_pagination,
    get_path,
)
from syncd.sources.secrets import check_refs, register_connector_secrets, resolve_refs
from syncd.spec import url_problem

__all__ = ["HttpSource", "validate_http_source"]

_TOP_KEYS = frozenset(
    {
        "type",
        "url",
        "params",
        "headers",
        "records",
        "id_field",
        "pagination",
        "incremental",
        "timeout",
        "max_pages",
    }
)
# For each pagination type, the keys it accepts: integers (_INT_KEYS), dotted paths into the
# body (_PATH_KEYS) or query parameter names (any non-empty string).
_PAGINATION_KEYS: dict[str, frozenset[str]] = {
    "cursor": frozenset({"cursor_param", "next_cursor"}),
    "next_url": frozenset({"next_url"}),
    "link_header": frozenset(),
    "offset": frozenset({"offset_param", "limit_param", "limit"}),
    "page": frozenset({"page_param", "start"}),
}
_INT_KEYS: dict[str, tuple[int, int]] = {"limit": (1, 1_000_000), "start": (0, 1_000_000_000)}
_MAX_PAGES = 1_000_000_000
_TIMEOUT_MAX = 3600
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_PATH_KEYS = frozenset({"next_cursor", "next_url"})


class HttpSource:
    """Fetches pages of a JSON HTTP API through the daemon's shared transport.

    Implements ``Source`` and ``StatefulSource``: with ``incremental`` configured,
    :meth:`checkpoint` returns ``{"since": <value sent by this crawl>, "high_water": <largest
    value of the field seen>}``. A fresh crawl sends the previous ``high_water``; a resumed
    crawl keeps sending the interrupted crawl's ``since``.
    """

    def __init__(self, config: Mapping[str, Any], context: SourceContext) -> None:
        errors = validate_http_source(config)
        if errors:
            raise SourceError(
                "invalid http source: " + "; ".join(f"{k}: {v}" for k, v in errors.items())
            )
        # Before any request: nothing logged or raised from here on may show a secret.
        register_connector_secrets(config)
        self._transport = context.transport
        self._on_wait = context.on_wait
        self._url: str = config["url"]
        self._params: dict[str, str] = {
            str(k): _param_text(v) for k, v in dict(config.get("params") or {}).items()
        }
        self._headers: dict[str, str] = dict(config.get("headers") or {})
        self._registered: set[str] = set()
        self._records_path: str | None = config.get("records")
        self._pagination = build_pagination(config.get("pagination"))
        self._max_pages: int | None = config.get("max_pages")
        # The transport's defaults already include the environment: only the connector's
        # explicit values remain to apply (and the environment is not warned about twice).
        self._timeouts = resolve_timeouts(
            config.get("timeout"), config=context.transport.timeouts, environ={}
        )
        self._pages = 0
        incremental = config.get("incremental")
        self._inc_field: str | None = incremental["field"] if incremental else None
        self._inc_param: str | None = incremental["param"] if incremental else None
        state = context.state
        self._since: Any = state.get("since") if context.resuming else state.get("high_water")
        self._high_water: Any = state.get("high_water") if context.resuming else self._since

    def checkpoint(self) -> dict[str, Any]:
        """The state to save with each committed page (empty unless incremental)."""
        if self._inc_field is None:
            return {}
        return {"since": self._since, "high_water": self._high_water}

    def _register_secrets(self, values: Iterable[str]) -> None:
        """Header values and resolved references are secrets: have the log redaction mask
        them (once per value and source)."""
        for value in values:
            if value not in self._registered:
                self._registered.add(value)
                register_secret(value)

    async def fetch_page(self, cursor: str | None) -> Page:
        """Fetch the page at ``cursor`` (``None``: the first page)."""
        params: QueryParams = {k: resolve_refs(v) for k, v in self._params.items()}
        if self._inc_param is not None and self._since is not None:
            params[self._inc_param] = _param_text(self._since)
        url, query = self._pagination.request(cursor, self._url, params)
        headers = {k: _header_value(k, resolve_refs(v)) for k, v in self._headers.items()}
        self._register_secrets(headers.values())
        self._register_secrets(
            str(params[k]) for k, v in self._params.items() if isinstance(v, str) and "${" in v
        )
        response = await self._transport.request(
            "GET",
            url,
            params=query or None,
            headers=headers or None,
            timeout=self._timeouts,
            on_wait=self._on_wait,
        )
        body = response.json()
        records = self._records(body, response.url)
        next_cursor = self._pagination.next_cursor(cursor, response, body, records)
        self._pages += 1
        if self._max_pages is not None and self._pages >= self._max_pages:
            next_cursor = None
        if self._inc_field is not None:
            self._observe(records, self._inc_field)
        return Page(records, next_cursor)

    def _records(self, body: Any, url: str) -> list[dict[str, Any]]:
        if self._records_path is None:
            value = body
            where = "the response body"
        else:
            value = get_path(body, self._records_path)
            where = f"records path {self._records_path!r}"
            if value is MISSING:
                raise SourceError(f"{where} not found in the response from {safe_url(url)}")
        if value is None:
            return []
        if not isinstance(value, list):
            raise SourceError(
                f"{where} in the response from {safe_url(url)} is a "
                f"{type(value).__name__}, expected an array"
            )
        # A record that is not an object is rejected on its own when it becomes a document
        # (counted on the run with its reason); it never fails the page.
        return value

    def _observe(self, records: list[dict[str, Any]], field: str) -> None:
        for record in records:
            value = get_path(record, field)
            if value is MISSING or value is None:
                continue
            if self._high_water is None or _later(value, self._high_water):
                self._high_water = value


def _header_value(name: str, value: str) -> str:
    # A resolved secret (a file with several lines, say) must not smuggle in headers.
    if "\n" in value or "\r" in value:
        raise SourceError(f"header {name}: resolved value contains a line break")
    return value


def _later(a: Any, b: Any) -> bool:
    """Whether incremental value ``a`` is after ``b``: numerically for numbers, else as text
    (which orders ISO-8601 timestamps of one format correctly)."""
    if _is_number(a) and _is_number(b):
        return bool(a > b)
    return str(a) > str(b)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def validate_http_config(config: Mapping[str, Any]) -> dict[str, str]:
    """Field errors of an ``http`` source config, its URL parsed in full (the kind's
    validator, :class:`syncd.plugins.SourceKind`)."""
    errors = validate_http_source(config)
    if "source.url" not in errors and (problem := url_problem(config.get("url"))):
        errors["source.url"] = problem
    return errors


def validate_http_source(config: Any) -> dict[str, str]:
    """Field errors of an ``http`` source config, keyed ``source.<path>`` (``{}`` if valid)."""
    if not isinstance(config, Mapping):
        return {"source": "Must be an object"}
    errors: dict[str, str] = {}
    for key in config:
        if key not in _TOP_KEYS:
            errors[f"source.{key}"] = "Unknown field"
    if "type" in config and config["type"] != "http":
        errors["source.type"] = "Must be 'http'"
    _check_url(config.get("url"), errors)
    _check_params(config.get("params"), errors)
    _check_headers(config.get("headers"), errors)
    for key in ("records", "id_field"):
        if key in config and not _is_path(config[key]):
            errors[f"source.{key}"] = "Must be a dotted path (non-empty string)"
    _check_pagination(config.get("pagination"), errors)
    _check_incremental(config.get("incremental"), errors)
    _check_timeout(config.get("timeout"), errors)
    if "max_pages" in config:
        value = config["max_pages"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_PAGES:
            errors["source.max_pages"] = f"Must be an integer between 1 and {_MAX_PAGES}"
    return errors


def _check_url(url: Any, errors: dict[str, str]) -> None:
    if url is None:
        errors["source.url"] = "Field required"
        return
    if not isinstance(url, str):
        errors["source.url"] = "Must be a string"
        return
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        valid = False
    if not valid:
        errors["source.url"] = "Must be an http:// or https:// URL"


def _check_params(params: Any, errors: dict[str, str]) -> None:
    if params is None:
        return
    if not isinstance(params, Mapping):
        errors["source.params"] = "Must be an object"
        return
    for key, value in params.items():
        if isinstance(value, float) and not math.isfinite(value):
            errors[f"source.params.{key}"] = "Must be a finite number"
        elif not isinstance(value, str | int | float):
            errors[f"source.params.{key}"] = "Must be a string, number or boolean"
        elif isinstance(value, str) and (problem := check_refs(value)):
            errors[f"source.params.{key}"] = problem


def _check_headers(headers: Any, errors: dict[str, str]) -> None:
    if headers is None:
        return
    if not isinstance(headers, Mapping):
        errors["source.headers"] = "Must be an object"
        return
    for key, value in headers.items():
        if not isinstance(key, str) or not _HEADER_NAME.fullmatch(key):
            errors[f"source.headers.{key}"] = "Invalid header name"
        elif not isinstance(value, str):
            errors[f"source.headers.{key}"] = "Must be a string"
        elif problem := check_refs(value):
            errors[f"source.headers.{key}"] = problem
        elif "\n" in value or "\r" in value:
            errors[f"source.headers.{key}"] = "Must not contain line breaks"


def _check_pagination(pagination: Any, errors: dict[str, str]) -> None:
    if pagination is None:
        return
    if not isinstance(pagination, Mapping):
        errors["source.pagination"] = "Must be an object"
        return
    kind = pagination.get("type", "cursor")
    if kind not in PAGINATION_TYPES:
        errors["source.pagination.type"] = f"Must be one of {', '.join(PAGINATION_TYPES)}"
        return
    allowed = _PAGINATION_KEYS[kind]
    for key, value in pagination.items():
        where = f"source.pagination.{key}"
        if key == "type":
            continue
        if key not in allowed:
            errors[where] = f"Unknown field for pagination type {kind!r}"
        elif key in _INT_KEYS:
            low, high = _INT_KEYS[key]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                errors[where] = f"Must be an integer between {low} and {high}"
        elif key in _PATH_KEYS:
            if not _is_path(value):
                errors[where] = "Must be a dotted path (non-empty string)"
        elif not isinstance(value, str) or not value:
            errors[where] = "Must be a non-empty string"


def _check_incremental(incremental: Any, errors: dict[str, str]) -> None:
    if incremental is None:
        return
    if not isinstance(incremental, Mapping):
        errors["source.incremental"] = "Must be an object with 'field' and 'param'"
        return
    for key in incremental:
        if key not in ("field", "param"):
            errors[f"source.incremental.{key}"] = "Unknown field"
    for key in ("field", "param"):
        if key not in incremental:
            errors[f"source.incremental.{key}"] = "Field required"
        elif not _is_path(incremental[key]):
            errors[f"source.incremental.{key}"] = "Must be a non-empty string"


def _check_timeout(timeout: Any, errors: dict[str, str]) -> None:
    if timeout is None:
        return
    if not isinstance(timeout, Mapping):
        errors["source.timeout"] = "Must be an object with 'read' and/or 'connect'"
        return
    for key, value in timeout.items():
        if key not in ("read", "connect"):
            errors[f"source.timeout.{key}"] = "Unknown field"
        # Compared, never converted: a 400-digit integer does not fit a float; NaN fails.
        elif not _is_number(value) or not 0 < value <= _TIMEOUT_MAX:
            errors[f"source.timeout.{key}"] = (
                f"Must be a number of seconds > 0 and <= {_TIMEOUT_MAX}"
            )


def _is_path(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and all(value.split("."))
