"""The composition root: wires store, queue, transport, sync engine, run slots (admission),
scheduler, workers, maintenance, the connector service, the instance heartbeat
(:mod:`~syncd.daemon.instances`, ``GET /status``) and the API; starts and stops them in order;
supervises the side tasks.

Start order: store (migrated) → queue → transport → secrets of stored connectors registered →
queue rebuilt from the store → delete cascades resumed → workers → side tasks (control
messages, queue repair, scheduler, metrics, events, instance heartbeat) → API. Stop is the
reverse: the API stops taking requests, the scheduler finishes its tick, each run ends at its
next page boundary (``interrupted``), indexing finishes within the grace period, then
connections close.

The connector operations live in :class:`syncd.service.operations.ConnectorService`; the
methods of the same names on a daemon (``create_connector``, ``trigger_sync``, ``abort_sync``,
…) are the embedding API (:mod:`~syncd.daemon.embedding`) and delegate to it.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import structlog

from syncd.api import build_app, start_api, views
from syncd.config.loader import Config
from syncd.daemon.embedding import EmbeddingApi
from syncd.daemon.instances import Instances
from syncd.daemon.metrics_poller import refresh_forever
from syncd.daemon.readiness import Readiness
from syncd.daemon.transport import daemon_transport
from syncd.http.budget import HostBudgets
from syncd.http.budget_redis import open_budgets
from syncd.http.transport import Transport
from syncd.indexers.base import IndexerContext, IndexerFactory, IndexerKind
from syncd.indexers.postgres.pool import PostgresPools
from syncd.indexing.lease import Leases
from syncd.indexing.maintenance import Maintenance
from syncd.indexing.sweeper import Sweeper
from syncd.indexing.workers import Workers
from syncd.models import new_id, utcnow
from syncd.observability.metrics import Metrics, watch_loop_lag
from syncd.pipeline.admission import Admission
from syncd.pipeline.builder import SourceBuilder
from syncd.pipeline.engine import SyncEngine
from syncd.plugins import Indexers, Registry
from syncd.queue import WorkQueue, open_queue
from syncd.runtime.changes import ChangeFeed
from syncd.runtime.outage import OutagePolicy
from syncd.runtime.pacing import Pacer
from syncd.runtime.tasks import Supervisor
from syncd.scheduler import Scheduler
from syncd.service.control import Control
from syncd.service.events import EventHub
from syncd.service.operations import ConnectorService
from syncd.service.preview import Previewer
from syncd.sources.base import SourceFactory, SourceKind
from syncd.store import Store, open_store

log = structlog.get_logger("syncd.daemon.core")


class Daemon(EmbeddingApi):
    """A running syncd instance: ``async with Daemon(config) as daemon: ...``.

    It wires the components and runs their lifecycle; the connector operations it offers an
    embedding application are :class:`~syncd.daemon.embedding.EmbeddingApi`'s."""

    #: Seconds between two heartbeats of this instance in the store (``GET /status``).
    instance_heartbeat_seconds: float = 5.0

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
        self.metrics = Metrics(per_connector=self.config.metrics.per_connector)
        self.registry = Registry.builtin()
        self.changes = ChangeFeed()
        # The API's requests go before the crawls' and workers' steps on the one loop.
        self.pacer = Pacer()
        self._api_sockets = list(api_sockets)
        self._serve_api = serve_api
        self._started = False
        self.started_at: datetime | None = None
        # Resolved when a side task dies for good: the service runner then exits non-zero.
        self.fatal: asyncio.Future[str] | None = None
        self.api_runner: Any = None
        self.store: Store
        self.queue: WorkQueue
        self.transport: Transport
        self.budgets: HostBudgets
        self.engine: SyncEngine
        self.admission: Admission
        self.workers: Workers
        self.sweeper: Sweeper
        self.scheduler: Scheduler
        self.maintenance: Maintenance
        self.control: Control
        self.service: ConnectorService
        self.previews: Previewer
        self.events: EventHub
        self.instances: Instances
        self._supervisor: Supervisor

    # --- plugins ------------------------------------------------------------------------

    def register_source(self, name: str, factory: SourceKind | SourceFactory) -> None:
        """Add a source kind usable as ``{"type": name, ...}`` in a connector's source."""
        self.registry.register_source(name, factory)

    def register_indexer(self, name: str, factory: IndexerKind | IndexerFactory) -> None:
        """Add an indexer kind usable as ``{"type": name, ...}`` in a connector's indexer."""
        self.registry.register_indexer(name, factory)

    @property
    def source_types(self) -> frozenset[str]:
        """Known source types (built-in, entry points and registered)."""
        return self.registry.source_names

    @property
    def indexer_types(self) -> frozenset[str]:
        """Known indexer types (built-in, entry points and registered)."""
        return self.registry.indexer_names

    # --- lifecycle ----------------------------------------------------------------------

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
        self.started_at = utcnow()
        self.fatal = asyncio.get_running_loop().create_future()
        self.registry.load_entry_points()
        self.store = self._open_store()
        await self.store.open()
        try:
            self.queue = open_queue(
                cfg.queue.url, prefix=cfg.queue.prefix, instance_id=self.instance_id
            )
            await self.queue.open()
            # Per-host budgets live beside the queue: in process, or shared through Redis.
            self.budgets = open_budgets(cfg.queue.url, cfg.http.hosts, prefix=cfg.queue.prefix)
            await self.budgets.open()
            self.transport = daemon_transport(
                cfg,
                budgets=self.budgets,
                on_retry=lambda exc, attempt: self.metrics.transport_retries.inc(),
            )
            await self.transport.open()
        except BaseException:
            await self.store.close()
            raise
        self._wire()
        # From here on, stop() can undo whatever was started: a failure below (the API
        # address taken, the store gone) leaves nothing running behind the exception.
        self._started = True
        try:
            await self.service.register_stored_secrets()
            await self.maintenance.rebuild_queue()
            await self.maintenance.resume_cascades()
            self.workers.start()
            spawn = self._supervisor.spawn
            spawn("control-messages", self.control.apply_messages)
            spawn("events-notices", self.events.take_notices)
            spawn("events", self.events.run)
            spawn("queue-lost", self.maintenance.watch_queue_loss)
            spawn("queue-rebuild", self.maintenance.rebuild_when_asked)
            spawn("scheduler", self.scheduler.run)
            spawn("metrics-refresh", lambda: refresh_forever(self.metrics, self.store, self.queue))
            spawn("loop-lag", lambda: watch_loop_lag(self.metrics))
            spawn("instance-heartbeat", self.instances.beat_forever)
            await self.readiness_probes.prime()
            if self._serve_api:
                self.api_runner = await start_api(
                    build_app(self.service, self, cfg.api, access=cfg.log.access, pacer=self.pacer),
                    cfg.api.listen,
                    token=cfg.api.token,
                    socks=self._api_sockets,
                )
        except BaseException:
            await self.stop()
            raise
        log.info(
            "daemon.started", instance_id=self.instance_id, owner=self.owner, api=self.api_address
        )

    def _open_store(self) -> Store:
        cfg = self.config.store
        options: dict[str, Any] = {}
        if cfg.url.startswith(("postgresql://", "postgres://")):
            options = {
                "statement_cache_size": cfg.statement_cache_size,
                "min_size": cfg.pool_min_size,
                "max_size": cfg.pool_max_size,
            }
        return open_store(cfg.url, **options)

    def _wire(self) -> None:
        """Build the components on the open backends; only this method knows them all."""
        cfg = self.config
        notify = self.changes.notify
        self.pools = PostgresPools(max_size=cfg.workers.concurrency)
        indexers = Indexers(
            self.registry,
            lambda connector_id: IndexerContext(connector_id, self.transport, self.pools),
        )
        self.indexers = indexers

        def deleted(connector_id: str) -> None:
            indexers.forget(connector_id)
            self.changes.record(connector_id)  # the `deleted` event

        self.maintenance = Maintenance(store=self.store, queue=self.queue, on_deleted=deleted)
        # How long runs and workers wait out an unavailable store or queue (issue 23).
        outage = OutagePolicy(budget=cfg.sync.outage_seconds)
        sources = SourceBuilder(store=self.store, transport=self.transport, registry=self.registry)
        self.engine = SyncEngine(
            store=self.store,
            queue=self.queue,
            sources=sources,
            registry=self.registry,
            metrics=self.metrics,
            heartbeat_seconds=cfg.sync.heartbeat_seconds,
            maintenance=self.maintenance,
            on_change=notify,
            pacer=self.pacer,
            outage=outage,
        )
        self.admission = Admission(
            self.engine,
            max_runs=cfg.sync.max_concurrent_runs,
            # A freed slot wakes the scheduler (built below) when work waits for one.
            on_slot_free=lambda: self.scheduler.slot_freed(),
        )
        leases = Leases(
            store=self.store,
            queue=self.queue,
            indexer_for=indexers,
            metrics=self.metrics,
            settings=cfg.workers,
            maintenance=self.maintenance,
            on_change=notify,
            outage=outage,
        )
        self.sweeper = Sweeper(
            store=self.store,
            maintenance=self.maintenance,
            settings=cfg.workers,
            deleted_retention=timedelta(days=cfg.documents.deleted_retention_days),
        )
        self.workers = Workers(
            queue=self.queue,
            leases=leases,
            sweeper=self.sweeper,
            settings=cfg.workers,
            pacer=self.pacer,
            outage=outage,
        )
        self.scheduler = Scheduler(
            store=self.store,
            admission=self.admission,
            owner=self.owner,
            tick_seconds=cfg.scheduler.tick_seconds,
            stale_lock_seconds=cfg.scheduler.stale_lock_seconds,
        )
        self.control = Control(
            queue=self.queue, engine=self.engine, workers=self.workers, wake=self.scheduler.wake
        )
        self.service = ConnectorService(
            store=self.store,
            queue=self.queue,
            engine=self.engine,
            admission=self.admission,
            workers=self.workers,
            registry=self.registry,
            indexers=indexers,
            maintenance=self.maintenance,
            changes=self.changes,
            metrics=self.metrics,
            defaults=cfg.sync.paginator,
            owner=self.owner,
            control=self.control,
        )
        self.previews = Previewer(
            store=self.store,
            sources=sources,
            registry=self.registry,
            defaults=cfg.sync.paginator,
        )
        self.events = EventHub(
            store=self.store,
            queue=self.queue,
            changes=self.changes,
            owner=self.owner,
            render_connector=views.connector_json,
            render_run=views.run_json,
            heartbeat_seconds=cfg.api.events_heartbeat_seconds,
            overlay=self.engine.overlay,
        )
        self.instances = Instances(
            store=self.store,
            queue=self.queue,
            engine=self.engine,
            workers=self.workers,
            instance_id=self.instance_id,
            owner=self.owner,
            started_at=self.started_at,
            concurrency=cfg.workers.concurrency,
            heartbeat_seconds=self.instance_heartbeat_seconds,
            loop_lag=self.metrics.loop_lag_seconds,
        )
        self._supervisor = Supervisor(on_fatal=self._on_fatal)
        # Answered from the last probes, never by awaiting a server (syncd/daemon/readiness.py).
        self.readiness_probes = Readiness({"store": self.store.ping, "queue": self.queue.ping})

    def _on_fatal(self, name: str, exc: BaseException) -> None:
        # The supervisor logged the failure with its traceback; the runner exits non-zero.
        if self.fatal is not None and not self.fatal.done():
            self.fatal.set_result(name)

    async def stop(self, grace: float | None = None) -> None:
        """Stop in reverse order; runs are interrupted at their next page boundary."""
        if not self._started:
            return
        self._started = False
        grace = self.config.daemon.grace_seconds if grace is None else grace
        # Open event streams end now: the API's shutdown would otherwise wait for them.
        self.events.close()
        if self.api_runner is not None:
            await self.api_runner.cleanup()
            self.api_runner = None
        # The scheduler finishes the tick in progress (so a run it claims is started and then
        # interrupted by the engine's stop, never left claimed with no task).
        self.scheduler.stop()
        await self._supervisor.finish("scheduler", grace)
        await self.engine.stop(grace)
        await self.workers.stop(grace)
        await self._supervisor.stop()
        await self.maintenance.stop()
        await self.readiness_probes.close()
        # After the workers: no call is in flight. Indexers release their connections.
        await self.indexers.aclose()
        await self.pools.aclose()
        await self.transport.close()
        await self.budgets.close()
        await self.queue.close()
        await self.instances.forget()
        await self.store.close()
        log.info("daemon.stopped", instance_id=self.instance_id)

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

    # --- what the runner, the API and tests read ---------------------------------------

    async def readiness(self) -> dict[str, str]:
        """``{"store": "ok"|error, "queue": "ok"|error}``, plus ``"tasks"`` naming side
        tasks that died and are being restarted; within 0.1 s whatever the servers do
        (:class:`~syncd.daemon.readiness.Readiness`)."""
        result = await self.readiness_probes.current()
        problems = self._supervisor.problems()
        if problems:
            result["tasks"] = "; ".join(f"{k}: {v}" for k, v in sorted(problems.items()))
        return result

    async def status(self) -> dict[str, Any]:
        """``GET /status``: this instance, the queue's depth, and every instance heard from
        within the last few heartbeats (:meth:`Instances.status`)."""
        return await self.instances.status()

    async def heartbeat(self) -> None:
        """Record this instance's heartbeat in the store now (the side task does it every
        ``instance_heartbeat_seconds``)."""
        await self.instances.heartbeat()

    @property
    def running_syncs(self) -> dict[str, str]:
        """``{connector_id: run_id}`` of the runs executing in this instance."""
        return self.engine.running

    async def queue_depth(self) -> int:
        """Documents waiting in the queue, all connectors together."""
        return sum((await self.queue.depth()).values())

    async def tick(self) -> Any:
        """Run one scheduler tick now (what the scheduler loop does every ``tick_seconds``)."""
        return await self.scheduler.tick()

    def apply_settings(self, config: Config) -> None:
        """Apply the settings a reload may change without a restart (scheduler timing, the
        run slots: more slots are filled at once, fewer let running runs finish)."""
        self.scheduler.tick_seconds = config.scheduler.tick_seconds
        self.scheduler.stale_lock_seconds = config.scheduler.stale_lock_seconds
        grown = config.sync.max_concurrent_runs > self.admission.max_runs
        self.admission.max_runs = config.sync.max_concurrent_runs
        if grown:
            self.scheduler.wake()
