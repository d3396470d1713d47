"""The HTTP transport: one shared ``aiohttp.ClientSession`` with its own retry budget.

Every aiohttp error is translated here into syncd's own exceptions (DESIGN.md §6):

- 4xx answer → :class:`~syncd.errors.ClientError` (``retry_after`` parsed when sent);
- 5xx answer → :class:`~syncd.errors.ServerError`;
- dropped connection or truncated body → ``ServerError(503)``;
- connect or read timeout → :class:`~syncd.errors.ClientTimeoutError`;
- refused connection or unresolvable name → :class:`~syncd.errors.ClientConnectionError`.

Idempotent requests (GET, HEAD, OPTIONS, PUT, DELETE) are retried on connection errors and
502/503/504 up to ``retries`` times with urllib3-style backoff (``0, 4, 8`` s for factor 2),
waiting at least the server's ``Retry-After`` (clamped to 60 s). Read timeouts are not retried
here: the paginator above has its own budget for them.
"""

from __future__ import annotations

import asyncio
import functools
import json as jsonlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
import structlog
from yarl import URL

from syncd.errors import (
    ClientConnectionError,
    ClientError,
    ClientTimeoutError,
    HTTPStatusError,
    ServerError,
    SourceError,
    SyncdError,
)
from syncd.http.retry_after import clamp_retry_after, parse_retry_after
from syncd.http.timeouts import Timeouts, resolve_timeouts
from syncd.models import WaitReason

__all__ = [
    "DEFAULT_TIMEOUTS",
    "IDEMPOTENT_METHODS",
    "RETRY_STATUSES",
    "Response",
    "Timeouts",
    "Transport",
    "resolve_timeouts",
    "safe_url",
]

log = structlog.get_logger("syncd.http")

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
"""Methods the transport may send again after a failure."""

RETRY_STATUSES = frozenset({502, 503, 504})
"""Statuses the transport retries (idempotent methods only)."""

DEFAULT_TIMEOUTS = Timeouts()
"""The built-in timeouts: read 30 s, connect 5 s."""

Sleep = Callable[[float], Awaitable[None]]
OnRetry = Callable[[BaseException, int], None]
Params = Mapping[str, str | int | float]


def safe_url(url: str | URL) -> str:
    """``url`` without credentials, query or fragment: fit for messages and logs."""
    try:
        parsed = URL(url)
        return str(parsed.with_user(None).with_query(None).with_fragment(None))
    except (TypeError, ValueError):
        return str(url).split("?", 1)[0]


@dataclass(frozen=True)
class Response:
    """A fully read HTTP response. ``headers`` is case-insensitive; ``url`` is the final URL
    (after redirects)."""

    status: int
    headers: Mapping[str, str]
    url: str
    body: bytes

    @property
    def ok(self) -> bool:
        """True for a status below 400."""
        return self.status < 400

    def json(self) -> Any:
        """The body parsed as JSON; :class:`SourceError` when it is not valid JSON."""
        try:
            return jsonlib.loads(self.body)
        except ValueError as exc:
            raise SourceError(f"invalid JSON from {safe_url(self.url)}: {exc}") from exc

    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class _Answer:
    response: Response
    # What aiohttp's raise_for_status would have raised: kept as the __cause__ of our error.
    cause: aiohttp.ClientResponseError | None
    reason: str


class Transport:
    """HTTP client shared by every source and indexer of a daemon.

    ``open()`` must be awaited (inside the running loop) before ``request()``; ``close()``
    releases the connection pool. Also usable as ``async with Transport() as t``.
    ``timeouts`` apply to requests that give no ``timeout`` of their own; the composition
    root builds them with :func:`resolve_timeouts` (environment over ``config.toml``).
    ``sleep`` (default :func:`asyncio.sleep`) and ``on_retry(error, retry_number)`` let tests
    and metrics observe the retry schedule.
    """

    def __init__(
        self,
        *,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        retries: int = 3,
        backoff_factor: float = 2.0,
        sleep: Sleep | None = None,
        on_retry: OnRetry | None = None,
        limit: int = 100,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.timeouts = timeouts
        self.retries = retries
        self.backoff_factor = backoff_factor
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep
        self._on_retry = on_retry
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None

    @property
    def is_open(self) -> bool:
        """Whether ``open()`` was called and ``close()`` was not."""
        return self._session is not None

    async def open(self) -> None:
        """Create the shared session (idempotent)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit),
                timeout=_client_timeout(self.timeouts),
                raise_for_status=False,
            )

    async def close(self) -> None:
        """Close the shared session and its connections (idempotent)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> Transport:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based), urllib3-style: no wait
        before the first retry, then ``backoff_factor * 2 ** (retry - 1)``."""
        if retry <= 1:
            return 0.0
        return float(self.backoff_factor * 2 ** (retry - 1))

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
        json: Any = None,
        # A per-request timeout configuration, not a deadline for the whole call.
        timeout: Timeouts | None = None,
        raise_for_status: bool = True,
        on_wait: Callable[[WaitReason, float], None] | None = None,
    ) -> Response:
        """Send a request and read the whole response.

        Raises the errors listed in the module docstring. With ``raise_for_status=False`` a
        non-2xx answer is returned instead of raised (502/503/504 are still retried first
        when the method is idempotent); connection failures and timeouts always raise.
        ``on_wait(reason, seconds)`` is told of each retry wait (so a sync can show it).
        """
        session = self._session
        if session is None:
            raise RuntimeError("Transport is not open: await transport.open() first")
        method = method.upper()
        budget = self.retries if method in IDEMPOTENT_METHODS else 0
        client_timeout = _client_timeout(timeout) if timeout is not None else None
        retry = 0
        while True:
            try:
                answer = await self._send(
                    session, method, url, params, headers, json, client_timeout
                )
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                error, retryable = _translate(exc, method, url)
                if not retryable or retry >= budget:
                    raise error from exc
                retry_after = None
            else:
                status = answer.response.status
                if status < 400:
                    return answer.response
                error = _status_error(method, answer)
                if status not in RETRY_STATUSES or retry >= budget:
                    if not raise_for_status:
                        return answer.response
                    raise error from answer.cause
                retry_after = error.retry_after
            retry += 1
            delay = self.backoff(retry)
            reason = WaitReason.BACKOFF
            if retry_after is not None and clamp_retry_after(retry_after) > delay:
                delay, reason = clamp_retry_after(retry_after), WaitReason.RETRY_AFTER
            if on_wait is not None and delay > 0:
                on_wait(reason, delay)
            if self._on_retry is not None:
                self._on_retry(error, retry)
            log.info(
                "http_retry",
                method=method,
                url=safe_url(url),
                retry=retry,
                of=budget,
                delay=delay,
                error=str(error),
            )
            # Slept even when 0 (urllib3's first retry): it yields to the loop, and the
            # schedule observed through ``sleep`` is the documented 0, 4, 8.
            await self._sleep(delay)

    async def _send(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        params: Params | None,
        headers: Mapping[str, str] | None,
        json: Any,
        client_timeout: aiohttp.ClientTimeout | None,
    ) -> _Answer:
        kwargs: dict[str, Any] = {}
        if client_timeout is not None:
            kwargs["timeout"] = client_timeout
        if json is not None:
            kwargs["json"] = json
        async with session.request(method, url, params=params, headers=headers, **kwargs) as resp:
            body = await resp.read()
            reason = resp.reason or ""
            response = Response(resp.status, resp.headers, str(resp.url), body)
            cause = None
            if resp.status >= 400:
                cause = aiohttp.ClientResponseError(
                    resp.request_info,
                    resp.history,
                    status=resp.status,
                    message=reason,
                    headers=resp.headers,
                )
            return _Answer(response, cause, reason)


@functools.lru_cache(maxsize=128)
def _client_timeout(timeouts: Timeouts) -> aiohttp.ClientTimeout:
    # No total: a large, steadily arriving body must not be cut off. ``sock_read`` bounds
    # each silence; ``sock_connect`` bounds the TCP (and TLS) handshake. Waiting for a free
    # pooled connection is not a failure of the source, so it is left unbounded.
    return aiohttp.ClientTimeout(
        total=None, connect=None, sock_connect=timeouts.connect, sock_read=timeouts.read
    )


def _status_error(method: str, answer: _Answer) -> HTTPStatusError:
    response = answer.response
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    status = f"HTTP {response.status} {answer.reason}".rstrip()
    message = f"{status} from {method} {safe_url(response.url)}"
    cls = ClientError if response.status < 500 else ServerError
    return cls(response.status, message, retry_after=retry_after)


def _translate(exc: BaseException, method: str, url: str) -> tuple[SyncdError, bool]:
    """syncd's error for an aiohttp failure, and whether the transport may retry it."""
    where = f"{method} {safe_url(url)}"
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.InvalidURL):
        return SourceError(f"invalid URL: {safe_url(str(exc.url))}"), False
    if isinstance(exc, ValueError):
        # The request could not be built (e.g. a header value with a line break). The
        # detail may quote a secret header value, so only the type is kept.
        return SourceError(f"invalid request: {where}: {type(exc).__name__}"), False
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ClientTimeoutError(f"connect timeout: {where}"), True
    if isinstance(exc, TimeoutError):
        # ServerTimeoutError / SocketTimeoutError are TimeoutErrors too: a read timeout.
        return ClientTimeoutError(f"read timeout: {where}"), False
    if isinstance(exc, aiohttp.ClientSSLError):
        return ClientConnectionError(f"TLS error: {where}: {detail}"), False
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ClientConnectionError(f"cannot connect: {where}: {detail}"), True
    if isinstance(exc, aiohttp.TooManyRedirects):
        return SourceError(f"too many redirects: {where}"), False
    if isinstance(exc, aiohttp.ClientResponseError):
        # The server's answer could not be parsed as HTTP: a bad gateway of sorts. (Its
        # str() carries the full URL, query included, so only the message is kept.)
        return ServerError(502, f"invalid HTTP response: {where}: {exc.message}"), True
    # Server disconnected, connection reset, truncated or corrupt body.
    return ServerError(503, f"connection dropped: {where}: {detail}"), True
