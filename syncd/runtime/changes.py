"""Waiting for a recorded change instead of polling, and hearing of each change.

Components call :meth:`ChangeFeed.notify` whenever they record a change in the store (a page
committed, a heartbeat, a document indexed, an abort), naming the connector it concerns and,
when a run started or ended, the run. Callers — embedding applications, the benchmark,
tests — wait for a condition to hold with :meth:`ChangeFeed.wait_for`, which checks it again
after each change; listeners (the event hub of ``GET /events``) hear of every named change
through :meth:`ChangeFeed.listen`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import structlog

T = TypeVar("T")

log = structlog.get_logger("syncd.runtime.changes")


@dataclass(frozen=True)
class Change:
    """A recorded change of one connector; ``run_id`` when one of its runs started or
    ended."""

    connector_id: str
    run_id: str | None = None


Listener = Callable[[Change], None]


class Notify(Protocol):
    """What components call to report a change (:meth:`ChangeFeed.notify`)."""

    def __call__(
        self, connector_id: str | None = None, *, run_id: str | None = None
    ) -> Awaitable[None]: ...


class ChangeFeed:
    """Wakes waiters, and tells listeners, whenever this instance records a change."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` (synchronously: it must not block) with every change that names
        a connector; returns the function that stops it."""
        self._listeners.append(listener)

        def stop() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return stop

    def record(self, connector_id: str, *, run_id: str | None = None) -> None:
        """Tell the listeners only (for callers that cannot await; waiters are not woken)."""
        change = Change(connector_id, run_id)
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                # A listener's bug must never fail the write that was just recorded.
                log.exception("changes.listener_failed", connector_id=connector_id)

    async def notify(self, connector_id: str | None = None, *, run_id: str | None = None) -> None:
        """A change was recorded: tell the listeners (when it names a connector) and have
        every waiter check its condition again."""
        if connector_id is not None:
            self.record(connector_id, run_id=run_id)
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
