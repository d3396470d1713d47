"""The built-in ``http`` source: a JSON API crawled page by page (DESIGN.md §8).

Config keys: ``url``, ``method`` (GET or POST), ``body`` (a JSON object), ``params``,
``headers`` (values, and body strings, may hold ``${env:NAME}`` / ``${file:/path}``, resolved
per request), ``records`` (path to the record array; absent means the body itself is the
array), ``id_field`` (read by the sync engine), ``fail_when`` (errors reported in a 2xx body),
``pagination`` (one of :data:`~syncd.sources.http.pagination.PAGINATION_TYPES`, cursor by default),
``incremental`` (``{"field", "param", "in", "template", "format", "lag", "until_param",
"window_template"}``), ``timeout``
(``{"read", "connect"}``), ``max_pages``, ``auth`` (bearer, basic, api_key or oauth2:
:mod:`syncd.sources.http.auth`). Paths are :mod:`syncd.paths`' (dotted, or JSON Pointer).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from yarl import URL

from syncd.config.secrets import (
    connector_secrets,
    mask_body,
    redact_url,
    register_connector_secrets,
    resolve_body,
    resolve_refs,
)
from syncd.errors import ClientError, ServerError, SourceError
from syncd.http.timeouts import resolve_timeouts
from syncd.http.transport import Response, safe_url
from syncd.models import CrawlEnd, Page
from syncd.observability.logs import MASK, redact, register_secret
from syncd.paths import MISSING, get_path
from syncd.rules.marks import MARK, STARTED, iso_time, started_text
from syncd.sources.base import SourceContext
from syncd.sources.http.auth import AuthError, Credentials, SourceAuth, TokenCache, build_auth
from syncd.sources.http.config import validate_http_source
from syncd.sources.http.marks import mark_value
from syncd.sources.http.pagination import (
    Lack,
    Next,
    PageRequest,
    QueryParams,
    Watched,
    build_pagination,
)
from syncd.sources.http.window import beyond, read_mark, window_request

__all__ = ["HttpSource", "PageReport"]

_UNAUTHORIZED = 401


@dataclass(frozen=True)
class PageReport:
    """How the last page fetched continues or ends the crawl, and, after the first page, the
    configured paths its response lacked (shown by a preview)."""

    reason: str
    warnings: tuple[str, ...] = ()


class HttpSource:
    """Fetches pages of a JSON HTTP API through the daemon's shared transport.

    Implements ``Source`` and ``StatefulSource``: with ``incremental`` configured,
    :meth:`checkpoint` returns ``{"since": <value sent by this crawl>, "high_water": <largest
    value of the field seen>, "started": <when the crawl's first page was requested, ISO 8601
    UTC>}``. A fresh crawl sends the previous crawl's mark (its ``high_water``, no later than
    its start: :func:`syncd.rules.settled_state`); a resumed crawl keeps sending the
    interrupted crawl's ``since``, and keeps its start. Once a page ended the crawl,
    :meth:`crawl_end` says how.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        context: SourceContext,
        *,
        token_cache: TokenCache | None = None,
    ) -> None:
        # A config that did not come through the API (a test's, an embedding caller's) is
        # refused here by the same model.
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
        self._method: str = config.get("method", "GET")
        self._body: dict[str, Any] | None = config.get("body")
        self._params: dict[str, str] = {
            str(k): _param_text(v) for k, v in dict(config.get("params") or {}).items()
        }
        self._headers: dict[str, str] = dict(config.get("headers") or {})
        self._registered: set[str] = set()
        self._records_path: str | None = config.get("records")
        self._fail_when: list[Mapping[str, Any]] = list(config.get("fail_when") or ())
        self._pagination = build_pagination(config.get("pagination"), config.get("id_field", "id"))
        self._max_pages: int | None = config.get("max_pages")
        # The transport's defaults already include the environment: only the connector's
        # explicit values remain to apply (and the environment is not warned about twice).
        self._timeouts = resolve_timeouts(
            config.get("timeout"), config=context.transport.timeouts, environ={}
        )
        # OAuth2 tokens come from the process-wide cache (``token_cache``: a test's own).
        self._auth: SourceAuth | None = None
        auth = config.get("auth")
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
        self.last_page: PageReport | None = None
        # How the crawl ended, once a page ended it; the places absent from every page this
        # run read (None before the first), and whether the first of them held records.
        self._end: CrawlEnd | None = None
        self._never_found: set[Watched] | None = None
        self._first_held_records = False
        self._resuming = context.resuming
        self._incremental: Mapping[str, Any] | None = config.get("incremental")
        self._inc_field: str | None = self._incremental["field"] if self._incremental else None
        state = context.state
        self._since: Any = state.get("since") if context.resuming else state.get(MARK)
        self._high_water: Any = state.get(MARK) if context.resuming else self._since
        # A resumed crawl keeps its start (none for a crawl begun before starts were kept).
        self._now = context.now
        self._started: Any = state.get(STARTED) if context.resuming else None
        # A backfill (DESIGN.md §12): its window replaces the mark, and the records at or
        # after its end are left out (:mod:`syncd.sources.http.window`).
        self._window = context.window if self._incremental is not None else None
        self._until: tuple[int, Any] | None = None
        if self._window is not None:
            self._since = self._window.since
            if self._window.until is not None:
                try:
                    self._until = read_mark(config, self._window.until)
                except ValueError as exc:
                    raise SourceError(f"backfill until {self._window.until!r}: {exc}") from None

    def crawl_end(self) -> CrawlEnd | None:
        """How the crawl ended, once a page ended it (``None`` before): the last page's
        reason (:attr:`last_page`) and a warning when the crawl ended because the next cursor
        or next URL had no value on the last page and that place was absent — not null or
        empty — from every page, the first of them holding records: what a misspelt path
        looks like (an API that leaves the key out of its last page only gets it on one-page
        crawls). The pages counted are the crawl's: a resumed run continues a crawl whose
        earlier pages held the place (its resume cursor came from there), so it never warns.
        """
        return self._end

    def checkpoint(self) -> dict[str, Any]:
        """The state to save with each committed page (empty unless incremental)."""
        if self._inc_field is None:
            return {}
        state = {"since": self._since, MARK: self._high_water}
        if self._started is not None:
            state[STARTED] = self._started
        return state

    def _register_secrets(self, values: Iterable[str]) -> None:
        """Header values and resolved references are secrets: have the log redaction mask
        them (once per value and source)."""
        for value in values:
            if value not in self._registered:
                self._registered.add(value)
                register_secret(value)

    def _base(self, params: QueryParams, body: dict[str, Any] | None) -> PageRequest:
        """The source's own request with the incremental mark placed."""
        base = PageRequest(self._url, params, body, {})
        inc = self._incremental
        if inc is None or self._since is None:
            return base
        if self._window is not None:
            try:
                return window_request(base, inc, self._window)
            except ValueError as exc:
                raise SourceError(f"backfill window is not a time: {exc}") from None
        try:
            value = mark_value(self._since, inc.get("format", "as_stored"), inc.get("lag", 0))
        except ValueError as exc:
            raise SourceError(f"incremental mark {self._since!r} is not a time: {exc}") from None
        template = inc.get("template")
        if template is not None:
            value = template.replace("{since}", _param_text(value))
        where = inc.get("in", "query")
        if where == "query":
            value = _param_text(value)
        return base.with_value(where, inc["param"], value)

    def describe_request(self, cursor: str | None = None) -> dict[str, Any]:
        """The method, URL, header names and body of the request :meth:`fetch_page` would
        send for ``cursor``, fit to show (a preview): nothing is resolved or sent. Parameters
        and body strings holding ``${env:}``/``${file:}`` references, and every header value,
        read ``"***"``; URL passwords, secret-looking values and registered secrets are masked
        too."""
        params: QueryParams = {k: MASK if "${" in v else v for k, v in self._params.items()}
        body = mask_body(self._body) if self._body is not None else None
        request = self._pagination.request(cursor, self._base(params, body))
        auth = self._auth.shown() if self._auth is not None else Credentials()
        url, query = _with_auth_params(request.url, request.params, auth)
        # The transport hands ``query`` to aiohttp, which extends the URL's own query with it.
        shown = URL(url).extend_query(query) if query else URL(url)
        headers = {**dict.fromkeys(self._headers, MASK), **request.headers}
        described: dict[str, Any] = {
            "method": self._method,
            "url": redact(redact_url(str(shown))),
            "headers": _with_auth_headers(headers, auth),
        }
        if request.body is not None:
            described["body"] = request.body
        return described

    async def fetch_page(self, cursor: str | None) -> Page:
        """Fetch the page at ``cursor`` (``None``: the first page)."""
        if cursor is None and self._started is None and self._inc_field is not None:
            # The crawl's start: before the first request (a retry of it keeps the first
            # attempt's time, the earlier one).
            self._started = started_text(self._now())
        params: QueryParams = {k: resolve_refs(v) for k, v in self._params.items()}
        body = resolve_body(self._body) if self._body is not None else None
        request = self._pagination.request(cursor, self._base(params, body))
        headers = {k: _header_value(k, resolve_refs(v)) for k, v in self._headers.items()}
        headers.update(request.headers)
        self._register_secrets(headers.values())
        self._register_secrets(
            str(params[k]) for k, v in self._params.items() if isinstance(v, str) and "${" in v
        )
        if self._body is not None:
            self._register_secrets(connector_secrets({"body": self._body}))
        request = replace(request, headers=headers)
        try:
            if self._auth is None:
                response = await self._send(request, Credentials())
            else:
                response = await self._send_authenticated(request, self._auth)
        except (ClientError, ServerError) as exc:
            if cursor is None or exc.status not in self._pagination.end_status:
                raise
            found = self._pagination.at_end_status(cursor, exc.status)
            self.last_page = PageReport(found.reason)
            if found.cursor is None:
                self._end = CrawlEnd(found.reason)
            return Page([], found.cursor)
        body = response.json()
        self._check_fail_when(body)
        records = self._records(body, response.url)
        found = self._pagination.next(cursor, response, body, records)
        absent = self._absent(response, body, records)
        self._pages += 1
        if self._pages == 1:
            self._never_found, self._first_held_records = set(absent), bool(records)
        elif self._never_found:
            self._never_found.intersection_update(absent)
        # A page that ends the crawl by its style's own rule keeps that reason.
        limit = self._max_pages
        if found.cursor is not None and limit is not None and self._pages >= limit:
            found = Next(None, f"max_pages ({limit}) reached", skip=found.skip)
        self.last_page = PageReport(
            found.reason,
            self._first_page_warnings(absent, body, records) if self._pages == 1 else (),
        )
        if found.cursor is None:
            self._end = CrawlEnd(found.reason, self._end_warnings(found.lacking, body))
        if self._inc_field is not None:
            self._observe(records, self._inc_field)
        # Records the crawl read with the page before (an offset crawl's overlap).
        if found.skip:
            records = records[found.skip :]
        filtered = 0
        if self._until is not None and self._inc_field is not None:
            fmt, until, field = self._incremental_format(), self._until, self._inc_field
            kept = [r for r in records if not beyond(r, field, until, fmt)]
            filtered, records = len(records) - len(kept), kept
        return Page(records, found.cursor, filtered=filtered)

    def _incremental_format(self) -> str:
        inc = self._incremental
        return str(inc.get("format", "as_stored")) if inc is not None else "as_stored"

    async def _send_authenticated(self, request: PageRequest, auth: SourceAuth) -> Response:
        """Send with ``auth``'s credentials; after a 401, once more with renewed ones (an
        OAuth2 token revoked or expired early), if ``auth`` can renew them."""
        credentials = await auth.credentials()
        try:
            return await self._send(request, credentials)
        except ClientError as exc:
            if exc.status != _UNAUTHORIZED:
                raise
            renewed = await auth.after_unauthorized(credentials)
            if renewed is None:
                raise
        try:
            return await self._send(request, renewed)
        except ClientError as exc:
            if exc.status != _UNAUTHORIZED:
                raise
            raise AuthError(
                f"source answered 401 after the OAuth2 token was refreshed: {exc}"
            ) from exc

    async def _send(self, request: PageRequest, auth: Credentials) -> Response:
        url, query = _with_auth_params(request.url, request.params, auth)
        headers = _with_auth_headers(request.headers, auth)
        return await self._transport.request(
            self._method,
            url,
            params=query or None,
            headers=headers or None,
            json=request.body,
            timeout=self._timeouts,
            on_wait=self._on_wait,
            # A POST of the http source is a read (a search, a GraphQL query): safe to repeat.
            idempotent=True,
        )

    def _check_fail_when(self, body: Any) -> None:
        """Fail the page when the body reports an error in a 2xx answer (``fail_when``)."""
        for condition in self._fail_when:
            path = condition["path"]
            value = get_path(body, path)
            if "equals" in condition:
                hit = value is not MISSING and _same_json(value, condition["equals"])
            else:
                hit = value not in (MISSING, None, False, "", [], {})
            if not hit:
                continue
            message = get_path(body, condition["message"]) if "message" in condition else MISSING
            detail = "" if message is MISSING else f": {_shown(message)}"
            raise SourceError(f"source reported an error ({path!r} is {_shown(value)}){detail}")

    def _absent(self, response: Response, body: Any, records: list[Any]) -> list[Watched]:
        """The configured paths and headers the page's response lacks (a path in the last
        record only when the page has one)."""
        last = records[-1] if records else None
        absent = []
        for spot in self._pagination.watched:
            if spot.where == "header":
                lacks = spot.name not in response.headers
            elif spot.where == "last_record":
                lacks = isinstance(last, Mapping) and get_path(last, spot.name) is MISSING
            else:
                lacks = get_path(body, spot.name) is MISSING
            if lacks:
                absent.append(spot)
        return absent

    def _first_page_warnings(
        self, absent: list[Watched], body: Any, records: list[Any]
    ) -> tuple[str, ...]:
        """A preview's warnings for the places the first page lacks (``absent``) and an
        incremental field its first record lacks."""
        warnings = []
        last = records[-1] if records else None
        for spot in absent:
            path = spot.name
            if spot.where == "header":
                warnings.append(f"header {path} is not in the first page's response")
            elif spot.where == "last_record":
                warnings.append(
                    f"{path!r} is not in the first page's last record{_hint(last, path)}"
                )
            else:
                warnings.append(f"{path!r} is not in the first page's response{_hint(body, path)}")
        first = records[0] if records else None
        field = self._inc_field
        if field is not None and isinstance(first, Mapping) and get_path(first, field) is MISSING:
            warnings.append(
                f"incremental field {field!r} is not in the first record{_hint(first, field)}"
            )
        return tuple(warnings)

    def _end_warnings(self, lack: Lack | None, body: Any) -> tuple[str, ...]:
        """The warning of a crawl that ended because ``lack``'s place had no value, when that
        place was absent from every page (see :meth:`crawl_end`)."""
        never = self._never_found
        if lack is None or self._resuming or not self._first_held_records or not never:
            return ()
        place = lack.place
        if place not in never:
            return ()
        if place.where == "header":
            where = f"header {place.name}"
        else:
            where = f"path {place.name!r}{_hint(body, place.name)}"
        return (f"{lack.what} {where} was absent from every page: check `pagination.{lack.key}`",)

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


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _shown(value: Any) -> str:
    """A value from a response body, short enough for an error text: masked before it is
    cut, or a secret the answer echoes across the cut would show its beginning."""
    text = redact(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return text if len(text) <= 200 else text[:199] + "…"


def _hint(data: Any, path: str) -> str:
    """A dotted path that names a key holding dots (``@odata.nextLink``) finds nothing:
    say how to write it."""
    if not path.startswith("/") and isinstance(data, Mapping) and path in data:
        pointer = "/" + path.replace("~", "~0").replace("/", "~1")
        return f" (the key {path!r} is: write the JSON Pointer {pointer!r})"
    return ""


def _later(a: Any, b: Any) -> bool:
    """Whether incremental value ``a`` is after ``b``: numerically for numbers, as times for
    ISO 8601 text (``…:05Z`` and ``…:05.5Z``, or two offsets, do not order as text), else as
    text."""
    if _is_number(a) and _is_number(b):
        return bool(a > b)
    if isinstance(a, str) and isinstance(b, str):
        first, second = iso_time(a), iso_time(b)
        if first is not None and second is not None:
            return first > second
    return str(a) > str(b)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
