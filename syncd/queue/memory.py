"""The in-process work queue (``memory://``).

Everything here lives on one event loop and needs no locks: every state change happens
between two ``await`` points. The wake-up and fan-out primitives it shares with the Redis
queue live in :mod:`syncd.queue.base` (re-exported here for existing imports).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence

from syncd.errors import QueueError
from syncd.queue.base import (
    Batch,
    Broadcast,
    QueueState,
    Signal,
    Subscription,
    wait_event,
)

__all__ = ["Broadcast", "MemoryQueue", "QueueState", "Signal", "Subscription", "wait_event"]


class MemoryQueue:
    """A fair, purgeable queue in this process's memory (the embedded default).

    Round-robin across connectors: a ring holds each connector that has entries once, and
    every ``pop`` takes from the head of the ring and moves it to the back. Nothing survives
    the process, which is fine: the queue is rebuilt from the store's pending documents on
    start. ``ack`` has nothing to do, since no other instance could reclaim a batch.
    """

    def __init__(self) -> None:
        self._lists: dict[str, deque[str]] = {}
        self._ring: deque[str] = deque()
        self._signal = Signal()
        self._broadcast = Broadcast()
        self._state = QueueState.NEW

    async def open(self) -> None:
        """Make the queue usable."""
        if self._state is QueueState.CLOSED:
            raise QueueError("queue is closed")
        self._state = QueueState.OPEN

    async def close(self) -> None:
        """Drop the entries, wake blocked ``pop`` calls (they return ``None``) and end
        ``messages()`` iterators."""
        self._state = QueueState.CLOSED
        self._lists.clear()
        self._ring.clear()
        self._signal.fire()
        self._broadcast.close()

    async def ping(self) -> None:
        """Raise :class:`QueueError` unless the queue is open."""
        self._check_open()

    async def push(self, connector_id: str, external_ids: Sequence[str]) -> None:
        """Append documents of one connector."""
        self._check_open()
        if not external_ids:
            return
        entries = self._lists.get(connector_id)
        if entries is None:
            entries = self._lists[connector_id] = deque()
            self._ring.append(connector_id)
        entries.extend(external_ids)
        self._signal.fire()

    async def pop(self, max_items: int, timeout: float) -> Batch | None:
        """Up to ``max_items`` documents of the next connector in the ring; waits up to
        ``timeout`` seconds for some; ``None`` if none came or the queue was closed."""
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        if self._state is QueueState.NEW:
            raise QueueError("queue is not open")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while self._state is QueueState.OPEN:
            event = self._signal.current()
            batch = self._take(max_items)
            if batch is not None:
                return batch
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            await wait_event(event, remaining)
        return None

    async def ack(self, batch: Batch) -> None:
        """Nothing to do: a popped batch is already gone from this queue."""

    async def purge(self, connector_id: str) -> int:
        """Drop every queued entry of one connector; how many were dropped."""
        self._check_open()
        entries = self._lists.pop(connector_id, None)
        if entries is None:
            return 0
        self._ring.remove(connector_id)
        return len(entries)

    async def depth(self) -> dict[str, int]:
        """Queued entries per connector (connectors with none are absent)."""
        self._check_open()
        return {cid: len(entries) for cid, entries in self._lists.items() if entries}

    async def publish(self, message: Mapping[str, str]) -> None:
        """Deliver ``message`` to every ``messages()`` iterator of this queue."""
        self._check_open()
        self._broadcast.send(message)

    async def wait_lost(self) -> None:
        """Entries of the in-process queue are never lost while it is open: wait forever."""
        await asyncio.Event().wait()

    def messages(self) -> Subscription:
        """Messages published from now on, until the queue is closed."""
        return self._broadcast.subscribe()

    def _take(self, max_items: int) -> Batch | None:
        while self._ring:
            connector_id = self._ring.popleft()
            entries = self._lists.get(connector_id)
            if not entries:
                self._lists.pop(connector_id, None)
                continue
            count = min(max_items, len(entries))
            ids = tuple(entries.popleft() for _ in range(count))
            if entries:
                self._ring.append(connector_id)
            else:
                del self._lists[connector_id]
            return Batch(connector_id, ids)
        return None

    def _check_open(self) -> None:
        if self._state is QueueState.NEW:
            raise QueueError("queue is not open")
        if self._state is QueueState.CLOSED:
            raise QueueError("queue is closed")
