"""The HTTP transport: one shared ``aiohttp.ClientSession`` with its own retry budget.

Every aiohttp error is translated here into syncd's own exceptions (DESIGN.md §6):

- 4xx answer → :class:`~syncd.errors.ClientError` (``retry_after`` parsed when sent);
- 5xx answer → :class:`~syncd.errors.ServerError`;
- dropped connection or truncated body → ``ServerError(503)``;
- connect or read timeout → :class:`~syncd.errors.ClientTimeoutError`;
- refused connection or unresolvable name → :class:`~syncd.errors.ClientConnectionError`.

Idempotent requests (GET, HEAD, OPTIONS, PUT, DELETE, or any sent with ``idempotent=True``)
are retried on connection errors and 502/503/504 up to ``retries`` times with urllib3-style
backoff (``0, 4, 8`` s for factor 2), waiting at least the server's ``Retry-After`` (clamped to
60 s). Read timeouts are not retried here: the paginator above has its own budget for them.

Redirects (301, 302, 303, 307, 308) are followed here, not by aiohttp, at most
``max_redirects`` hops. A hop on the origin of the request keeps the caller's headers and the
URL's credentials; from the first hop to another origin on, the request goes on WITHOUT any
caller-supplied header and without credentials (DESIGN.md §8: headers are the source's
secrets). 303 (and 301/302 after a POST) continue as a GET without a body. A form body
(``data``: an OAuth2 token request carries a client secret) is never sent to another origin:
such a redirect is refused.

With ``block_private_addresses`` (config ``http.block_private_addresses``) every connection,
redirect hops included, is refused with :class:`~syncd.http.guard.BlockedAddressError` when
its host is, or resolves to, a loopback, private, link-local, unique-local, multicast,
reserved or cloud metadata address: names are checked by a resolver wrapped around
aiohttp's, IP literals (which aiohttp does not resolve) before the request is sent.

With ``budgets`` (:mod:`syncd.http.budget`) every attempt — each retry and each redirect hop —
first waits for its host's budget (cooldown, token, concurrency slot), holding the slot until
the response is read; a 429 or 503 with ``Retry-After`` puts the host in cooldown for every
connector before the retry logic sleeps.

Rate limits announced in headers (:mod:`syncd.http.ratelimit`): a 429, or a 403 with a
remaining count of 0, that says when to come back (``Retry-After``, ``x-ratelimit-reset``,
``RateLimit-Reset`` or the structured ``RateLimit`` field) puts its host in cooldown for
every connector until then (through ``budgets``, so shared through Redis when they are) and,
for a request that may be sent again, is waited out (``waiting.reason = "host_cooldown"``)
and retried. Such waits are not taken from ``retries``: a request makes at most
``rate_limit_waits`` of them (default :data:`RATE_LIMIT_WAITS`), and a reset further away
than ``max_rate_limit_wait`` seconds (``http.max_rate_limit_wait_seconds``, default 900) is
not waited for at all. Either way, and for a request that is not repeatable, the refusal is a
:class:`~syncd.errors.RateLimitError` (a ``ClientError``) naming the reset time. Retry-After
alone keeps its 60 s clamp; the reset headers are bounded by the maximum instead.
"""

from __future__ import annotations

import asyncio
import functools
import json as jsonlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
import structlog
from aiohttp.abc import AbstractResolver
from yarl import URL

from syncd.errors import (
    ClientConnectionError,
    ClientError,
    ClientTimeoutError,
    HTTPStatusError,
    RateLimitError,
    ServerError,
    SourceError,
    SyncdError,
)
from syncd.http.budget import (
    HostBudgets,
    OnWait,
    cooldown_seconds,
    hold_budget,
    note_cooldown,
)
from syncd.http.guard import GuardedResolver, check_literal
from syncd.http.ratelimit import (
    DEFAULT_MAX_RATE_LIMIT_WAIT,
    RATE_LIMIT_STATUSES,
    RateLimit,
    rate_limit,
    refusal_note,
)
from syncd.http.retry_after import clamp_retry_after, parse_retry_after
from syncd.http.timeouts import Timeouts, resolve_timeouts
from syncd.http.urls import redirect_target, safe_url, with_url_auth
from syncd.models import WaitReason

# Timeouts, resolve_timeouts (:mod:`syncd.http.timeouts`) and safe_url (:mod:`syncd.http.urls`)
# are named here too, for the modules that import them with the transport.
__all__ = [
    "DEFAULT_TIMEOUTS",
    "IDEMPOTENT_METHODS",
    "MAX_REDIRECTS",
    "RATE_LIMIT_WAITS",
    "REDIRECT_STATUSES",
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

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
"""Statuses whose ``Location`` the transport follows."""

MAX_REDIRECTS = 10
"""Redirect hops followed per request (aiohttp's default) before giving up."""

RATE_LIMIT_WAITS = 5
"""Rate-limit waits one request may make (besides, not out of, its ``retries``)."""

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
OnRetry = Callable[[BaseException, int], None]
Params = Mapping[str, str | int | float]


@dataclass(frozen=True)
class Response:
    """A fully read HTTP response. ``headers`` is case-insensitive; ``url`` is the final URL
    (after redirects); ``requested_url`` the URL asked for (empty: the same as ``url``), whose
    origin the caller's credentials belong to."""

    status: int
    headers: Mapping[str, str]
    url: str
    body: bytes
    requested_url: str = ""

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
    # The rate-limit refusal this answer is (its cooldown already noted in the budgets).
    refusal: RateLimit | None = None


class Transport:
    """HTTP client shared by every source and indexer of a daemon.

    ``open()`` must be awaited (inside the running loop) before ``request()``; ``close()``
    releases the connection pool. Also usable as ``async with Transport() as t``.
    ``timeouts`` apply to requests that give no ``timeout`` of their own; the composition
    root builds them with :func:`resolve_timeouts` (environment over ``config.toml``).
    ``sleep`` (default :func:`asyncio.sleep`; rate-limit waits sleep through it too) and
    ``on_retry(error, retry_number)`` let tests and metrics observe the retry schedule.
    ``block_private_addresses`` turns on the guard described in the module docstring;
    ``max_redirects`` bounds the hops followed.
    ``budgets`` (opened and closed by the owner) applies the per-host budgets to every attempt.
    ``max_rate_limit_wait`` and ``rate_limit_waits`` bound the rate-limit waits of the module
    docstring; ``wall_clock`` (Unix seconds, default :func:`time.time`) dates the refusals of
    a server that sends no ``Date``.
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
        block_private_addresses: bool = False,
        max_redirects: int = MAX_REDIRECTS,
        budgets: HostBudgets | None = None,
        max_rate_limit_wait: float = DEFAULT_MAX_RATE_LIMIT_WAIT,
        rate_limit_waits: int = RATE_LIMIT_WAITS,
        wall_clock: Clock = time.time,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be >= 0")
        if rate_limit_waits < 0:
            raise ValueError("rate_limit_waits must be >= 0")
        if not max_rate_limit_wait > 0:
            raise ValueError("max_rate_limit_wait must be > 0")
        if max_redirects < 0:
            raise ValueError("max_redirects must be >= 0")
        self.block_private_addresses = block_private_addresses
        self.max_redirects = max_redirects
        self.timeouts = timeouts
        self.retries = retries
        self.backoff_factor = backoff_factor
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep
        self._on_retry = on_retry
        self._connection_limit = limit
        self.budgets = budgets
        self.max_rate_limit_wait = max_rate_limit_wait
        self.rate_limit_waits = rate_limit_waits
        self._wall_clock = wall_clock
        self._session: aiohttp.ClientSession | None = None
        self._resolver: AbstractResolver | None = None

    @property
    def is_open(self) -> bool:
        """Whether ``open()`` was called and ``close()`` was not."""
        return self._session is not None

    async def open(self) -> None:
        """Create the shared session (idempotent)."""
        if self._session is None:
            resolver: AbstractResolver | None = None
            if self.block_private_addresses:
                resolver = GuardedResolver(aiohttp.DefaultResolver())
            self._resolver = resolver
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connection_limit, resolver=resolver),
                timeout=_client_timeout(self.timeouts),
                raise_for_status=False,
            )

    async def close(self) -> None:
        """Close the shared session and its connections (idempotent)."""
        session, self._session = self._session, None
        resolver, self._resolver = self._resolver, None
        if session is not None:
            await session.close()
        # A resolver handed to the connector is not closed by it.
        if resolver is not None:
            await resolver.close()

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
        on_wait: OnWait | None = None,
        data: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
        content: bytes | None = None,
    ) -> Response:
        """Send a request and read the whole response.

        Raises the errors listed in the module docstring. With ``raise_for_status=False`` a
        non-2xx answer is returned instead of raised (502/503/504 are still retried first
        when the method is idempotent); connection failures and timeouts always raise.
        ``on_wait(reason, seconds)`` is told of each retry wait and each wait for a host's
        budget or cooldown, a rate-limit wait included (so a sync can show it).
        ``data`` is sent as an ``application/x-www-form-urlencoded`` body (not with ``json``).
        ``content`` is a body already encoded (the caller's headers give its Content-Type),
        sent as it is and otherwise treated like ``json`` (e.g. on a redirect).
        ``idempotent`` overrides whether the request may be sent again after a failure
        (default: by its method); e.g. an OAuth2 token POST is safe to repeat.
        """
        if sum(body is not None for body in (json, data, content)) > 1:
            raise ValueError("give one of json, data and content")
        session = self._session
        if session is None:
            raise RuntimeError("Transport is not open: await transport.open() first")
        method = method.upper()
        if idempotent is None:
            idempotent = method in IDEMPOTENT_METHODS
        max_retries = self.retries if idempotent else 0
        client_timeout = _client_timeout(timeout) if timeout is not None else None
        retry = waits = 0
        while True:
            try:
                answer = await self._send(
                    session,
                    method,
                    url,
                    params,
                    headers,
                    json,
                    client_timeout,
                    on_wait,
                    data,
                    content,
                )
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                error, retryable = _translate(exc, method, url)
                if not retryable or retry >= max_retries:
                    raise error from exc
                retry_after = None
            else:
                status = answer.response.status
                if status < 400:
                    return answer.response
                refusal = answer.refusal
                if refusal is not None and idempotent and self._may_wait(refusal, waits):
                    waits += 1
                    await self._wait_rate_limit(method, url, answer, refusal, waits, on_wait)
                    continue
                note = "" if refusal is None else self._refusal_note(refusal, waits, idempotent)
                error = _status_error(method, answer, note)
                if status not in RETRY_STATUSES or retry >= max_retries:
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
                "http.retry",
                method=method,
                url=safe_url(url),
                retry=retry,
                of=max_retries,
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
        on_wait: OnWait | None = None,
        data: Mapping[str, str] | None = None,
        content: bytes | None = None,
    ) -> _Answer:
        """One attempt: the request and the redirects it leads to, the last answer read.
        Each hop draws from its host's budget."""
        base: dict[str, Any] = {"allow_redirects": False}
        if client_timeout is not None:
            base["timeout"] = client_timeout
        target: str | URL = url
        origin: URL | None = None
        # The caller's headers and the URL's credentials belong to the request's origin.
        trusted = True
        for hop in range(self.max_redirects + 1):
            if self.block_private_addresses:
                check_literal(target)
            kwargs = dict(base)
            if json is not None:
                kwargs["json"] = json
            if data is not None:
                kwargs["data"] = dict(data)
            elif content is not None:
                kwargs["data"] = content
            hop_headers = headers if trusted else None
            if hop == 0:
                kwargs["params"] = params
            elif trusted and isinstance(target, URL) and target.user is None:
                hop_headers = with_url_auth(headers, url)
            key, lease = await hold_budget(self.budgets, target, on_wait)
            try:
                async with session.request(method, target, headers=hop_headers, **kwargs) as resp:
                    refusal = (
                        rate_limit(resp.status, resp.headers, now=self._wall_clock())
                        if resp.status in RATE_LIMIT_STATUSES
                        else None
                    )
                    await note_cooldown(
                        self.budgets,
                        key,
                        cooldown_seconds(
                            resp.status, resp.headers, refusal, self.max_rate_limit_wait
                        ),
                    )
                    here = resp.url
                    origin = here.origin() if origin is None else origin
                    location = (
                        resp.headers.get("Location") if resp.status in REDIRECT_STATUSES else None
                    )
                    if location is None:
                        return await _answer(resp, url, refusal)
                    resp.release()  # the body of a redirect is not read
            finally:
                await lease.release()
            following = redirect_target(here, location, method, url)
            if (resp.status == 303 and method != "HEAD") or (
                resp.status in (301, 302) and method == "POST"
            ):
                method, json, data, content = "GET", None, None, None
            if trusted and following.origin() != origin:
                if data is not None:
                    raise SourceError(
                        f"{method} {safe_url(url)} redirected to another origin "
                        f"({safe_url(following)}): a form body is not sent there"
                    )
                trusted = False
                log.info(
                    "http.redirect_cross_origin",
                    method=method,
                    url=safe_url(here),
                    location=safe_url(following),
                    note="sent without the source's headers and credentials",
                )
            target = following
        raise SourceError(f"too many redirects (over {self.max_redirects}): {safe_url(url)}")

    def _refusal_note(self, refusal: RateLimit, waits: int, idempotent: bool) -> str:
        return refusal_note(
            refusal, max_wait=self.max_rate_limit_wait, waits=waits if idempotent else 0
        )

    def _may_wait(self, refusal: RateLimit, waits: int) -> bool:
        """Whether a rate-limit refusal is waited out (the request being repeatable)."""
        return waits < self.rate_limit_waits and not refusal.beyond(self.max_rate_limit_wait)

    async def _wait_rate_limit(
        self,
        method: str,
        url: str,
        answer: _Answer,
        refusal: RateLimit,
        waits: int,
        on_wait: OnWait | None,
    ) -> None:
        """Wait out a rate-limit refusal, shown as ``host_cooldown``: every other connector's
        request to the host waits for the same cooldown in its budget (a longer cooldown
        noted there meanwhile is waited out by the next attempt)."""
        log.info(
            "http.rate_limited",
            method=method,
            url=safe_url(url),
            status=answer.response.status,
            field=refusal.field,
            wait=round(refusal.wait, 3),
            until=refusal.until.isoformat(),
            wait_number=waits,
            of=self.rate_limit_waits,
        )
        if on_wait is not None:
            on_wait(WaitReason.HOST_COOLDOWN, refusal.wait)
        await self._sleep(refusal.wait)


async def _answer(
    resp: aiohttp.ClientResponse,
    requested_url: str,
    refusal: RateLimit | None = None,
) -> _Answer:
    body = await resp.read()
    reason = resp.reason or ""
    response = Response(resp.status, resp.headers, str(resp.url), body, requested_url)
    cause = None
    if resp.status >= 400:
        cause = aiohttp.ClientResponseError(
            resp.request_info,
            resp.history,
            status=resp.status,
            message=reason,
            headers=resp.headers,
        )
    return _Answer(response, cause, reason, refusal)


@functools.lru_cache(maxsize=128)
def _client_timeout(timeouts: Timeouts) -> aiohttp.ClientTimeout:
    # No total: a large, steadily arriving body must not be cut off. ``sock_read`` bounds
    # each silence; ``sock_connect`` bounds the TCP (and TLS) handshake. Waiting for a free
    # pooled connection is not a failure of the source, so it is left unbounded.
    return aiohttp.ClientTimeout(
        total=None, connect=None, sock_connect=timeouts.connect, sock_read=timeouts.read
    )


def _status_error(method: str, answer: _Answer, note: str = "") -> HTTPStatusError:
    response = answer.response
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    status = f"HTTP {response.status} {answer.reason}".rstrip()
    message = f"{status} from {method} {safe_url(response.url)}"
    if answer.refusal is not None:
        message = f"{message}: {note}" if note else message
        return RateLimitError(
            response.status, message, retry_after=retry_after, until=answer.refusal.until
        )
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
    if isinstance(exc, aiohttp.ClientResponseError):
        # The server's answer could not be parsed as HTTP: a bad gateway of sorts. (Its
        # str() carries the full URL, query included, so only the message is kept.)
        return ServerError(502, f"invalid HTTP response: {where}: {exc.message}"), True
    # Server disconnected, connection reset, truncated or corrupt body.
    return ServerError(503, f"connection dropped: {where}: {detail}"), True
