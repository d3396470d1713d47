"""The composition root: wires store, queue, transport, sync engine, scheduler, workers and API.

Start order: store (migrated) → queue → transport → queue rebuilt from the store → workers →
control-message listener → scheduler → API. Stop is the reverse: the API stops taking
requests, the scheduler stops, each run ends at its next page boundary (``interrupted``),
indexing finishes within the grace period, then connections close.

The operations here (``create_connector``, ``trigger_sync``, ``abort_sync``, …) are the same
for the HTTP API and for applications that embed the daemon.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

import structlog

from syncd import rules, spec
from syncd.config import Config
from syncd.errors import ConfigError, NotFound, SyncdError, ValidationError
from syncd.http.transport import Timeouts, Transport, resolve_timeouts
from syncd.indexers import BUILTIN_INDEXERS
from syncd.indexers.base import Indexer, IndexerContext, IndexerFactory
from syncd.metrics import Metrics
from syncd.models import (
    ABORTED_ERROR,
    Connector,
    ConnectorStatus,
    DocStatus,
    Document,
    Run,
    new_id,
    utcnow,
)
from syncd.queue import WorkQueue, open_queue
from syncd.scheduler import Scheduler
from syncd.sources import BUILTIN_SOURCES
from syncd.sources.base import SourceFactory
from syncd.sources.secrets import register_connector_secrets
from syncd.store import Store, open_store
from syncd.sync import SyncEngine
from syncd.workers import Workers

log = structlog.get_logger("syncd.daemon")

_ABORT = "abort"
_CANCEL_INDEXING = "cancel_indexing"
#: Bound on a queue call made while answering an abort or a delete (seconds).
QUEUE_CALL_TIMEOUT = 1.0
DELETED_ERROR = "Connector deleted"


# The cursor of an empty value (a document stored with an empty id before ids were checked):
# one character, which no base64 text is, so it stands for nothing else.
_EMPTY_CURSOR = "~"


def encode_cursor(value: str) -> str:
    """An opaque, non-empty list cursor for ``value``."""
    if not value:
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


class Daemon:
    """A running syncd instance: ``async with Daemon(config) as daemon: ...``."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        instance_id: str | None = None,
        api_sockets: Sequence[socket.socket] = (),
        serve_api: bool = True,
    ) -> None:
        self.config = config or Config()
        self.instance_id = instance_id or self.config.daemon.instance_id or new_id()
        # Which process incarnation owns a run: an instance id may be fixed in the
        # configuration, so a run orphaned by a crash must not look owned after a restart.
        self.owner = self._new_owner()
        self.metrics = Metrics()
        self._api_sockets = list(api_sockets)
        self._serve_api = serve_api
        self._sources: dict[str, SourceFactory] = dict(BUILTIN_SOURCES)
        self._indexers: dict[str, IndexerFactory] = dict(BUILTIN_INDEXERS)
        self._indexer_cache: dict[str, tuple[Any, Indexer]] = {}
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._cascades: dict[str, asyncio.Task[None]] = {}
        self._started = False
        # Notified whenever documents change state here, so that callers (tests, the
        # benchmark, embedding apps) can wait for a condition instead of polling.
        self._changed = asyncio.Condition()
        self._rebuild = asyncio.Event()
        # Connectors whose queue entries an abort or a delete could not purge (the queue was
        # unreachable): purged before the next rebuild. Meanwhile their entries are harmless,
        # since claiming a document is a compare-and-set on `pending`.
        self._owed_purges: set[str] = set()
        self.api_runner: Any = None
        self.store: Store
        self.queue: WorkQueue
        self.transport: Transport
        self.engine: SyncEngine
        self.workers: Workers
        self.scheduler: Scheduler

    # --- plugins --------------------------------------------------------------------

    def register_source(self, name: str, factory: SourceFactory) -> None:
        """Add a source type usable as ``{"type": name, ...}`` in a connector's source."""
        self._sources[name] = factory

    def register_indexer(self, name: str, factory: IndexerFactory) -> None:
        """Add an indexer type usable as ``{"type": name, ...}`` in a connector's indexer."""
        self._indexers[name] = factory

    @property
    def source_types(self) -> frozenset[str]:
        """Known source types (built-in, entry points and registered)."""
        return frozenset(self._sources)

    @property
    def indexer_types(self) -> frozenset[str]:
        """Known indexer types (built-in, entry points and registered)."""
        return frozenset(self._indexers)

    def _load_entry_points(self) -> None:
        from importlib.metadata import entry_points

        for group, registry in (
            ("syncd.sources", self._sources),
            ("syncd.indexers", self._indexers),
        ):
            for ep in entry_points(group=group):
                if ep.name not in registry:
                    try:
                        registry[ep.name] = ep.load()
                    except Exception as exc:  # a broken plugin must not stop the daemon
                        log.error(
                            "plugin failed to load", group=group, name=ep.name, error=str(exc)
                        )

    def _source_factory(self, kind: str) -> SourceFactory:
        try:
            return self._sources[kind]
        except KeyError:
            raise ConfigError("source.type", f"unknown source type {kind!r}") from None

    def _indexed_on_commit(self, connector: Connector) -> bool:
        """Whether the connector's indexer is done once the store holds the document (a
        class attribute of its factory: the indexer itself is not built for this)."""
        factory = self._indexers.get(str(connector.indexer.get("type", "store")))
        return bool(getattr(factory, "indexed_on_commit", False))

    def _indexer_for(self, connector: Connector) -> Indexer:
        cached = self._indexer_cache.get(connector.id)
        key = (connector.updated_at, dict(connector.indexer))
        if cached is not None and cached[0] == key:
            return cached[1]
        kind = str(connector.indexer.get("type", "store"))
        factory = self._indexers.get(kind)
        if factory is None:
            raise ConfigError("indexer.type", f"unknown indexer type {kind!r}")
        register_connector_secrets({}, connector.indexer)
        indexer = factory(connector.indexer, IndexerContext(connector.id, self.transport))
        self._indexer_cache[connector.id] = (key, indexer)
        return indexer

    # --- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> Daemon:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _new_owner(self) -> str:
        return f"{self.instance_id}/{secrets.token_hex(3)}"

    async def start(self) -> None:
        """Open the backends and start every component on the running loop."""
        cfg = self.config
        self.owner = self._new_owner()
        self._load_entry_points()
        store_options: dict[str, Any] = {}
        if cfg.store.url.startswith(("postgresql://", "postgres://")):
            store_options = {
                "statement_cache_size": cfg.store.statement_cache_size,
                "min_size": cfg.store.pool_min_size,
                "max_size": cfg.store.pool_max_size,
            }
        self.store = open_store(cfg.store.url, **store_options)
        await self.store.open()
        try:
            self.queue = open_queue(
                cfg.queue.url, prefix=cfg.queue.prefix, instance_id=self.instance_id
            )
            await self.queue.open()
            timeouts = resolve_timeouts(
                None, config=Timeouts(cfg.http.timeout_read, cfg.http.timeout_connect)
            )
            self.transport = Transport(
                timeouts=timeouts,
                on_retry=lambda exc, attempt: self.metrics.transport_retries.inc(),
                block_private_addresses=cfg.http.block_private_addresses,
            )
            await self.transport.open()
        except BaseException:
            await self.store.close()
            raise
        self.engine = SyncEngine(
            store=self.store,
            queue=self.queue,
            transport=self.transport,
            source_factory=self._source_factory,
            indexed_on_commit=self._indexed_on_commit,
            metrics=self.metrics,
            heartbeat_seconds=cfg.sync.heartbeat_seconds,
            on_change=self._notify_changed,
            on_push_failed=self._request_rebuild,
        )
        self.workers = Workers(
            store=self.store,
            queue=self.queue,
            indexer_for=self._indexer_for,
            metrics=self.metrics,
            concurrency=cfg.workers.concurrency,
            batch_size=cfg.workers.batch_size,
            index_timeout=cfg.workers.index_timeout_seconds,
            lease_seconds=cfg.workers.lease_seconds,
            on_change=self._notify_changed,
            on_push_failed=self._request_rebuild,
        )
        self.scheduler = Scheduler(
            store=self.store,
            start_run=self.engine.start,
            owner=self.owner,
            tick_seconds=cfg.scheduler.tick_seconds,
            stale_lock_seconds=cfg.scheduler.stale_lock_seconds,
        )
        # From here on, stop() can undo whatever was started: a failure below (the API
        # address taken, the store gone) leaves nothing running behind the exception.
        self._started = True
        try:
            await self._register_stored_secrets()
            await self._rebuild_queue()
            await self._resume_cascades()
            self.workers.start()
            self._spawn("control-messages", self._listen())
            self._spawn("queue-lost", self._watch_queue_loss())
            self._spawn("queue-rebuild", self._rebuild_when_asked())
            self._spawn("scheduler", self.scheduler.run())
            self._spawn("metrics-refresh", self._refresh_metrics())
            if self._serve_api:
                from syncd.api import build_app, start_api

                self.api_runner = await start_api(
                    build_app(self), cfg.api.listen, token=cfg.api.token, socks=self._api_sockets
                )
        except BaseException:
            await self.stop()
            raise
        log.info(
            "syncd started", instance_id=self.instance_id, owner=self.owner, api=self.api_address
        )

    async def stop(self, grace: float | None = None) -> None:
        """Stop in reverse order; runs are interrupted at their next page boundary."""
        if not self._started:
            return
        self._started = False
        grace = self.config.daemon.grace_seconds if grace is None else grace
        if self.api_runner is not None:
            await self.api_runner.cleanup()
            self.api_runner = None
        # The scheduler finishes the tick in progress (so a run it claims is started and then
        # interrupted by the engine's stop, never left claimed with no task).
        self.scheduler.stop()
        scheduler = self._tasks.pop("scheduler", None)
        if scheduler is not None:
            _, pending = await asyncio.wait({scheduler}, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(scheduler, return_exceptions=True)
        await self.engine.stop(grace)
        await self.workers.stop(grace)
        for task in [*self._tasks.values(), *self._cascades.values()]:
            task.cancel()
        await asyncio.gather(
            *self._tasks.values(), *self._cascades.values(), return_exceptions=True
        )
        self._tasks.clear()
        self._cascades.clear()
        await self.transport.close()
        await self.queue.close()
        await self.store.close()
        log.info("syncd stopped", instance_id=self.instance_id)

    @property
    def api_address(self) -> str | None:
        """Where the control API listens (``http://host:port`` or ``unix:/path``), if it does."""
        if self.api_runner is None:
            return None
        addresses = getattr(self.api_runner, "addresses", [])
        if not addresses:
            return None
        addr = addresses[0]
        if isinstance(addr, str):
            return f"unix:{addr}"
        host, port = addr[0], addr[1]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"

    def _spawn(self, name: str, coro: Any) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks[name] = task
        task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("background task died", task=task.get_name(), error=str(task.exception()))

    async def _rebuild_queue(self) -> None:
        """Re-enqueue pending documents: the queue may have lost them (in-process queue,
        restart); duplicates are harmless because claiming is a compare-and-set."""
        after: tuple[str, str] | None = None
        total = 0
        while True:
            rows = await self.store.pending_documents(after=after, limit=5000)
            if not rows:
                break
            by_connector: dict[str, list[str]] = {}
            for cid, ext in rows:
                by_connector.setdefault(cid, []).append(ext)
            for cid, ids in by_connector.items():
                await self.queue.push(cid, ids)
            total += len(rows)
            after = rows[-1]
        if total:
            log.info("queue rebuilt from store", documents=total)

    def _request_rebuild(self) -> None:
        """Pending documents may be missing from the queue (a push failed, the queue lost
        its data): have the queue rebuilt from the store."""
        self._rebuild.set()

    async def _watch_queue_loss(self) -> None:
        while True:
            await self.queue.wait_lost()
            self._request_rebuild()

    async def _rebuild_when_asked(self) -> None:
        """Re-push the store's pending documents when asked, until it succeeds."""
        while True:
            await self._rebuild.wait()
            self._rebuild.clear()
            try:
                await self._pay_owed_purges()
                await self._rebuild_queue()
            except SyncdError as exc:
                log.warning("queue not rebuilt yet; retrying", error=str(exc))
                self._rebuild.set()
                await asyncio.sleep(1.0)

    async def _purge(self, connector_id: str) -> None:
        """Drop the connector's queue entries now, or as soon as the queue answers: an abort
        or a delete never waits on the queue (the store already decided)."""
        try:
            await asyncio.wait_for(self.queue.purge(connector_id), QUEUE_CALL_TIMEOUT)
        except (SyncdError, TimeoutError) as exc:
            log.warning(
                "queue purge deferred until the queue answers",
                connector_id=connector_id,
                error=str(exc) or type(exc).__name__,
            )
            self._owed_purges.add(connector_id)
            self._request_rebuild()

    async def _pay_owed_purges(self) -> None:
        # The rebuild that follows re-pushes every pending document, so a purge that lands
        # after a new run enqueued documents loses none of them.
        for cid in list(self._owed_purges):
            await self.queue.purge(cid)
            self._owed_purges.discard(cid)

    async def _broadcast(self, message: Mapping[str, str]) -> None:
        """Tell every other instance; a lost message is covered by the store polls (a run's
        heartbeat, the workers' lease renewal)."""
        try:
            await asyncio.wait_for(self.queue.publish(message), QUEUE_CALL_TIMEOUT)
        except (SyncdError, TimeoutError) as exc:
            log.warning(
                "broadcast failed",
                message_type=message.get("type"),
                connector_id=message.get("connector_id"),
                error=str(exc) or type(exc).__name__,
            )

    async def _register_stored_secrets(self) -> None:
        """Every stored connector's secrets are masked before anything logs or runs."""
        after: str | None = None
        while True:
            rows = await self.store.list_connectors(limit=100, after=after)
            for c in rows:
                register_connector_secrets(c.source, c.indexer)
            if len(rows) < 100:
                return
            after = rows[-1].id

    async def _resume_cascades(self) -> None:
        after: str | None = None
        while True:
            rows = await self.store.list_connectors(
                status=ConnectorStatus.DELETING, limit=100, after=after
            )
            for c in rows:
                self._start_cascade(c.id)
            if len(rows) < 100:
                return
            after = rows[-1].id

    async def _listen(self) -> None:
        """Apply control messages from every instance (this one included)."""
        async for message in self.queue.messages():
            kind = message.get("type")
            cid = message.get("connector_id", "")
            if kind == _ABORT:
                self.engine.abort_local(cid, message.get("run_id") or None)
            if kind in (_ABORT, _CANCEL_INDEXING):
                # Cancels only indexing whose documents the store took away, so a late
                # message never touches documents of a run claimed after it.
                try:
                    await self.workers.cancel_connector(cid)
                except SyncdError as exc:
                    log.warning("indexing not cancelled", connector_id=cid, error=str(exc))

    async def _refresh_metrics(self) -> None:
        while True:
            try:
                self.metrics.set_queue_depth(await self.queue.depth())
                totals: dict[str, int] = {str(s): 0 for s in DocStatus}
                after: str | None = None
                for _ in range(10):
                    rows = await self.store.list_connectors(limit=100, after=after)
                    for c in rows:
                        for status, n in (await self.store.document_counts(c.id)).items():
                            totals[str(status)] += n
                    if len(rows) < 100:
                        break
                    after = rows[-1].id
                self.metrics.set_document_counts(totals)
            except Exception as exc:
                # A refresh that fails shows stale figures; it never ends the refreshes.
                log.warning(
                    "metrics refresh failed",
                    error=str(exc),
                    exc_info=not isinstance(exc, SyncdError),
                )
            await asyncio.sleep(5.0)

    # --- operations -----------------------------------------------------------------

    def _defaults(self) -> spec.SyncDefaults:
        s = self.config.sync
        return spec.SyncDefaults(
            page_retries=s.page_retries,
            page_retry_backoff=s.page_retry_backoff,
            throttle_seconds=s.throttle_seconds,
            retry_on_status=tuple(s.retry_on_status),
        )

    async def create_connector(self, body: Mapping[str, Any]) -> Connector:
        """Validate and create a connector (``ValidationError``, ``NameConflict``)."""
        fields = spec.parse_create(
            body,
            defaults=self._defaults(),
            source_types=self.source_types,
            indexer_types=self.indexer_types,
        )
        now = utcnow()
        connector = Connector(id=new_id(), created_at=now, updated_at=now, **fields)
        connector = replace(connector, next_run_at=rules.next_run_at(connector, now))
        register_connector_secrets(connector.source, connector.indexer)
        return await self.store.create_connector(connector)

    async def get_connector(self, connector_id: str) -> Connector:
        """The connector, or ``NotFound``."""
        c = await self.store.get_connector(connector_id)
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
        rows = await self.store.list_connectors(
            status=status, limit=limit + 1, after=decode_cursor(cursor)
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (encode_cursor(rows[-1].id) if more and rows else None)

    async def update_connector(self, connector_id: str, body: Mapping[str, Any]) -> Connector:
        """PATCH a connector (``NotFound``, ``Conflict``, ``ValidationError``)."""
        await self.get_connector(connector_id)  # 404 before 422, like every {id} route
        changes = spec.parse_patch(
            body, source_types=self.source_types, indexer_types=self.indexer_types
        )
        register_connector_secrets(changes.get("source") or {}, changes.get("indexer") or {})
        now = utcnow()
        _, after = await self.store.mutate_connector(
            connector_id, lambda c: rules.patch(c, changes, now=now)
        )
        self._indexer_cache.pop(connector_id, None)
        return after

    async def delete_connector(self, connector_id: str) -> None:
        """Mark ``deleting`` and cascade in the background (idempotent while deleting)."""
        now = utcnow()
        # Its documents leave `pending`/`running` in the same transaction, so that indexing
        # in flight anywhere is cancelled (below, and by the lease renewal of each instance).
        before, _ = await self.store.mutate_connector(
            connector_id, lambda c: rules.begin_delete(c, now=now), fail_documents=DELETED_ERROR
        )
        await self.workers.cancel_connector(connector_id)
        if before.status is not ConnectorStatus.DELETING:
            await self._broadcast({"type": _CANCEL_INDEXING, "connector_id": connector_id})
        if before.status is not ConnectorStatus.DELETING or connector_id not in self._cascades:
            self._start_cascade(connector_id)

    def _start_cascade(self, connector_id: str) -> None:
        if connector_id in self._cascades:
            return
        task = asyncio.create_task(self._cascade(connector_id), name=f"delete:{connector_id}")
        self._cascades[connector_id] = task

    async def _cascade(self, connector_id: str) -> None:
        try:
            await self.store.delete_connector(connector_id)
            self._indexer_cache.pop(connector_id, None)
            log.info("connector deleted", connector_id=connector_id)
            await self._purge(connector_id)
        except SyncdError as exc:
            # Left as `deleting`: the next start (or DELETE) resumes the cascade.
            log.error("delete cascade failed", connector_id=connector_id, error=str(exc))
        finally:
            self._cascades.pop(connector_id, None)

    async def wait_deleted(self, connector_id: str) -> None:
        """Wait for this instance's delete cascade of the connector, if one runs."""
        task = self._cascades.get(connector_id)
        if task is not None:
            await asyncio.wait({task})

    async def trigger_sync(self, connector_id: str) -> str:
        """Start a manual sync; returns its run id (``Conflict`` per DESIGN.md §3)."""
        # Shielded: a caller cancelled after the claim committed must not leave the
        # connector `running` with no task; the claim and the start happen together.
        return await asyncio.shield(self._trigger(connector_id))

    async def _trigger(self, connector_id: str) -> str:
        run_id = new_id()
        now = utcnow()
        _, after = await self.store.mutate_connector(
            connector_id,
            lambda c: rules.trigger(c, run_id=run_id, owner=self.owner, now=now),
        )
        self.engine.start(after, "manual")
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
        before, _ = await self.store.mutate_connector(
            connector_id, lambda c: rules.abort(c, now=now), fail_documents=ABORTED_ERROR
        )
        run_id = before.run_id
        # Local first (no round trip), then the queue, whose failures never undo the abort.
        self.engine.abort_local(connector_id, run_id)
        await self.workers.cancel_connector(connector_id)
        await self._purge(connector_id)
        await self._broadcast(
            {"type": _ABORT, "connector_id": connector_id, "run_id": run_id or ""}
        )
        trigger = "manual"
        with contextlib.suppress(SyncdError):
            run = await self.store.get_run(run_id) if run_id else None
            trigger = str(run.trigger) if run is not None else trigger
        self.metrics.runs.labels(trigger=trigger, outcome="aborted").inc()
        await self._notify_changed()
        return run_id

    async def _notify_changed(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_documents(
        self,
        connector_id: str,
        predicate: Callable[[dict[DocStatus, int]], bool],
        timeout: float = 30.0,
    ) -> dict[DocStatus, int]:
        """Wait until the connector's document counts satisfy ``predicate`` (changes made
        by this instance's workers, aborts and re-queues wake the check)."""
        async with asyncio.timeout(timeout), self._changed:
            while not predicate(counts := await self.document_counts(connector_id)):
                await self._changed.wait()
        return counts

    async def wait_connector(
        self,
        connector_id: str,
        predicate: Callable[[Connector], bool],
        timeout: float = 30.0,
    ) -> Connector:
        """Wait until the connector satisfies ``predicate`` (checked again whenever this
        instance records a change: a page, a heartbeat, a wait, an abort)."""
        async with asyncio.timeout(timeout), self._changed:
            while not predicate(connector := await self.get_connector(connector_id)):
                await self._changed.wait()
        return connector

    async def wait_run(self, connector_id: str) -> None:
        """Wait until this instance's run of the connector (if any) has ended."""
        await self.engine.wait(connector_id)

    async def list_runs(
        self, connector_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> tuple[list[Run], str | None]:
        """A page of the connector's runs, newest first."""
        await self.get_connector(connector_id)
        rows = await self.store.list_runs(
            connector_id, limit=limit + 1, before=decode_cursor(cursor)
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (encode_cursor(rows[-1].id) if more and rows else None)

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
        rows = await self.store.list_documents(
            connector_id, status=status, limit=limit + 1, after=decode_cursor(cursor)
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (encode_cursor(rows[-1].external_id) if more and rows else None)

    async def get_document(self, connector_id: str, external_id: str) -> Document:
        """One document with its payload (``NotFound``)."""
        await self.get_connector(connector_id)
        doc = await self.store.get_document(connector_id, external_id)
        if doc is None:
            raise NotFound("Document not found")
        return doc

    async def retry_failed(self, connector_id: str) -> int:
        """Re-queue the connector's failed documents; how many."""
        await self.get_connector(connector_id)
        ids = await self.store.requeue_documents(connector_id, now=utcnow())
        if ids:
            try:
                await self.queue.push(connector_id, ids)
            except SyncdError as exc:
                # Pending in the store: the rebuild queues them once the queue answers.
                log.warning("re-queued documents not pushed yet", error=str(exc))
                self._request_rebuild()
        await self._notify_changed()
        return len(ids)

    async def document_counts(self, connector_id: str) -> dict[DocStatus, int]:
        """Documents per status."""
        return await self.store.document_counts(connector_id)

    async def readiness(self) -> dict[str, str]:
        """``{"store": "ok"|error, "queue": "ok"|error}``."""
        result: dict[str, str] = {}
        for name, ping in (("store", self.store.ping), ("queue", self.queue.ping)):
            try:
                await asyncio.wait_for(ping(), 5.0)
                result[name] = "ok"
            except (SyncdError, TimeoutError, OSError) as exc:
                result[name] = str(exc) or type(exc).__name__
        return result


async def serve(config: Config) -> int:
    """Run the daemon until SIGTERM/SIGINT; the process's exit code. See ``syncd.service``."""
    from syncd.runner import run_service

    return await run_service(config)
