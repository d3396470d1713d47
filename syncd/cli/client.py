"""A small aiohttp client of syncd's control API (DESIGN.md §3), used by the CLI.

Answers come back as the API's JSON, untouched. A non-2xx answer raises :class:`ApiError`
(status and the ``detail`` message); a daemon that cannot be reached or does not answer raises
:class:`DaemonUnreachable`.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import aiohttp
from yarl import URL

from syncd.config.listen import UnixAddress, parse_address
from syncd.errors import SyncdError

__all__ = ["ApiError", "Client", "DaemonUnreachable", "url_from_listen"]

_NO_BODY = object()
PREVIEW_MARGIN = 10.0  # seconds a preview's answer is awaited beyond its own time limit


class ApiError(SyncdError):
    """The API answered with an error status. ``detail`` is its message, ``body`` the JSON.

    ``problems`` are the ``path: message`` lines of a validation error (422), one per
    invalid field; empty for any other error."""

    def __init__(
        self, status: int, detail: str, body: Any = None, problems: Sequence[str] = ()
    ) -> None:
        self.status = status
        self.detail = detail
        self.body = body
        self.problems = tuple(problems)
        super().__init__(f"{status} {detail}")


class DaemonUnreachable(SyncdError):
    """No daemon answered at the URL (refused, no such socket, timed out, dropped)."""


def url_from_listen(listen: str) -> str:
    """The URL a client uses to reach a daemon listening on ``listen``.

    ``unix:/path`` stays as is; a wildcard host (none, ``0.0.0.0``, ``::``) is reached through
    the matching loopback address.
    """
    address = parse_address(listen)
    if isinstance(address, UnixAddress):
        return f"unix:{address.path}"
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(address.host, address.host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{address.port}"


def _split_url(url: str) -> tuple[URL, str | None]:
    """``(base URL, unix socket path or None)``; ``ValueError`` for an unusable URL."""
    if url.startswith("unix:"):
        sock = url.removeprefix("unix:")
        if not sock:
            raise ValueError(f"{url!r}: the socket path is empty")
        return URL("http://localhost"), sock
    try:
        base = URL(url)
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a URL: {exc}") from None
    if base.scheme not in ("http", "https") or not base.host:
        raise ValueError(f"{url!r}: expected http://host:port, https://… or unix:/path")
    return base, None


def _detail(status: int, text: str) -> tuple[str, Any, list[str]]:
    """The human message of an error answer, its JSON body when it has one, and the
    ``path: message`` lines of a validation error."""
    try:
        body = json.loads(text)
    except ValueError:
        return (text.strip()[:200] or f"HTTP {status}"), None, []
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str):
        return detail, body, []
    parts: list[str] = []
    if isinstance(detail, list):  # validation errors: [{"loc": [...], "msg": "..."}, ...]
        for item in detail:
            if isinstance(item, dict) and "msg" in item:
                loc = ".".join(str(p) for p in item.get("loc", ()))
                parts.append(f"{loc}: {item['msg']}" if loc else str(item["msg"]))
            else:
                parts.append(str(item))
    elif isinstance(detail, dict):
        parts = [f"{k}: {v}" for k, v in detail.items()]
    else:
        return f"HTTP {status}", body, []
    return "; ".join(parts) or f"HTTP {status}", body, parts


class Client:
    """An async client of one daemon: ``async with Client(url, token=...) as api: ...``.

    ``url`` is ``http://host:port`` (optionally with a path prefix), ``https://…`` or
    ``unix:/path/to/socket``. Raises ``ValueError`` for any other shape.
    """

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = url
        self._base, self._socket = _split_url(url)
        self._token = token
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        connector = aiohttp.UnixConnector(path=self._socket) if self._socket else None
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = _NO_BODY,
        timeout: float | None = None,
    ) -> Any:
        """Send one request; return the JSON answer (``None`` for an empty body).

        ``timeout`` replaces the client's own for this request (seconds in all)."""
        if self._session is None:
            raise RuntimeError("Client is not open: use 'async with Client(...)'")
        url = URL(str(self._base).rstrip("/") + path, encoded=True)
        if params:
            url = url.with_query(dict(params))
        kwargs: dict[str, Any] = {}
        if body is not _NO_BODY:
            kwargs["json"] = body
        if timeout is not None:
            kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout)
        try:
            async with self._session.request(method, url, **kwargs) as response:
                text = await response.text()
                status = response.status
        except TimeoutError as exc:
            raise DaemonUnreachable(
                f"the daemon at {self.url} did not answer within {timeout or self._timeout:g} s"
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            # "Connection refused" / "No such file or directory" says more than aiohttp's text.
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise DaemonUnreachable(f"cannot reach the daemon at {self.url}: {reason}") from exc
        except aiohttp.ClientError as exc:
            raise DaemonUnreachable(f"cannot reach the daemon at {self.url}: {exc}") from exc
        if status >= 400:
            detail, parsed, problems = _detail(status, text)
            raise ApiError(status, detail, parsed, problems)
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise ApiError(status, f"the answer is not JSON: {text[:200]!r}") from None

    async def _object(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        answer = await self.request(method, path, **kwargs)
        if not isinstance(answer, dict):
            raise ApiError(200, f"unexpected answer to {method} {path}: {answer!r:.200}")
        return answer

    # --- connectors ---------------------------------------------------------------

    async def list_connectors(
        self, *, status: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """``GET /connectors``: one page, ``{"data": [...], "next_cursor": ...}``."""
        return await self._object(
            "GET", "/connectors", params=_query(status=status, limit=limit, cursor=cursor)
        )

    async def iter_connectors(self, *, status: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """Every connector, following ``next_cursor`` across pages."""
        cursor: str | None = None
        while True:
            page = await self.list_connectors(status=status, cursor=cursor)
            for item in page.get("data") or ():
                yield item
            cursor = page.get("next_cursor")
            if not cursor:
                return

    async def get_connector(self, connector_id: str) -> dict[str, Any]:
        """``GET /connectors/{id}``."""
        return await self._object("GET", _path(connector_id))

    async def resolve(self, ref: str) -> dict[str, Any]:
        """The connector whose id, or else whose name, is ``ref`` (404 when neither)."""
        try:
            return await self.get_connector(ref)
        except ApiError as exc:
            if exc.status != 404:
                raise
            not_found = exc
        async for item in self.iter_connectors():
            if item.get("name") == ref:
                return item
        raise not_found

    async def create_connector(self, body: Any) -> dict[str, Any]:
        """``POST /connectors``."""
        return await self._object("POST", "/connectors", body=body)

    async def update_connector(self, connector_id: str, body: Any) -> dict[str, Any]:
        """``PATCH /connectors/{id}``."""
        return await self._object("PATCH", _path(connector_id), body=body)

    async def delete_connector(self, connector_id: str) -> dict[str, Any]:
        """``DELETE /connectors/{id}``."""
        return await self._object("DELETE", _path(connector_id))

    async def trigger_sync(
        self, connector_id: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """``POST /connectors/{id}/sync`` (``body``: the crawl mode asked for, if any)."""
        if body is None:
            return await self._object("POST", _path(connector_id, "sync"))
        return await self._object("POST", _path(connector_id, "sync"), body=dict(body))

    async def get_state(self, connector_id: str) -> dict[str, Any]:
        """``GET /connectors/{id}/state``: the mark and the crawl in progress."""
        return await self._object("GET", _path(connector_id, "state"))

    async def set_state(self, connector_id: str, mark: Any) -> dict[str, Any]:
        """``PUT /connectors/{id}/state``: set the mark."""
        return await self._object("PUT", _path(connector_id, "state"), body={"mark": mark})

    async def reset_state(self, connector_id: str) -> dict[str, Any]:
        """``DELETE /connectors/{id}/state``: forget the mark (the next crawl is full)."""
        return await self._object("DELETE", _path(connector_id, "state"))

    async def abort_sync(self, connector_id: str) -> dict[str, Any]:
        """``POST /connectors/{id}/sync/abort``."""
        return await self._object("POST", _path(connector_id, "sync", "abort"))

    async def list_runs(
        self, connector_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """``GET /connectors/{id}/runs`` (newest first)."""
        return await self._object(
            "GET", _path(connector_id, "runs"), params=_query(limit=limit, cursor=cursor)
        )

    async def list_documents(
        self,
        connector_id: str,
        *,
        status: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """``GET /connectors/{id}/documents``."""
        return await self._object(
            "GET",
            _path(connector_id, "documents"),
            params=_query(status=status, limit=limit, cursor=cursor),
        )

    async def get_document(self, connector_id: str, external_id: str) -> dict[str, Any]:
        """``GET /connectors/{id}/documents/{external_id}`` (with its ``payload``)."""
        return await self._object(
            "GET", _path(connector_id, "documents", quote(external_id, safe=""))
        )

    async def status(self) -> dict[str, Any]:
        """``GET /status``: the daemon's version, workers, queue and instances."""
        return await self._object("GET", "/status")

    async def retry_failed(self, connector_id: str) -> dict[str, Any]:
        """``POST /connectors/{id}/retry-failed``."""
        return await self._object("POST", _path(connector_id, "retry-failed"))

    async def apply_deletions(self, connector_id: str) -> dict[str, Any]:
        """``POST /connectors/{id}/deletions/apply``."""
        return await self._object("POST", _path(connector_id, "deletions", "apply"))

    async def preview(self, body: Any, *, timeout: float = 10.0) -> dict[str, Any]:
        """``POST /connectors/preview``; ``timeout`` is the preview's own time limit (the
        ``timeout_seconds`` the body sets, else the API's default): the answer is waited
        for a little longer."""
        return await self._object(
            "POST", "/connectors/preview", body=body, timeout=timeout + PREVIEW_MARGIN
        )


def _path(connector_id: str, *rest: str) -> str:
    # Ids and names are opaque: escape everything, "/" included.
    return "/".join(("/connectors", quote(connector_id, safe=""), *rest))


def _query(**params: str | int | None) -> dict[str, str | int]:
    return {k: v for k, v in params.items() if v is not None}
