"""Cursor pagination with per-page retries, throttling and cancellation (DESIGN.md §6).

``AsyncCursorPaginator`` drives any ``fetch_page(cursor) -> Page`` coroutine function: the first
call gets ``None`` (or ``start_cursor`` when resuming), each later call the previous page's
``next_cursor``; a ``None`` (or empty) ``next_cursor`` ends the crawl.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

from syncd.errors import (
    Aborted,
    ClientConnectionError,
    ClientTimeoutError,
    HTTPStatusError,
    PaginationLoopError,
    SourceError,
)
from syncd.http.guard import BlockedAddressError
from syncd.http.retry_after import clamp_retry_after
from syncd.http.urls import describe_url
from syncd.models import Page, WaitReason
from syncd.observability.logs import redact

__all__ = ["AsyncCursorPaginator", "CancelToken", "FetchPage", "describe_cursor"]

_CURSOR_SHOWN = 200  # characters of a cursor quoted in a message


def describe_cursor(cursor: str) -> str:
    """``cursor`` as fit for an error message, which the API returns and the log keeps.

    A cursor that is a URL (``next_url``, ``link_header``) loses its credentials and its query
    values (a resolved ``${env:…}`` parameter is often echoed there); any other is quoted,
    shortened, with registered secrets masked.
    """
    if "://" in cursor:
        return redact(describe_url(cursor))  # a secret may sit in the path too
    shown = cursor if len(cursor) <= _CURSOR_SHOWN else cursor[:_CURSOR_SHOWN] + "…"
    return redact(repr(shown))


T = TypeVar("T")
A = TypeVar("A")

FetchPage = Callable[[str | None], Awaitable[Page]]
Sleep = Callable[[float], Awaitable[None]]
OnWait = Callable[[WaitReason, float], None]
OnRetry = Callable[[BaseException, int], None]


class CancelToken:
    """A one-shot cancellation signal shared by a run and its paginator.

    ``cancel()`` is idempotent and must be called from the event loop's thread.
    """

    def __init__(self) -> None:
        self._cancelled = False
        self._event = asyncio.Event()
        self._callbacks: dict[int, Callable[[], object]] = {}
        self._next_key = 0

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel()`` was called."""
        return self._cancelled

    def cancel(self) -> None:
        """Set the token: wake ``wait()``ers and run the ``on_cancel`` callbacks."""
        if self._cancelled:
            return
        self._cancelled = True
        self._event.set()
        callbacks = list(self._callbacks.values())
        self._callbacks.clear()
        for callback in callbacks:
            callback()

    async def wait(self) -> None:
        """Return once the token is set."""
        await self._event.wait()

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback()`` (which must not raise) when the token is set — at once if it
        already is. Returns a function that unregisters it."""
        if self._cancelled:
            callback()
            return _noop
        key = self._next_key
        self._next_key += 1
        self._callbacks[key] = callback

        def unregister() -> None:
            self._callbacks.pop(key, None)

        return unregister


def _noop() -> None:
    return None


class AsyncCursorPaginator:
    """Async iterator of :class:`~syncd.models.Page` over ``fetch_page``.

    - Up to ``max_retries + 1`` attempts per page; before retry *n* (0-based attempt that
      failed) it sleeps ``backoff_factor * 2 ** n``, or the error's ``retry_after`` (clamped to
      60 s) when that is longer. When attempts run out the last error is re-raised unchanged.
    - Retried: an :class:`~syncd.errors.HTTPStatusError` whose status is in
      ``retry_on_status``, :class:`~syncd.errors.ClientTimeoutError`,
      :class:`~syncd.errors.ClientConnectionError` (but not the transport's
      ``BlockedAddressError``). Anything else is raised at once.
    - ``throttle_seconds`` is slept before every page but the first, once per page.
    - ``cancel_token``: checked before every fetch; setting it interrupts a sleep or an
      in-flight fetch, and the iteration raises :class:`~syncd.errors.Aborted`.
    - A ``next_cursor`` already returned in this crawl raises
      :class:`~syncd.errors.PaginationLoopError`.

    ``on_wait(reason, seconds)`` is called before each sleep, ``on_retry(error, retry_number)``
    before each retry. ``cursor`` is the cursor of the page to fetch next (``None`` once the
    last page was returned, or before the first page of a fresh crawl); ``page_cursor`` the
    cursor the last returned page was fetched with; ``pages`` how many pages were returned.
    """

    def __init__(
        self,
        fetch_page: FetchPage,
        *,
        max_retries: int = 0,
        backoff_factor: float = 2.0,
        retry_on_status: Collection[int] = (502, 503, 504),
        throttle_seconds: float = 0.0,
        cancel_token: CancelToken | None = None,
        start_cursor: str | None = None,
        sleep: Sleep | None = None,
        on_wait: OnWait | None = None,
        on_retry: OnRetry | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if backoff_factor < 0 or throttle_seconds < 0:
            raise ValueError("backoff_factor and throttle_seconds must be >= 0")
        self._fetch_page = fetch_page
        self._attempts = max_retries + 1
        self._backoff_factor = backoff_factor
        self._retry_on_status = frozenset(retry_on_status)
        self._throttle = throttle_seconds
        self._token = cancel_token
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep
        self._on_wait = on_wait
        self._on_retry = on_retry
        self.cursor: str | None = start_cursor or None
        self.page_cursor: str | None = None
        self.pages = 0
        self._seen: set[str] = {self.cursor} if self.cursor is not None else set()
        self._done = False
        # The task awaiting a fetch or sleep that the token may interrupt, if any; and
        # whether the token did interrupt it.
        self._region: asyncio.Task[Any] | None = None
        self._interrupted = False
        self._unregister = cancel_token.on_cancel(self._interrupt) if cancel_token else None

    def __aiter__(self) -> AsyncCursorPaginator:
        return self

    async def __anext__(self) -> Page:
        if self._done:
            raise StopAsyncIteration
        try:
            if self.pages > 0 and self._throttle > 0:
                await self._pause(self._throttle, WaitReason.THROTTLE)
            page = await self._fetch_with_retries(self.cursor)
            next_cursor = page.next_cursor
            if next_cursor is not None and not isinstance(next_cursor, str):
                raise SourceError(
                    f"fetch_page returned a next_cursor of type {type(next_cursor).__name__}, "
                    "expected a string or None"
                )
            next_cursor = next_cursor or None
            if next_cursor is not None:
                if next_cursor in self._seen:
                    raise PaginationLoopError(
                        f"the source returned cursor {describe_cursor(next_cursor)} again after "
                        f"{self.pages + 1} page(s): pagination would loop forever"
                    )
                self._seen.add(next_cursor)
        except BaseException:
            # Like an async generator: once an error escaped, the iteration is over.
            self._finish()
            raise
        self.page_cursor = self.cursor
        self.cursor = next_cursor
        self.pages += 1
        if next_cursor is None:
            self._finish()
        return page

    def _finish(self) -> None:
        self._done = True
        if self._unregister is not None:
            self._unregister()
            self._unregister = None

    async def _fetch_with_retries(self, cursor: str | None) -> Page:
        for attempt in range(self._attempts):
            self._check_token()
            try:
                page = await self._interruptible(self._fetch_page, cursor)
            except Aborted:
                raise
            except Exception as exc:
                if self._token is not None and self._token.cancelled:
                    raise Aborted() from exc
                if attempt + 1 >= self._attempts or not self._retryable(exc):
                    raise
                delay = self._backoff_factor * 2**attempt
                reason = WaitReason.BACKOFF
                if isinstance(exc, HTTPStatusError) and exc.retry_after is not None:
                    retry_after = clamp_retry_after(exc.retry_after)
                    if retry_after > delay:
                        delay, reason = retry_after, WaitReason.RETRY_AFTER
                if self._on_retry is not None:
                    self._on_retry(exc, attempt + 1)
                await self._pause(delay, reason)
                continue
            if not isinstance(page, Page):
                raise SourceError(f"fetch_page returned {type(page).__name__}, expected syncd.Page")
            # The fetch may have completed in the same loop iteration as an abort.
            self._check_token()
            return page
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, BlockedAddressError):
            return False  # a refusal by configuration: waiting changes nothing
        if isinstance(exc, HTTPStatusError):
            return exc.status in self._retry_on_status
        return isinstance(exc, ClientTimeoutError | ClientConnectionError)

    def _check_token(self) -> None:
        if self._token is not None and self._token.cancelled:
            raise Aborted()

    async def _pause(self, seconds: float, reason: WaitReason) -> None:
        if seconds <= 0:
            return
        self._check_token()
        if self._on_wait is not None:
            self._on_wait(reason, seconds)
        await self._interruptible(self._sleep, seconds)

    def _interrupt(self) -> None:
        """The token's callback: cancel the task waiting in :meth:`_interruptible`."""
        task = self._region
        if task is None:
            return
        try:
            current = asyncio.current_task()
        except RuntimeError:  # called outside the loop: the task is not running
            current = None
        # Set from inside the fetch itself, the task is running, not suspended: a
        # cancellation would land at some later await, maybe outside the region. The token
        # is checked when the fetch returns or raises instead.
        if current is not task:
            self._interrupted = True
            task.cancel(msg="syncd: cancel token set")

    async def _interruptible(self, call: Callable[[A], Awaitable[T]], arg: A) -> T:
        """Await ``call(arg)``; if the cancel token is set meanwhile, interrupt it and raise
        :class:`Aborted`. Cancellation of the calling task propagates unchanged.

        Like :func:`asyncio.timeout`, this cancels the current task and turns that one
        cancellation back into an error, rather than running the call in a task of its
        own: a page fetch then costs no extra task and no extra loop iterations.
        """
        task = asyncio.current_task() if self._token is not None else None
        if task is None:
            return await call(arg)
        cancelling = task.cancelling()
        self._region, self._interrupted = task, False
        try:
            result = await call(arg)
        except BaseException as exc:
            if not self._interrupted:
                raise
            remaining = task.uncancel()
            if isinstance(exc, asyncio.CancelledError):
                if remaining > cancelling:
                    raise  # the task itself is being cancelled too: that wins
                raise Aborted() from None
            raise Aborted() from exc
        finally:
            self._region = None
        if self._interrupted:
            # The call swallowed the cancellation; the token is set all the same.
            task.uncancel()
            raise Aborted()
        return result
