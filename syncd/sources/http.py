"""The built-in ``http`` source: a JSON API crawled page by page (DESIGN.md §8).

Config keys: ``url``, ``params``, ``headers`` (values may hold ``${env:NAME}`` /
``${file:/path}``, resolved per request), ``records`` (dotted path to the record array; absent
means the body itself is the array), ``id_field`` (read by the sync engine), ``pagination``
(one of :data:`~syncd.sources.pagination.PAGINATION_TYPES`, cursor by default),
``incremental`` (``{"field", "param"}``), ``timeout`` (``{"read", "connect"}``), ``max_pages``,
``auth`` (bearer, basic, api_key or oauth2: :mod:`syncd.sources.auth`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError as PydanticError
from yarl import URL

from syncd.errors import ClientError, SourceError
from syncd.http.timeouts import resolve_timeouts
from syncd.http.transport import Response, safe_url
from syncd.models import Page
from syncd.observability.logs import redact, register_secret
from syncd.schema import HttpSourceConfig, field_errors
from syncd.sources.auth import (
    AuthError,
    Credentials,
    SourceAuth,
    TokenCache,
    build_auth,
    validate_auth,
)
from syncd.sources.base import SourceContext
from syncd.sources.pagination import (
    MISSING,
    QueryParams,
    build_pagination,
    get_path,
)
from syncd.sources.secrets import (
    REDACTED,
    redact_url,
    register_connector_secrets,
    resolve_refs,
)

__all__ = ["HttpSource", "validate_http_source"]

_UNAUTHORIZED = 401


class HttpSource:
    """Fetches pages of a JSON HTTP API through the daemon's shared transport.

    Implements ``Source`` and ``StatefulSource``: with ``incremental`` configured,
    :meth:`checkpoint` returns ``{"since": <value sent by this crawl>, "high_water": <largest
    value of the field seen>}``. A fresh crawl sends the previous ``high_water``; a resumed
    crawl keeps sending the interrupted crawl's ``since``.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        context: SourceContext,
        *,
        token_cache: TokenCache | None = None,
    ) -> None:
        # ``auth`` is checked here too, by its own validator, until the config model has it.
        auth = config.get("auth")
        errors = validate_http_source({k: v for k, v in config.items() if k != "auth"})
        if auth is not None:
            errors.update(validate_auth(auth))
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
        # OAuth2 tokens come from the process-wide cache (``token_cache``: a test's own).
        self._auth: SourceAuth | None = None
        if auth is not None:
            self._auth = build_auth(
                auth,
                connector_id=context.connector_id,
                transport=context.transport,
                timeouts=self._timeouts,
                register=self._register_secrets,
                on_wait=context.on_wait,
                secret_state=context.secret_state,
                save_secret_state=context.save_secret_state,
                cache=token_cache,
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

    def describe_request(self, cursor: str | None = None) -> dict[str, Any]:
        """The method, URL and header names of the request :meth:`fetch_page` would send for
        ``cursor``, fit to show (a preview): nothing is resolved or sent. Parameters holding
        ``${env:}``/``${file:}`` references and every header value read ``"***"``; URL
        passwords, secret-looking query values and registered secrets are masked too."""
        params: QueryParams = {k: REDACTED if "${" in v else v for k, v in self._params.items()}
        if self._inc_param is not None and self._since is not None:
            params[self._inc_param] = _param_text(self._since)
        url, query = self._pagination.request(cursor, self._url, params)
        auth = self._auth.shown() if self._auth is not None else Credentials()
        url, query = _with_auth_params(url, query, auth)
        # The transport hands ``query`` to aiohttp, which extends the URL's own query with it.
        shown = URL(url).extend_query(query) if query else URL(url)
        return {
            "method": "GET",
            "url": redact(redact_url(str(shown))),
            "headers": _with_auth_headers(dict.fromkeys(self._headers, REDACTED), auth),
        }

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
        if self._auth is None:
            response = await self._get(url, query, headers, Credentials())
        else:
            response = await self._get_authenticated(url, query, headers, self._auth)
        body = response.json()
        records = self._records(body, response.url)
        next_cursor = self._pagination.next_cursor(cursor, response, body, records)
        self._pages += 1
        if self._max_pages is not None and self._pages >= self._max_pages:
            next_cursor = None
        if self._inc_field is not None:
            self._observe(records, self._inc_field)
        return Page(records, next_cursor)

    async def _get_authenticated(
        self, url: str, query: QueryParams, headers: dict[str, str], auth: SourceAuth
    ) -> Response:
        """GET with ``auth``'s credentials; after a 401, once more with renewed ones (an
        OAuth2 token revoked or expired early), if ``auth`` can renew them."""
        credentials = await auth.credentials()
        try:
            return await self._get(url, query, headers, credentials)
        except ClientError as exc:
            if exc.status != _UNAUTHORIZED:
                raise
            renewed = await auth.after_unauthorized(credentials)
            if renewed is None:
                raise
        try:
            return await self._get(url, query, headers, renewed)
        except ClientError as exc:
            if exc.status != _UNAUTHORIZED:
                raise
            raise AuthError(
                f"source answered 401 after the OAuth2 token was refreshed: {exc}"
            ) from exc

    async def _get(
        self, url: str, query: QueryParams, headers: dict[str, str], auth: Credentials
    ) -> Response:
        url, query = _with_auth_params(url, query, auth)
        headers = _with_auth_headers(headers, auth)
        return await self._transport.request(
            "GET",
            url,
            params=query or None,
            headers=headers or None,
            timeout=self._timeouts,
            on_wait=self._on_wait,
        )

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


def _with_auth_headers(headers: dict[str, str], auth: Credentials) -> dict[str, str]:
    """``headers`` with the auth's headers, which replace configured ones of the same name
    (in any case)."""
    if not auth.headers:
        return headers
    names = {name.lower() for name in auth.headers}
    return {
        **{k: v for k, v in headers.items() if k.lower() not in names},
        **auth.headers,
    }


def _with_auth_params(url: str, query: QueryParams, auth: Credentials) -> tuple[str, QueryParams]:
    """``url`` and ``query`` with the auth's query parameters, which replace those of the same
    name (a next-page URL often repeats the key it was asked with)."""
    if not auth.params:
        return url, query
    parsed = URL(url)
    if any(name in parsed.query for name in auth.params):
        url = str(parsed.without_query_params(*auth.params))
    return url, {**{k: v for k, v in query.items() if k not in auth.params}, **auth.params}


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


def validate_http_source(config: Any) -> dict[str, str]:
    """Field errors of an ``http`` source config, keyed ``source.<path>`` (``{}`` if valid):
    the checks of its model, :class:`syncd.schema.HttpSourceConfig`."""
    try:
        HttpSourceConfig.model_validate(config)
    except PydanticError as exc:
        return field_errors(exc, "source")
    return {}
