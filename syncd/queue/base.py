"""The work queue protocol (DESIGN.md §1, §7).

The queue is a dispatcher, not a source of truth: it carries ``(connector_id, external_id)``
pairs to the indexing workers, and can be rebuilt from the store's pending documents.
Duplicates are harmless (claiming is a compare-and-set in the store).

It also carries control messages between instances (``publish`` / ``messages``), such as
"abort connector X", so that an abort reaches the instance that runs the work quickly. A lost
message is covered by the store poll of each run (:meth:`Store.report`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


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
