"""The connector operations: what the control API and an embedding application can do.

:class:`ConnectorService` is the one implementation of create, read, patch, delete, trigger,
abort and retry; the HTTP handlers (``syncd.api``) and :class:`syncd.Daemon`'s methods both
call it. Each operation validates its input, applies a pure state rule through the store
(``Store.mutate_connector``, a compare-and-set) and then tells the components of this instance
— and, by a control message (:mod:`syncd.service.control`), of the others — what changed.
Previews are :mod:`syncd.service.preview`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, NoReturn

import structlog

from syncd import rules
from syncd.errors import NotFound, SyncdError, ValidationError
from syncd.indexing.maintenance import Maintenance
from syncd.indexing.workers import Workers
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
    SyncStatus,
    Transition,
    new_id,
    utcnow,
)
from syncd.observability.metrics import Metrics
from syncd.pipeline.admission import Admission, Claimed
from syncd.pipeline.engine import SyncEngine
from syncd.plugins import Indexers, Registry
from syncd.queue.base import WorkQueue
from syncd.runtime.changes import ChangeFeed
from syncd.schema import spec
from syncd.schema.steering import parse_state_update, parse_sync_request
from syncd.service.control import Control
from syncd.service.cursors import decode_cursor, encode_cursor
from syncd.service.steering import check_mark, check_steer
from syncd.store.base import Store

log = structlog.get_logger("syncd.service.operations")

DELETED_ERROR = "Connector deleted"


class ConnectorService:
    """Connector operations of one instance."""

    def __init__(
        self,
        *,
        store: Store,
        queue: WorkQueue,
        engine: SyncEngine,
        admission: Admission,
        workers: Workers,
        registry: Registry,
        indexers: Indexers,
        maintenance: Maintenance,
        changes: ChangeFeed,
        metrics: Metrics,
        defaults: PaginatorSettings,
        owner: str,
        control: Control,
    ) -> None:
        self._store = store
        self._queue = queue
        self._engine = engine
        self._admission = admission
        self._workers = workers
        self._registry = registry
        self._indexers = indexers
        self._maintenance = maintenance
        self._changes = changes
        self._metrics = metrics
        self._defaults = defaults
        self._owner = owner
        self._control = control

    @property
    def registry(self) -> Registry:
        """The kinds of sources and indexers this service accepts."""
        return self._registry

    # --- secrets ------------------------------------------------------------------------

    async def register_stored_secrets(self) -> None:
        """Every stored connector's secrets are masked before anything logs or runs."""
        after: str | None = None
        while True:
            rows = await self._store.list_connectors(limit=100, after=after)
            for c in rows:
                self._registry.register_secrets(c.source, c.indexer)
            if len(rows) < 100:
                return
            after = rows[-1].id

    # --- connectors ---------------------------------------------------------------------

    async def create_connector(self, body: Mapping[str, Any]) -> Connector:
        """Validate and create a connector (``ValidationError``, ``NameConflict``)."""
        fields = spec.parse_create(body, defaults=self._defaults, kinds=self._registry)
        now = utcnow()
        connector = Connector(id=new_id(), created_at=now, updated_at=now, **fields)
        connector = replace(
            connector,
            next_run_at=rules.next_run_at(connector, now),
            next_full_crawl_at=rules.next_full_crawl_at(connector, now),
        )
        self._registry.register_secrets(connector.source, connector.indexer)
        created = await self._store.create_connector(connector)
        await self._changes.notify(created.id)
        return created

    async def get_connector(self, connector_id: str) -> Connector:
        """The connector, or ``NotFound``."""
        c = await self._store.get_connector(connector_id)
        if c is None:
            raise NotFound()
        return self._engine.overlay(c)

    async def get_connector_with_counts(
        self, connector_id: str
    ) -> tuple[Connector, dict[DocStatus, int]]:
        """The connector and its document counts (one store read), or ``NotFound``."""
        found = await self._store.get_connector_with_counts(connector_id)
        if found is None:
            raise NotFound()
        return self._engine.overlay(found[0]), found[1]

    async def list_connectors_with_counts(
        self,
        *,
        status: ConnectorStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[tuple[Connector, dict[DocStatus, int]]], str | None]:
        """:meth:`list_connectors` with each connector's document counts (one store read)."""
        rows = [
            (self._engine.overlay(c), counts)
            for c, counts in await self._store.list_connectors_with_counts(
                status=status, limit=limit + 1, after=decode_cursor(cursor)
            )
        ]
        return _page(rows, limit, lambda row: row[0].id)

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

    async def reject(self, connector_id: str, error: ValidationError) -> NoReturn:
        """Refuse a request about the connector that failed validation (its body, its query
        parameters): ``NotFound`` when there is no such connector — 404 before 422, on every
        route of a connector — else ``error``."""
        await self.get_connector(connector_id)
        raise error

    async def update_connector(self, connector_id: str, body: Mapping[str, Any]) -> Connector:
        """PATCH a connector (``NotFound``, ``Conflict``, ``ValidationError``)."""
        try:
            changes = spec.parse_patch(body, kinds=self._registry)
        except ValidationError as exc:
            await self.reject(connector_id, exc)
        self._registry.register_secrets(changes.get("source") or {}, changes.get("indexer") or {})
        now = utcnow()
        _, after = await self._store.mutate_connector(
            connector_id, lambda c: rules.patch(c, changes, now=now)
        )
        self._indexers.forget(connector_id)
        await self._changes.notify(connector_id)
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
        await self._changes.notify(connector_id)
        await self._workers.cancel_connector(connector_id)
        if before.status is not ConnectorStatus.DELETING:
            await self._control.cancel_indexing(connector_id)
        if before.status is not ConnectorStatus.DELETING or not self._maintenance.cascading(
            connector_id
        ):
            self._maintenance.start_cascade(connector_id)

    # --- syncs --------------------------------------------------------------------------

    async def trigger_sync(
        self, connector_id: str, body: Mapping[str, Any] | None = None
    ) -> str | None:
        """Start a manual sync; returns its run id (``Conflict`` per DESIGN.md §3).

        ``body`` may ask for a crawl mode (``{"mode", "since", "until"}``, DESIGN.md §12):
        checked first (``NotFound``, then ``ValidationError``), before the state is.
        Without a free run slot in this instance (``[sync] max_concurrent_runs``) the
        request is stored instead (``sync_status = queued``, with its mode) and ``None`` is
        returned: the first instance with a free slot starts it, in age order with the due
        schedules.
        """
        try:
            steer = parse_sync_request(body)
        except ValidationError as exc:
            await self.reject(connector_id, exc)
        if steer is not None:
            check_steer(await self.get_connector(connector_id), steer, self._registry)
        # Shielded: a caller cancelled after the claim committed must not leave the
        # connector `running` with no task; the claim and the start happen together.
        claim = asyncio.create_task(
            self._trigger(connector_id, steer), name=f"trigger:{connector_id}"
        )
        return await asyncio.shield(claim)

    async def _trigger(self, connector_id: str, steer: rules.Steer | None) -> str | None:
        run_id = new_id()
        now = utcnow()

        async def claim(slots: int, claimed: list[Claimed]) -> None:
            _, after = await self._store.mutate_connector(
                connector_id,
                lambda c: rules.trigger(c, run_id=run_id, owner=self._owner, now=now, steer=steer),
            )
            claimed.append((after, RunTrigger.MANUAL))

        # A failed claim (Conflict, NotFound) gives its slot back.
        if await self._admission.claim_and_start(claim) is None:
            await self._store.mutate_connector(
                connector_id, lambda c: rules.enqueue(c, now=now, steer=steer)
            )
            log.info("service.sync_queued", connector_id=connector_id)
            await self._changes.notify(connector_id)
            await self._control.wake(connector_id)  # here and in every other instance
            return None
        return run_id

    async def abort_sync(self, connector_id: str) -> str | None:
        """Abort the running sync wherever it runs; returns the aborted run id (``None``
        for a queued trigger, which is dropped: the connector returns to idle).

        Decided in the store: one transaction sets `idle` (clearing the run id, which fences
        the run's later writes) and fails its pending and running documents with `Aborted`,
        so that no run claimed after it can have its documents failed by it. Then the run's
        cancel token is set and its indexing cancelled, here and, by broadcast, in every other
        instance; the queue entries are purged (later, if the queue does not answer).
        """
        now = utcnow()
        if (await self.get_connector(connector_id)).sync_status is SyncStatus.QUEUED:
            try:
                # No run was created: the request is dropped, nothing else to stop.
                await self._store.mutate_connector(
                    connector_id, lambda c: rules.drop_queued(c, now=now)
                )
            except rules.NotQueued:
                pass  # it started meanwhile: abort the run below
            else:
                await self._changes.notify(connector_id)
                return None
        before, _ = await self._store.mutate_connector(
            connector_id, lambda c: rules.abort(c, now=now), fail_documents=ABORTED_ERROR
        )
        run_id = before.run_id
        # Local first (no round trip), then the queue, whose failures never undo the abort.
        self._engine.abort_local(connector_id, run_id)
        await self._workers.cancel_connector(connector_id)
        await self._maintenance.purge(connector_id)
        await self._control.abort(connector_id, run_id)
        trigger = RunTrigger.MANUAL
        with contextlib.suppress(SyncdError):
            run = await self._store.get_run(run_id) if run_id else None
            trigger = run.trigger if run is not None else trigger
        self._metrics.runs.labels(trigger=str(trigger), outcome=str(RunOutcome.ABORTED)).inc()
        await self._changes.notify(connector_id, run_id=run_id)
        return run_id

    # --- the crawl state (DESIGN.md §12) ------------------------------------------------

    async def get_state(self, connector_id: str) -> rules.CrawlState:
        """The connector's crawl state: its mark, the crawl in progress, the next crawl."""
        return rules.crawl_state(await self.get_connector(connector_id), utcnow())

    async def set_state(self, connector_id: str, body: Mapping[str, Any]) -> rules.CrawlState:
        """Set the mark (``{"mark": value}``); the new state. ``NotFound``, then
        ``ValidationError`` (the body, a mark the connector's format cannot read), then
        ``Conflict`` (a sync runs, the connector is being deleted)."""
        try:
            mark = parse_state_update(body)
        except ValidationError as exc:
            await self.reject(connector_id, exc)
        check_mark(await self.get_connector(connector_id), mark, self._registry, field="mark")
        return await self._change_state(
            connector_id, lambda c, now: rules.set_mark(c, mark, now=now)
        )

    async def reset_state(self, connector_id: str) -> rules.CrawlState:
        """Reset the mark: the next crawl is a full one. The new state (errors as
        :meth:`set_state`'s)."""
        connector = await self.get_connector(connector_id)
        check_mark(connector, None, self._registry, field="path.id")
        return await self._change_state(connector_id, lambda c, now: rules.reset_mark(c, now=now))

    async def _change_state(
        self, connector_id: str, rule: Callable[[Connector, datetime], Transition]
    ) -> rules.CrawlState:
        now = utcnow()
        _, after = await self._store.mutate_connector(connector_id, lambda c: rule(c, now))
        log.info("service.crawl_state_changed", connector_id=connector_id)
        await self._changes.notify(connector_id)
        return rules.crawl_state(self._engine.overlay(after), now)

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
        """One document with its payload (``NotFound``: the connector's first)."""
        await self.get_connector(connector_id)
        if spec.text_problem(external_id):  # no store holds such an id (nor can compare it)
            raise NotFound("Document not found")
        doc = await self._store.get_document(connector_id, external_id)
        if doc is None:
            raise NotFound("Document not found")
        return doc

    async def retry_failed(self, connector_id: str) -> int:
        """Re-queue the connector's failed documents; how many."""
        await self.get_connector(connector_id)
        ids = await self._store.requeue_documents(connector_id, now=utcnow())
        if ids:
            with self._maintenance.rebuild_on_failure("service.requeue_push_failed"):
                await self._queue.push(connector_id, ids)
        await self._changes.notify(connector_id)
        return len(ids)

    async def apply_deletions(self, connector_id: str) -> int:
        """Apply the deletions the guard held (DESIGN.md §11): the held documents still live
        are deleted (at once for an indexer with nothing to call, else through the queue);
        how many. ``Conflict`` (``No deletions held``) when none are held."""
        connector = await self.get_connector(connector_id)
        delete_at_once = rules.deletes_at_once(self._registry.indexer(connector.indexer))
        now = utcnow()
        _, _, result = await self._store.mutate_with_prune(
            connector_id, lambda c, _: rules.apply_held(c, now=now, delete_at_once=delete_at_once)
        )
        if result.deleted:
            self._metrics.documents_deleted.inc(result.deleted)
        if result.queued:
            with self._maintenance.rebuild_on_failure("service.delete_push_failed"):
                await self._queue.push(connector_id, list(result.queued))
        log.info("service.deletions_applied", connector_id=connector_id, deleting=result.deleting)
        await self._changes.notify(connector_id)
        return result.deleting

    async def document_counts(self, connector_id: str) -> dict[DocStatus, int]:
        """Documents per status."""
        return await self._store.document_counts(connector_id)


def _page(rows: list[Any], limit: int, key: Any) -> tuple[list[Any], str | None]:
    """The first ``limit`` of ``rows`` (fetched ``limit + 1``) and the next page's cursor."""
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(key(rows[-1])) if more and rows else None)
