"""Waiting for a recorded change instead of polling.

Components call :meth:`ChangeFeed.notify` whenever they record a change in the store (a page
committed, a heartbeat, a document indexed, an abort); callers — embedding applications, the
benchmark, tests — wait for a condition to hold with :meth:`ChangeFeed.wait_for`, which checks
it again after each change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class ChangeFeed:
    """Wakes waiters whenever this instance records a change."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()

    async def notify(self) -> None:
        """A change was recorded: have every waiter check its condition again."""
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(
        self, read: Callable[[], Awaitable[T]], predicate: Callable[[T], bool], timeout: float
    ) -> T:
        """Read with ``read`` until ``predicate`` holds (re-read after each change); the last
        value read. ``TimeoutError`` after ``timeout`` seconds."""
        async with asyncio.timeout(timeout), self._changed:
            while not predicate(value := await read()):
                await self._changed.wait()
        return value
