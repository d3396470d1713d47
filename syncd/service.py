"""The connector operations: what the control API and an embedding application can do.

:class:`ConnectorService` is the one implementation of create, read, patch, delete, trigger,
abort and retry; the HTTP handlers (``syncd.api``) and :class:`syncd.Daemon`'s methods both
call it. Each operation validates its input, applies a pure state rule through the store
(``Store.mutate_connector``, a compare-and-set) and then tells the components of this instance
— and, by broadcast, of the others — what changed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import structlog

from syncd import rules, spec
from syncd.changes import ChangeFeed
from syncd.errors import NotFound, SyncdError, ValidationError
from syncd.maintenance import QUEUE_CALL_TIMEOUT, Maintenance
from syncd.metrics import Metrics
from syncd.models import (
    ABORTED_ERROR,
    Connector,
    ConnectorStatus,
    DocStatus,
    Document,
    PaginatorSettings,
    Run,
    RunOutcome,
    RunTrigger,
    new_id,
    utcnow,
)
from syncd.plugins import Indexers, Registry
from syncd.queue.base import WorkQueue
from syncd.store.base import Store
from syncd.sync import SyncEngine
from syncd.workers import Workers

log = structlog.get_logger("syncd.service")

#: Control messages between instances.
MSG_ABORT = "abort"
MSG_CANCEL_INDEXING = "cancel_indexing"
DELETED_ERROR = "Connector deleted"

_EMPTY_CURSOR = "~"


def encode_cursor(value: str) -> str:
    """An opaque list cursor for ``value``."""
    if not value:
        # An empty id (stored by versions that allowed it) still gets a cursor the API takes.
        return _EMPTY_CURSOR
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    """The value behind a cursor from :func:`encode_cursor`; 422 on anything else."""
    if cursor is None:
        return None
    if cursor == _EMPTY_CURSOR:
        return ""
    try:
        padded = (cursor + "=" * (-len(cursor) % 4)).encode()
        value = base64.b64decode(padded, altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValidationError({"cursor": "Invalid cursor"}) from None
    if not value or "\x00" in value:
        raise ValidationError({"cursor": "Invalid cursor"})
    return value


class ConnectorService:
    """Connector operations of one instance."""

    def __init__(
        self,
        *,
        store: Store,
        queue: WorkQueue,
        engine: SyncEngine,
        workers: Workers,
        registry: Registry,
        indexers: Indexers,
        maintenance: Maintenance,
        changes: ChangeFeed,
        metrics: Metrics,
        defaults: PaginatorSettings,
        owner: str,
    ) -> None:
        self._store = store
        self._queue = queue
        self._engine = engine
        self._workers = workers
        self._registry = registry
        self._indexers = indexers
        self._maintenance = maintenance
        self._changes = changes
        self._metrics = metrics
        self._defaults = defaults
        self._owner = owner

    # --- secrets ------------------------------------------------------------------------

    def register_secrets(self, source: Mapping[str, Any], indexer: Mapping[str, Any]) -> None:
        """Have the log redaction mask every secret of these configs, before any request."""
        from syncd.logs import register_secret

        for value in self._registry.secrets(source, indexer):
            register_secret(value)

    async def register_stored_secrets(self) -> None:
        """Every stored connector's secrets are masked before anything logs or runs."""
        after: str | None = None
        while True:
            rows = await self._store.list_connectors(limit=100, after=after)
            for c in rows:
                self.register_secrets(c.source, c.indexer)
            if len(rows) < 100:
                return
            after = rows[-1].id

    # --- connectors ---------------------------------------------------------------------

    async def create_connector(self, body: Mapping[str, Any]) -> Connector:
        """Validate and create a connector (``ValidationError``, ``NameConflict``)."""
        fields = spec.parse_create(body, defaults=self._defaults, kinds=self._registry)
        now = utcnow()
        connector = Connector(id=new_id(), created_at=now, updated_at=now, **fields)
        connector = replace(connector, next_run_at=rules.next_run_at(connector, now))
        self.register_secrets(connector.source, connector.indexer)
        return await self._store.create_connector(connector)

    async def get_connector(self, connector_id: str) -> Connector:
        """The connector, or ``NotFound``."""
        c = await self._store.get_connector(connector_id)
        if c is None:
            raise NotFound()
        return c

    async def list_connectors(
        self,
        *,
        status: ConnectorStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[Connector], str | None]:
        """A page of connectors and the cursor of the next page (``None`` at the end)."""
        rows = await self._store.list_connectors(
            status=status, limit=limit + 1, after=decode_cursor(cursor)
        )
        return _page(rows, limit, lambda c: c.id)

    async def update_connector(self, connector_id: str, body: Mapping[str, Any]) -> Connector:
        """PATCH a connector (``NotFound``, ``Conflict``, ``ValidationError``)."""
        await self.get_connector(connector_id)  # 404 before 422, like every {id} route
        changes = spec.parse_patch(body, kinds=self._registry)
        self.register_secrets(changes.get("source") or {}, changes.get("indexer") or {})
        now = utcnow()
        _, after = await self._store.mutate_connector(
            connector_id, lambda c: rules.patch(c, changes, now=now)
        )
        self._indexers.forget(connector_id)
        return after

    async def delete_connector(self, connector_id: str) -> None:
        """Mark ``deleting``, stop its indexing everywhere, and delete its rows in the
        background (idempotent while deleting)."""
        now = utcnow()
        # Its documents leave `pending`/`running` in the same transaction, so that indexing
        # in flight anywhere is cancelled (below, and by the lease renewal of each instance).
        before, _ = await self._store.mutate_connector(
            connector_id, lambda c: rules.begin_delete(c, now=now), fail_documents=DELETED_ERROR
        )
        await self._workers.cancel_connector(connector_id)
        if before.status is not ConnectorStatus.DELETING:
            await self.broadcast({"type": MSG_CANCEL_INDEXING, "connector_id": connector_id})
        if before.status is not ConnectorStatus.DELETING or not self._maintenance.cascading(
            connector_id
        ):
            self._maintenance.start_cascade(connector_id)

    # --- syncs --------------------------------------------------------------------------

    async def trigger_sync(self, connector_id: str) -> str:
        """Start a manual sync; returns its run id (``Conflict`` per DESIGN.md §3)."""
        # Shielded: a caller cancelled after the claim committed must not leave the
        # connector `running` with no task; the claim and the start happen together.
        return await asyncio.shield(self._trigger(connector_id))

    async def _trigger(self, connector_id: str) -> str:
        run_id = new_id()
        now = utcnow()
        _, after = await self._store.mutate_connector(
            connector_id,
            lambda c: rules.trigger(c, run_id=run_id, owner=self._owner, now=now),
        )
        self._engine.start(after, RunTrigger.MANUAL)
        return run_id

    async def abort_sync(self, connector_id: str) -> str | None:
        """Abort the running sync wherever it runs; returns the aborted run id.

        Decided in the store: one transaction sets `idle` (clearing the run id, which fences
        the run's later writes) and fails its pending and running documents with `Aborted`,
        so that no run claimed after it can have its documents failed by it. Then the run's
        cancel token is set and its indexing cancelled, here and, by broadcast, in every other
        instance; the queue entries are purged (later, if the queue does not answer).
        """
        now = utcnow()
        before, _ = await self._store.mutate_connector(
            connector_id, lambda c: rules.abort(c, now=now), fail_documents=ABORTED_ERROR
        )
        run_id = before.run_id
        # Local first (no round trip), then the queue, whose failures never undo the abort.
        self._engine.abort_local(connector_id, run_id)
        await self._workers.cancel_connector(connector_id)
        await self._maintenance.purge(connector_id)
        await self.broadcast(
            {"type": MSG_ABORT, "connector_id": connector_id, "run_id": run_id or ""}
        )
        trigger = RunTrigger.MANUAL
        with contextlib.suppress(SyncdError):
            run = await self._store.get_run(run_id) if run_id else None
            trigger = run.trigger if run is not None else trigger
        self._metrics.runs.labels(trigger=str(trigger), outcome=str(RunOutcome.ABORTED)).inc()
        await self._changes.notify()
        return run_id

    async def broadcast(self, message: Mapping[str, str]) -> None:
        """Tell every other instance; a lost message is covered by the store polls (a run's
        heartbeat, the workers' lease renewal)."""
        try:
            await asyncio.wait_for(self._queue.publish(message), QUEUE_CALL_TIMEOUT)
        except (SyncdError, TimeoutError) as exc:
            log.warning(
                "broadcast failed",
                message_type=message.get("type"),
                connector_id=message.get("connector_id"),
                error=str(exc) or type(exc).__name__,
            )

    async def apply_message(self, message: Mapping[str, str]) -> None:
        """Apply a control message from any instance (this one included)."""
        kind = message.get("type")
        cid = message.get("connector_id", "")
        if kind == MSG_ABORT:
            self._engine.abort_local(cid, message.get("run_id") or None)
        if kind in (MSG_ABORT, MSG_CANCEL_INDEXING):
            # Cancels only indexing whose documents the store took away, so a late message
            # never touches documents of a run claimed after it.
            try:
                await self._workers.cancel_connector(cid)
            except SyncdError as exc:
                log.warning("indexing not cancelled", connector_id=cid, error=str(exc))

    async def listen(self) -> None:
        """Run until the queue closes: apply every control message as it arrives."""
        async for message in self._queue.messages():
            await self.apply_message(message)

    # --- runs and documents -------------------------------------------------------------

    async def list_runs(
        self, connector_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> tuple[list[Run], str | None]:
        """A page of the connector's runs, newest first."""
        await self.get_connector(connector_id)
        rows = await self._store.list_runs(
            connector_id, limit=limit + 1, before=decode_cursor(cursor)
        )
        return _page(rows, limit, lambda r: r.id)

    async def list_documents(
        self,
        connector_id: str,
        *,
        status: DocStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[Document], str | None]:
        """A page of the connector's documents, by external id."""
        await self.get_connector(connector_id)
        rows = await self._store.list_documents(
            connector_id, status=status, limit=limit + 1, after=decode_cursor(cursor)
        )
        return _page(rows, limit, lambda d: d.external_id)

    async def get_document(self, connector_id: str, external_id: str) -> Document:
        """One document with its payload (``NotFound``)."""
        await self.get_connector(connector_id)
        doc = await self._store.get_document(connector_id, external_id)
        if doc is None:
            raise NotFound("Document not found")
        return doc

    async def retry_failed(self, connector_id: str) -> int:
        """Re-queue the connector's failed documents; how many."""
        await self.get_connector(connector_id)
        ids = await self._store.requeue_documents(connector_id, now=utcnow())
        if ids:
            try:
                await self._queue.push(connector_id, ids)
            except SyncdError as exc:
                # Pending in the store: the rebuild queues them once the queue answers.
                log.warning("re-queued documents not pushed yet", error=str(exc))
                self._maintenance.request_rebuild()
        await self._changes.notify()
        return len(ids)

    async def document_counts(self, connector_id: str) -> dict[DocStatus, int]:
        """Documents per status."""
        return await self._store.document_counts(connector_id)


def _page(rows: list[Any], limit: int, key: Any) -> tuple[list[Any], str | None]:
    """The first ``limit`` of ``rows`` (fetched ``limit + 1``) and the next page's cursor."""
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(key(rows[-1])) if more and rows else None)
