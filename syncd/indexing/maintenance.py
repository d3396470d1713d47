"""Housekeeping that keeps the queue and the store consistent: queue repair and delete
cascades.

The store is the truth and the queue a dispatcher (DESIGN.md §1): whenever the queue may have
lost entries (a failed push, a Redis server that lost its data, a purge it could not make),
the store's pending documents are pushed again; duplicates are harmless because claiming a
document is a compare-and-set on ``pending``. A deleted connector's rows are removed in the
background, and a cascade interrupted by a stop is resumed at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import structlog

from syncd.errors import SyncdError
from syncd.models import ConnectorStatus
from syncd.queue.base import WorkQueue
from syncd.runtime.tasks import cancel_and_wait
from syncd.store.base import Store

log = structlog.get_logger("syncd.indexing.maintenance")

#: Bound on a queue call made while answering an abort or a delete (seconds).
QUEUE_CALL_TIMEOUT = 1.0
#: Pause between two attempts at a rebuild while the queue does not answer (seconds).
REBUILD_RETRY_SECONDS = 1.0


class Maintenance:
    """Queue repair and delete cascades of one instance."""

    def __init__(
        self,
        *,
        store: Store,
        queue: WorkQueue,
        on_deleted: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._on_deleted = on_deleted
        self._rebuild = asyncio.Event()
        # Connectors whose queue entries an abort or a delete could not purge (the queue was
        # unreachable): purged before the next rebuild. Meanwhile their entries are harmless.
        self.owed_purges: set[str] = set()
        self._cascades: dict[str, asyncio.Task[None]] = {}

    # --- queue repair -----------------------------------------------------------------

    def request_rebuild(self) -> None:
        """Pending documents may be missing from the queue: have it rebuilt from the store."""
        self._rebuild.set()

    @contextlib.contextmanager
    def rebuild_on_failure(
        self,
        event: str | None = None,
        *,
        catch: type[Exception] = SyncdError,
        **fields: Any,
    ) -> Iterator[None]:
        """Around a step that pushes documents pending in the store to the queue: push, or
        have the queue rebuilt. When the step fails (``catch``), the queue is rebuilt from the
        store, which queues the documents once the queue answers. With ``event`` the failure
        is logged under that name (with ``fields``) and the caller goes on: the rebuild has
        them. Without, it is raised: for a caller whose work fails with the queue (a run's
        page)."""
        try:
            yield
        except catch as exc:
            self.request_rebuild()
            if event is None:
                raise
            log.warning(event, error=str(exc), exc_info=not isinstance(exc, SyncdError), **fields)

    async def rebuild_queue(self) -> int:
        """Re-enqueue every pending document; how many."""
        after: tuple[str, str] | None = None
        total = 0
        while True:
            rows = await self._store.pending_documents(after=after, limit=5000)
            if not rows:
                break
            await self.requeue(rows)
            total += len(rows)
            after = rows[-1]
        if total:
            log.info("maintenance.queue_rebuilt", documents=total)
        return total

    async def requeue(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Push documents pending in the store, ``(connector_id, external_id)`` pairs, to the
        queue: one push per connector."""
        by_connector: dict[str, list[str]] = {}
        for cid, ext in pairs:
            by_connector.setdefault(cid, []).append(ext)
        for cid, ids in by_connector.items():
            await self._queue.push(cid, ids)

    async def purge(self, connector_id: str) -> None:
        """Drop the connector's queue entries now, or as soon as the queue answers: an abort
        or a delete never waits on the queue (the store already decided)."""
        try:
            await asyncio.wait_for(self._queue.purge(connector_id), QUEUE_CALL_TIMEOUT)
        except (SyncdError, TimeoutError) as exc:
            log.warning(
                "maintenance.purge_deferred",
                connector_id=connector_id,
                error=str(exc) or type(exc).__name__,
            )
            self.owed_purges.add(connector_id)
            self.request_rebuild()

    async def rebuild_when_asked(self) -> None:
        """Run forever: make owed purges and rebuild the queue when asked, until it
        succeeds."""
        while True:
            await self._rebuild.wait()
            self._rebuild.clear()
            try:
                # The rebuild that follows re-pushes every pending document, so a purge that
                # lands after a new run enqueued documents loses none of them.
                for cid in list(self.owed_purges):
                    await self._queue.purge(cid)
                    self.owed_purges.discard(cid)
                await self.rebuild_queue()
            except SyncdError as exc:
                log.warning("maintenance.rebuild_failed", error=str(exc))
                self._rebuild.set()
                await asyncio.sleep(REBUILD_RETRY_SECONDS)

    async def watch_queue_loss(self) -> None:
        """Run forever: ask for a rebuild whenever the queue may have lost entries."""
        while True:
            await self._queue.wait_lost()
            self.request_rebuild()

    # --- delete cascades --------------------------------------------------------------

    def start_cascade(self, connector_id: str) -> None:
        """Delete the connector's rows in the background (once per connector at a time)."""
        if connector_id in self._cascades:
            return
        task = asyncio.create_task(self._cascade(connector_id), name=f"delete:{connector_id}")
        self._cascades[connector_id] = task

    def cascading(self, connector_id: str) -> bool:
        """Whether this instance is deleting the connector's rows now."""
        return connector_id in self._cascades

    async def resume_cascades(self) -> None:
        """Resume the cascades of connectors left ``deleting`` (a stop cut them short)."""
        after: str | None = None
        while True:
            rows = await self._store.list_connectors(
                status=ConnectorStatus.DELETING, limit=100, after=after
            )
            for c in rows:
                self.start_cascade(c.id)
            if len(rows) < 100:
                return
            after = rows[-1].id

    async def wait_deleted(self, connector_id: str) -> None:
        """Wait for this instance's delete cascade of the connector, if one runs."""
        task = self._cascades.get(connector_id)
        if task is not None:
            await asyncio.wait({task})

    async def _cascade(self, connector_id: str) -> None:
        try:
            await self._store.delete_connector(connector_id)
            if self._on_deleted is not None:
                self._on_deleted(connector_id)
            log.info("maintenance.connector_deleted", connector_id=connector_id)
            await self.purge(connector_id)
        except SyncdError as exc:
            # Left as `deleting`: the next start (or DELETE) resumes the cascade.
            log.error("maintenance.delete_failed", connector_id=connector_id, error=str(exc))
        finally:
            self._cascades.pop(connector_id, None)

    async def stop(self) -> None:
        """Cancel the cascades in progress (resumed at the next start)."""
        for task in list(self._cascades.values()):
            await cancel_and_wait(task)
        self._cascades.clear()
