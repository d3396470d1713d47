"""The connector operations: what the control API and an embedding application can do.

:class:`ConnectorService` is the one implementation of create, read, patch, delete, trigger,
abort and retry; the HTTP handlers (``syncd.api``) and :class:`syncd.Daemon`'s methods both
call it. Each operation validates its input, applies a pure state rule through the store
(``Store.mutate_connector``, a compare-and-set) and then tells the components of this instance
— and, by broadcast, of the others — what changed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import structlog

from syncd import rules
from syncd.errors import Aborted, NotFound, SyncdError, ValidationError
from syncd.http.paginator import AsyncCursorPaginator, CancelToken
from syncd.indexing.maintenance import QUEUE_CALL_TIMEOUT, Maintenance
from syncd.indexing.workers import Workers
from syncd.models import (
    ABORTED_ERROR,
    Connector,
    ConnectorStatus,
    DocStatus,
    Document,
    DocumentInput,
    PaginatorSettings,
    Rejection,
    Run,
    RunOutcome,
    RunTrigger,
    SyncStatus,
    new_id,
    utcnow,
)
from syncd.observability.logs import describe_error
from syncd.observability.metrics import Metrics
from syncd.pipeline.admission import Admission, Claimed
from syncd.pipeline.engine import SyncEngine
from syncd.pipeline.inputs import document_inputs
from syncd.plugins import Indexers, Registry
from syncd.queue.base import WorkQueue
from syncd.schema import spec
from syncd.service.changes import ChangeFeed
from syncd.service.cursors import decode_cursor, encode_cursor
from syncd.store.base import Store

log = structlog.get_logger("syncd.service.operations")

#: Control messages between instances.
MSG_ABORT = "abort"
MSG_CANCEL_INDEXING = "cancel_indexing"
MSG_WAKE = "wake"  # a manual trigger was queued: an instance with a free slot may start it
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
        wake: Callable[[], None] | None = None,
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
        self._wake = wake

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
        return c

    async def get_connector_with_counts(
        self, connector_id: str
    ) -> tuple[Connector, dict[DocStatus, int]]:
        """The connector and its document counts (one store read), or ``NotFound``."""
        found = await self._store.get_connector_with_counts(connector_id)
        if found is None:
            raise NotFound()
        return found

    async def list_connectors_with_counts(
        self,
        *,
        status: ConnectorStatus | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[tuple[Connector, dict[DocStatus, int]]], str | None]:
        """:meth:`list_connectors` with each connector's document counts (one store read)."""
        rows = await self._store.list_connectors_with_counts(
            status=status, limit=limit + 1, after=decode_cursor(cursor)
        )
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
            await self.broadcast({"type": MSG_CANCEL_INDEXING, "connector_id": connector_id})
        if before.status is not ConnectorStatus.DELETING or not self._maintenance.cascading(
            connector_id
        ):
            self._maintenance.start_cascade(connector_id)

    # --- syncs --------------------------------------------------------------------------

    async def trigger_sync(self, connector_id: str) -> str | None:
        """Start a manual sync; returns its run id (``Conflict`` per DESIGN.md §3).

        Without a free run slot in this instance (``[sync] max_concurrent_runs``) the
        request is stored instead (``sync_status = queued``) and ``None`` is returned: the
        first instance with a free slot starts it, in age order with the due schedules.
        """
        # Shielded: a caller cancelled after the claim committed must not leave the
        # connector `running` with no task; the claim and the start happen together.
        return await asyncio.shield(self._trigger(connector_id))

    async def _trigger(self, connector_id: str) -> str | None:
        run_id = new_id()
        now = utcnow()

        async def claim(slots: int, claimed: list[Claimed]) -> None:
            _, after = await self._store.mutate_connector(
                connector_id,
                lambda c: rules.trigger(c, run_id=run_id, owner=self._owner, now=now),
            )
            claimed.append((after, RunTrigger.MANUAL))

        # A failed claim (Conflict, NotFound) gives its slot back.
        if await self._admission.claim_and_start(claim) is None:
            await self._store.mutate_connector(connector_id, lambda c: rules.enqueue(c, now=now))
            log.info("service.sync_queued", connector_id=connector_id)
            await self._changes.notify(connector_id)
            if self._wake is not None:
                self._wake()  # this instance notes the waiting work; the others may start it
            await self.broadcast({"type": MSG_WAKE, "connector_id": connector_id})
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
        await self.broadcast(
            {"type": MSG_ABORT, "connector_id": connector_id, "run_id": run_id or ""}
        )
        trigger = RunTrigger.MANUAL
        with contextlib.suppress(SyncdError):
            run = await self._store.get_run(run_id) if run_id else None
            trigger = run.trigger if run is not None else trigger
        self._metrics.runs.labels(trigger=str(trigger), outcome=str(RunOutcome.ABORTED)).inc()
        await self._changes.notify(connector_id, run_id=run_id)
        return run_id

    async def broadcast(self, message: Mapping[str, str]) -> None:
        """Tell every other instance; a lost message is covered by the store polls (a run's
        heartbeat, the workers' lease renewal)."""
        try:
            await asyncio.wait_for(self._queue.publish(message), QUEUE_CALL_TIMEOUT)
        except (SyncdError, TimeoutError) as exc:
            log.warning(
                "service.broadcast_failed",
                message_type=message.get("type"),
                connector_id=message.get("connector_id"),
                error=str(exc) or type(exc).__name__,
            )

    async def apply_message(self, message: Mapping[str, str]) -> None:
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

    # --- preview ------------------------------------------------------------------------

    async def preview(self, body: Mapping[str, Any]) -> Preview:
        """Fetch the first pages of a connector body (``{"connector": {...}}``) or of an
        existing connector (``{"connector_id": "..."}``) the way a run would (its source, its
        paginator keys, from the start of a fresh crawl), writing nothing.

        ``pages`` (1 to 10, default 1) and ``timeout_seconds`` (1 to 60, default 10) bound it.
        ``ValidationError`` for a bad body, ``NotFound`` for an unknown connector. A source
        that fails, or the time limit, is the preview's result (``Preview.error``), not an
        exception. Cancelling the caller cancels the request in flight.
        """
        pages_max, timeout = _preview_options(body)
        existing = "connector_id" in body
        connector = await self._preview_connector(body)
        id_field = str(connector.source.get("id_field", "id"))
        token = CancelToken()
        # The token, not a cancellation, ends a preview that runs out of time: the paginator
        # turns it into Aborted whether it was fetching or sleeping between retries.
        deadline = asyncio.get_running_loop().call_later(timeout, token.cancel)
        request: Mapping[str, Any] | None = None
        pages: list[PreviewPage] = []
        try:
            # The engine builds the source as a run does: the shared transport, its secrets
            # registered for masking, the state of the last completed crawl.
            source = self._engine.build_source(connector, resuming=False, persist=existing)
            describe = getattr(source, "describe_request", None)
            request = describe(None) if callable(describe) else None
            paginator = AsyncCursorPaginator(
                source.fetch_page,
                max_retries=connector.page_retries,
                backoff_factor=connector.page_retry_backoff,
                retry_on_status=tuple(connector.retry_on_status),
                throttle_seconds=connector.throttle_seconds,
                cancel_token=token,
            )
            async for page in paginator:
                docs, rejected = document_inputs(page.records, id_field, connector.hash_fields)
                report = getattr(source, "last_page", None)
                found = PreviewPage(
                    len(page.records),
                    tuple(d.external_id for d in docs),
                    tuple(rejected),
                    page.next_cursor,
                    reason=getattr(report, "reason", None),
                    warnings=tuple(getattr(report, "warnings", ())),
                )
                if existing:
                    found = await self._compare(connector.id, docs, found)
                pages.append(found)
                if len(pages) >= pages_max:
                    break
        except Aborted:
            return Preview(request, tuple(pages), f"Preview stopped: time limit of {timeout:g} s")
        except Exception as exc:  # any source failure is what the preview found
            log.info("service.preview_failed", connector_id=connector.id, error=str(exc))
            return Preview(request, tuple(pages), describe_error(exc))
        finally:
            deadline.cancel()
        return Preview(request, tuple(pages))

    async def _preview_connector(self, body: Mapping[str, Any]) -> Connector:
        """The connector a preview names, or the one its ``connector`` body would create."""
        if "connector_id" in body:
            connector_id = body["connector_id"]
            if spec.text_problem(connector_id):  # no store holds such an id
                raise NotFound()
            return await self.get_connector(connector_id)
        try:
            fields = spec.parse_create(
                body["connector"], defaults=self._defaults, kinds=self._registry
            )
        except ValidationError as exc:
            raise ValidationError(
                {"connector" if k == "body" else f"connector.{k}": v for k, v in exc.errors.items()}
            ) from None
        now = utcnow()
        return Connector(id=f"preview-{new_id()}", created_at=now, updated_at=now, **fields)

    async def _compare(
        self, connector_id: str, docs: list[DocumentInput], page: PreviewPage
    ) -> PreviewPage:
        """``page`` with its ids split into new, changed and unchanged against the store (one
        lookup per id: a preview reads at most ten pages)."""
        new: list[str] = []
        changed: list[str] = []
        unchanged: list[str] = []
        for doc in docs:
            stored = await self._store.get_document(connector_id, doc.external_id)
            if stored is None:
                new.append(doc.external_id)
            elif stored.content_hash == doc.content_hash:
                unchanged.append(doc.external_id)
            else:
                changed.append(doc.external_id)
        return replace(page, new=tuple(new), changed=tuple(changed), unchanged=tuple(unchanged))


def _page(rows: list[Any], limit: int, key: Any) -> tuple[list[Any], str | None]:
    """The first ``limit`` of ``rows`` (fetched ``limit + 1``) and the next page's cursor."""
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(key(rows[-1])) if more and rows else None)


# --- preview ------------------------------------------------------------------------------

PREVIEW_PAGES_MAX = 10
PREVIEW_TIMEOUT_MAX = 60
PREVIEW_FIELDS = ("connector", "connector_id", "pages", "timeout_seconds")


@dataclass(frozen=True)
class PreviewPage:
    """One fetched page: its record count, the external ids of its records, the records
    rejected (index in the page and reason), the cursor of the page after it, why the crawl
    continues or ends there and, on the first page, the configured paths its response lacks
    (for a source that says: the ``http`` source's ``last_page``). For an
    existing connector its ids are also split by how they compare with the stored documents
    (``None`` for a connector body, which has none)."""

    records: int
    ids: tuple[str, ...]
    rejected: tuple[Rejection, ...]
    next_cursor: str | None
    reason: str | None = None
    warnings: tuple[str, ...] = ()
    new: tuple[str, ...] | None = None
    changed: tuple[str, ...] | None = None
    unchanged: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Preview:
    """What a preview found: the first request (``method``, ``url``, ``headers``, secrets
    masked; ``None`` for a source that cannot describe it), the pages fetched, and why it
    stopped early, if it did (the source failed, or the time limit), keeping the pages
    fetched before."""

    request: Mapping[str, Any] | None
    pages: tuple[PreviewPage, ...]
    error: str | None = None


def _preview_options(body: Mapping[str, Any]) -> tuple[int, float]:
    """``(pages, timeout_seconds)`` of a preview body, after checking its shape."""
    errors: dict[str, str] = {}
    spec.check_unknown(body, PREVIEW_FIELDS, "", errors)
    if ("connector" in body) == ("connector_id" in body):
        errors["body"] = "Give exactly one of 'connector' or 'connector_id'"
    elif "connector_id" in body and not isinstance(body["connector_id"], str):
        errors["connector_id"] = "Must be a string"
    pages, timeout = body.get("pages", 1), body.get("timeout_seconds", 10)
    if isinstance(pages, bool) or not isinstance(pages, int) or not 1 <= pages <= PREVIEW_PAGES_MAX:
        errors["pages"] = f"Must be an integer between 1 and {PREVIEW_PAGES_MAX}"
    number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
    if not number or not 1 <= timeout <= PREVIEW_TIMEOUT_MAX:
        errors["timeout_seconds"] = f"Must be a number between 1 and {PREVIEW_TIMEOUT_MAX}"
    if errors:
        raise ValidationError(errors)
    return pages, float(timeout)
