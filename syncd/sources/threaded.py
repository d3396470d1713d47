"""Synchronous source plugins (DESIGN.md §8): a plain ``def fetch_page(cursor) -> Page``.

A plugin wrapping a vendor SDK's blocking paginator need not be async: :func:`as_async`
wraps such a source so that each ``fetch_page`` runs in a worker thread through anyio, and
the rest of syncd sees an ordinary async source. Cancelling the await (an abort, a preview's
time limit, a shutdown) returns at once: the wait for the thread is abandoned, the thread is
left to finish the call on its own, and its result, or its error, is discarded. Python
cannot stop a thread, so a call that never returns keeps its thread (and the process waits
for it at exit): a plugin should give its SDK a timeout.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, cast

import anyio
import anyio.to_thread

from syncd.models import CrawlEnd, Page
from syncd.sources.base import BlockingSource, Source


class ThreadedSource:
    """An async :class:`~syncd.sources.base.Source` over a source whose ``fetch_page`` is a
    plain function, run in a worker thread."""

    def __init__(self, source: BlockingSource) -> None:
        self.source = source
        self._fetch: Callable[[str | None], Any] = source.fetch_page
        # One thread per source: a source fetches one page at a time, and a slow SDK then
        # never waits for (or holds up) anyio's shared thread pool, which other code uses.
        self._limiter: anyio.CapacityLimiter | None = None

    async def fetch_page(self, cursor: str | None) -> Page:
        """Run the wrapped ``fetch_page(cursor)`` in a worker thread; cancellable at once."""
        if self._limiter is None:  # made on the loop: anyio needs the running event loop
            self._limiter = anyio.CapacityLimiter(1)
        page: Page = await anyio.to_thread.run_sync(
            self._fetch, cursor, abandon_on_cancel=True, limiter=self._limiter
        )
        return page

    def crawl_end(self) -> CrawlEnd | None:
        """The wrapped source's ``crawl_end()`` (:class:`~syncd.sources.base.EndingSource`),
        if it has one; called on the event loop, between two fetches."""
        ending = getattr(self.source, "crawl_end", None)
        return cast(CrawlEnd | None, ending()) if callable(ending) else None


class ThreadedStatefulSource(ThreadedSource):
    """A :class:`ThreadedSource` over a source with a ``checkpoint()``
    (:class:`~syncd.sources.base.StatefulSource`); it is called on the event loop, between
    two fetches, never while the thread runs one."""

    def checkpoint(self) -> Mapping[str, Any]:
        """The wrapped source's checkpoint."""
        value: Mapping[str, Any] = self.source.checkpoint()  # type: ignore[attr-defined]
        return value


def is_blocking(source: Any) -> bool:
    """Whether ``source.fetch_page`` is a plain function (not ``async def``)."""
    fetch = getattr(source, "fetch_page", None)
    return callable(fetch) and not inspect.iscoroutinefunction(fetch)


def as_async(source: Source | BlockingSource) -> Source:
    """``source`` itself when its ``fetch_page`` is a coroutine function, else the source
    wrapped to run ``fetch_page`` in a worker thread (its ``checkpoint()`` kept)."""
    if not is_blocking(source):
        return cast(Source, source)
    blocking = cast(BlockingSource, source)
    if callable(getattr(source, "checkpoint", None)):
        return ThreadedStatefulSource(blocking)
    return ThreadedSource(blocking)
