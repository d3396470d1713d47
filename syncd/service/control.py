"""Control messages between the instances sharing a queue: an abort, the cancellation of a
deleted connector's indexing, and a queued trigger that an instance with a free run slot may
start.

The store has already decided by the time a message is sent: a message only makes the other
instances act sooner. A lost one is covered by the store polls (a run's heartbeat, the
workers' lease renewal, the scheduler's tick). Every message is applied by every instance,
the sender included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import structlog

from syncd.errors import SyncdError
from syncd.indexing.maintenance import QUEUE_CALL_TIMEOUT
from syncd.indexing.workers import Workers
from syncd.pipeline.engine import SyncEngine
from syncd.queue.base import WorkQueue

log = structlog.get_logger("syncd.service.control")

MSG_ABORT = "abort"
MSG_CANCEL_INDEXING = "cancel_indexing"
MSG_WAKE = "wake"  # a manual trigger was queued: an instance with a free slot may start it


class Control:
    """The control messages of one instance: sending them, and applying those that arrive."""

    def __init__(
        self,
        *,
        queue: WorkQueue,
        engine: SyncEngine,
        workers: Workers,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self._queue = queue
        self._engine = engine
        self._workers = workers
        self._wake = wake

    async def abort(self, connector_id: str, run_id: str | None) -> None:
        """Tell every instance that the connector's run ``run_id`` was aborted: the one that
        runs it sets its cancel token, each cancels the indexing the store took away."""
        await self._broadcast(
            {"type": MSG_ABORT, "connector_id": connector_id, "run_id": run_id or ""}
        )

    async def cancel_indexing(self, connector_id: str) -> None:
        """Tell every instance to cancel the indexing of a connector being deleted."""
        await self._broadcast({"type": MSG_CANCEL_INDEXING, "connector_id": connector_id})

    async def wake(self, connector_id: str) -> None:
        """A manual trigger of the connector was queued: this instance's scheduler notes the
        waiting work at once, and any other instance with a free run slot may start it."""
        if self._wake is not None:
            self._wake()
        await self._broadcast({"type": MSG_WAKE, "connector_id": connector_id})

    async def _broadcast(self, message: Mapping[str, str]) -> None:
        """Publish ``message`` to every other instance; a failure is only logged (the store
        polls cover a lost message)."""
        try:
            await asyncio.wait_for(self._queue.publish(message), QUEUE_CALL_TIMEOUT)
        except (SyncdError, TimeoutError) as exc:
            log.warning(
                "service.broadcast_failed",
                message_type=message.get("type"),
                connector_id=message.get("connector_id"),
                error=str(exc) or type(exc).__name__,
            )

    async def apply(self, message: Mapping[str, str]) -> None:
        """Apply a control message from any instance (this one included)."""
        kind = message.get("type")
        cid = message.get("connector_id", "")
        if kind == MSG_WAKE and self._wake is not None:
            self._wake()
        if kind == MSG_ABORT:
            self._engine.abort_local(cid, message.get("run_id") or None)
        if kind in (MSG_ABORT, MSG_CANCEL_INDEXING):
            # Cancels only indexing whose documents the store took away, so a late message
            # never touches documents of a run claimed after it.
            try:
                await self._workers.cancel_connector(cid)
            except SyncdError as exc:
                log.warning("service.cancel_failed", connector_id=cid, error=str(exc))

    async def apply_messages(self) -> None:
        """Run until the queue closes: apply every control message as it arrives."""
        async for message in self._queue.messages():
            await self.apply(message)
