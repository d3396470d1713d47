"""The embedding API of a daemon: the connector operations, previews, and waiting for the
changes this instance records (embedding applications, the benchmark, tests).

:class:`EmbeddingApi` is the base of :class:`syncd.Daemon`: each method is a delegate to the
component the daemon wired for it (its :class:`~syncd.service.operations.ConnectorService`,
its :class:`~syncd.service.preview.Previewer`, its change feed, engine and maintenance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from syncd.indexing.maintenance import Maintenance
from syncd.models import Connector, ConnectorStatus, DocStatus, Document, Run
from syncd.pipeline.engine import SyncEngine
from syncd.rules.steering import CrawlState
from syncd.runtime.changes import ChangeFeed
from syncd.service.operations import ConnectorService
from syncd.service.preview import Preview, Previewer


class EmbeddingApi:
    """The connector operations of a running daemon, for code that embeds it."""

    # Wired by the daemon when it starts.
    changes: ChangeFeed
    engine: SyncEngine
    maintenance: Maintenance
    service: ConnectorService
    previews: Previewer

    # --- the embedding API: the connector operations -----------------------------------

    async def create_connector(self, body: Mapping[str, Any]) -> Connector:
        """Validate and create a connector (``ValidationError``, ``NameConflict``)."""
        return await self.service.create_connector(body)

    async def get_connector(self, connector_id: str) -> Connector:
        """The connector, or ``NotFound``."""
        return await self.service.get_connector(connector_id)

    async def list_connectors(
        self,
        *,
        status: ConnectorStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[Connector], str | None]:
        """A page of connectors and the cursor of the next page (``None`` at the end)."""
        return await self.service.list_connectors(status=status, limit=limit, cursor=cursor)

    async def update_connector(self, connector_id: str, body: Mapping[str, Any]) -> Connector:
        """PATCH a connector (``NotFound``, ``Conflict``, ``ValidationError``)."""
        return await self.service.update_connector(connector_id, body)

    async def delete_connector(self, connector_id: str) -> None:
        """Mark ``deleting`` and delete in the background (idempotent while deleting)."""
        await self.service.delete_connector(connector_id)

    async def trigger_sync(
        self,
        connector_id: str,
        *,
        mode: str | None = None,
        since: Any = None,
        until: Any = None,
    ) -> str | None:
        """Start a manual sync; returns its run id, or ``None`` when no run slot was free
        and the trigger is queued (``Conflict`` per DESIGN.md §3). ``mode`` asks for an
        ``incremental``, ``full`` or ``backfill`` crawl (the window ``[since, until)``), as
        ``POST /connectors/{id}/sync``'s body does (``ValidationError``)."""
        asked = {"mode": mode, "since": since, "until": until}
        body = {k: v for k, v in asked.items() if v is not None}
        return await self.service.trigger_sync(connector_id, body or None)

    async def get_state(self, connector_id: str) -> CrawlState:
        """The connector's crawl state (``GET /connectors/{id}/state``)."""
        return await self.service.get_state(connector_id)

    async def set_state(self, connector_id: str, mark: Any) -> CrawlState:
        """Set the connector's mark; the new state (``ValidationError``, ``Conflict``)."""
        return await self.service.set_state(connector_id, {"mark": mark})

    async def reset_state(self, connector_id: str) -> CrawlState:
        """Reset the connector's mark (the next crawl is full); the new state."""
        return await self.service.reset_state(connector_id)

    async def abort_sync(self, connector_id: str) -> str | None:
        """Abort the running sync wherever it runs; returns the aborted run id."""
        return await self.service.abort_sync(connector_id)

    async def list_runs(
        self, connector_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> tuple[list[Run], str | None]:
        """A page of the connector's runs, newest first."""
        return await self.service.list_runs(connector_id, limit=limit, cursor=cursor)

    async def list_documents(
        self,
        connector_id: str,
        *,
        status: DocStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[Document], str | None]:
        """A page of the connector's documents, by external id."""
        return await self.service.list_documents(
            connector_id, status=status, limit=limit, cursor=cursor
        )

    async def get_document(self, connector_id: str, external_id: str) -> Document:
        """One document with its payload (``NotFound``)."""
        return await self.service.get_document(connector_id, external_id)

    async def retry_failed(self, connector_id: str) -> int:
        """Re-queue the connector's failed documents; how many."""
        return await self.service.retry_failed(connector_id)

    async def apply_deletions(self, connector_id: str) -> int:
        """Apply the deletions the guard held; how many (``Conflict`` if none are held)."""
        return await self.service.apply_deletions(connector_id)

    async def document_counts(self, connector_id: str) -> dict[DocStatus, int]:
        """Documents per status."""
        return await self.service.document_counts(connector_id)

    async def preview(self, body: Mapping[str, Any]) -> Preview:
        """Fetch the first pages of a connector body or an existing connector, storing
        nothing (``{"connector": {...}}`` or ``{"connector_id": ...}``, ``pages``,
        ``timeout_seconds``); a failing source is the result's ``error``."""
        return await self.previews.preview(body)

    # --- waiting for recorded changes (embedding apps, the benchmark, tests) ------------

    async def wait_documents(
        self,
        connector_id: str,
        predicate: Callable[[dict[DocStatus, int]], bool],
        timeout: float = 30.0,
    ) -> dict[DocStatus, int]:
        """Wait until the connector's document counts satisfy ``predicate`` (changes made
        by this instance's workers, aborts and re-queues wake the check)."""
        return await self.changes.wait_for(
            lambda: self.document_counts(connector_id), predicate, timeout
        )

    async def wait_connector(
        self,
        connector_id: str,
        predicate: Callable[[Connector], bool],
        timeout: float = 30.0,
    ) -> Connector:
        """Wait until the connector satisfies ``predicate`` (checked again whenever this
        instance records a change: a page, a heartbeat, a wait, an abort)."""
        return await self.changes.wait_for(
            lambda: self.get_connector(connector_id), predicate, timeout
        )

    async def wait_run(self, connector_id: str) -> None:
        """Wait until this instance's run of the connector (if any) has ended."""
        await self.engine.wait(connector_id)

    async def wait_deleted(self, connector_id: str) -> None:
        """Wait for this instance's delete cascade of the connector, if one runs."""
        await self.maintenance.wait_deleted(connector_id)
