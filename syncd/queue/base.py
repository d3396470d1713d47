"""The work queue protocol (DESIGN.md §1, §7).

The queue is a dispatcher, not a source of truth: it carries ``(connector_id, external_id)``
pairs to the indexing workers, and can be rebuilt from the store's pending documents.
Duplicates are harmless (claiming is a compare-and-set in the store).

It also carries control messages between instances (``publish`` / ``messages``), such as
"abort connector X", so that an abort reaches the instance that runs the work quickly. A lost
message is covered by the store poll of each run (:meth:`Store.report`).

Below the protocol: the primitives both backends build on (a lifecycle enum, a re-armable
wake-up for blocked ``pop`` calls, the fan-out of control messages to local iterators).
They live on one event loop and need no locks: every state change happens between two
``await`` points.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "Batch",
    "Broadcast",
    "QueueState",
    "Signal",
    "Subscription",
    "WorkQueue",
    "wait_event",
]


@dataclass(frozen=True)
class Batch:
    """Up to ``max_items`` documents of one connector, handed to one worker.

    ``receipt`` is backend-specific (e.g. where the batch is parked until acknowledged).
    """

    connector_id: str
    external_ids: tuple[str, ...]
    receipt: str | None = None


class WorkQueue(Protocol):
    """A fair, purgeable queue of documents to index, plus a broadcast channel."""

    async def open(self) -> None:
        """Connect (and, for a shared queue, reclaim batches of dead instances)."""

    async def close(self) -> None:
        """Release connections; wakes blocked ``pop`` calls and ``messages`` iterators."""

    async def ping(self) -> None:
        """Raise :class:`syncd.errors.QueueError` unless the queue answers."""

    async def push(self, connector_id: str, external_ids: Sequence[str]) -> None:
        """Append documents of one connector (one round trip for the whole page)."""

    async def pop(self, max_items: int, timeout: float) -> Batch | None:
        """Take up to ``max_items`` documents of one connector, round-robin across
        connectors that have work, so that a connector with a million entries does not starve
        one with ten. Waits up to ``timeout`` seconds; ``None`` if nothing came."""

    async def ack(self, batch: Batch) -> None:
        """The batch was handed to the store (claimed or skipped): forget it for good. A
        batch not acknowledged by an instance that died is reclaimed by the others."""

    async def purge(self, connector_id: str) -> int:
        """Atomically drop every queued entry of one connector; how many were dropped."""

    async def depth(self) -> dict[str, int]:
        """Queued entries per connector (connectors with none are absent)."""

    async def publish(self, message: Mapping[str, str]) -> None:
        """Send a control message to every instance, this one included."""

    def messages(self) -> AsyncIterator[dict[str, str]]:
        """Control messages as they arrive, until the queue is closed."""

    async def wait_lost(self) -> None:
        """Return when the queue may have lost entries since it was opened (a Redis server
        restarted without persistence); the caller then rebuilds it from the store. Waits
        until cancelled when that cannot happen (the in-process queue)."""


# --- primitives shared by the backends ---------------------------------------------


class Signal:
    """A re-armable wake-up: waiters take :meth:`current` *before* checking for work, then
    wait on it, so a :meth:`fire` between the check and the wait is never lost."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def current(self) -> asyncio.Event:
        """The event the next :meth:`fire` sets."""
        return self._event

    def fire(self) -> None:
        """Wake every waiter holding the current event, and arm a fresh one."""
        event, self._event = self._event, asyncio.Event()
        event.set()


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``event``; whether it was set."""
    if event.is_set():
        return True
    if seconds <= 0:
        return False
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


class Subscription:
    """One ``messages()`` iterator: receives every message sent after it was created, and
    ends when its :class:`Broadcast` closes (or when :meth:`aclose` is called)."""

    def __init__(self, hub: Broadcast) -> None:
        self._hub = hub
        self._inbox: asyncio.Queue[dict[str, str] | None] = asyncio.Queue()
        self._done = False

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict[str, str]:
        if self._done:
            raise StopAsyncIteration
        message = await self._inbox.get()
        if message is None:
            self._done = True
            self._hub.discard(self)
            raise StopAsyncIteration
        return message

    async def aclose(self) -> None:
        """Stop receiving; the iterator ends."""
        self._done = True
        self._hub.discard(self)
        self._inbox.put_nowait(None)

    def _deliver(self, message: dict[str, str] | None) -> None:
        self._inbox.put_nowait(message)


class Broadcast:
    """Fan-out of control messages to every live :class:`Subscription`."""

    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()
        self._closed = False

    def subscribe(self) -> Subscription:
        """A new iterator; already ended if the broadcast is closed."""
        subscription = Subscription(self)
        if self._closed:
            subscription._deliver(None)
        else:
            self._subscribers.add(subscription)
        return subscription

    def discard(self, subscription: Subscription) -> None:
        """Forget a subscription (it stopped iterating)."""
        self._subscribers.discard(subscription)

    def send(self, message: Mapping[str, str]) -> None:
        """Deliver a copy of ``message`` to every subscriber."""
        for subscription in self._subscribers:
            subscription._deliver(dict(message))

    def close(self) -> None:
        """End every subscription, now and for those created later."""
        self._closed = True
        subscribers, self._subscribers = self._subscribers, set()
        for subscription in subscribers:
            subscription._deliver(None)


class QueueState(enum.Enum):
    """Lifecycle of a queue object: it is opened once and closed once."""

    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"
