"""Prometheus metrics of one daemon, exposed on ``GET /metrics``.

Each :class:`Metrics` owns its own :class:`~prometheus_client.CollectorRegistry`, so several
daemons embedded in one process (or one test session) never clash over metric names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import choose_encoder

from syncd.errors import SyncdError
from syncd.models import DocStatus, RunOutcome, RunTrigger, WaitReason
from syncd.queue.base import WorkQueue
from syncd.store.base import Store

log = structlog.get_logger("syncd.metrics")

__all__ = ["API_LATENCY_BUCKETS", "INDEX_LATENCY_BUCKETS", "Metrics"]

#: Indexing calls a webhook or a plugin: allow for slow ones up to the index timeout.
INDEX_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Control API requests are store reads and writes: milliseconds to a second.
API_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """The daemon's counters, gauges and histograms.

    Counters and histograms are updated where things happen (``metrics.pages.inc()``,
    ``metrics.runs.labels(trigger=..., outcome=...).inc()``); the document and queue gauges
    are snapshots that the daemon refreshes from the store and the queue. Label
    combinations known in advance are created at zero so that ``rate()`` works from the
    first scrape.
    """

    registry: CollectorRegistry
    runs: Counter
    pages: Counter
    page_retries: Counter
    transport_retries: Counter
    backoff_seconds: Counter
    documents: Gauge
    queue_depth: Gauge
    index_latency: Histogram
    api_latency: Histogram

    def __init__(self, *, process_metrics: bool = True) -> None:
        """Create the metrics in a fresh registry (with ``process_*`` metrics unless disabled)."""
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.runs = Counter(
            "syncd_runs",
            "Sync runs finished, by trigger and outcome.",
            ["trigger", "outcome"],
            registry=registry,
        )
        self.pages = Counter(
            "syncd_pages_fetched", "Source pages fetched and committed.", registry=registry
        )
        self.page_retries = Counter(
            "syncd_page_retries",
            "Page fetches retried by the paginator.",
            registry=registry,
        )
        self.transport_retries = Counter(
            "syncd_transport_retries",
            "HTTP requests retried by the transport.",
            registry=registry,
        )
        self.backoff_seconds = Counter(
            "syncd_backoff_seconds",
            "Seconds sync runs spent waiting, by reason (backoff, retry_after, throttle).",
            ["reason"],
            registry=registry,
        )
        self.documents = Gauge(
            "syncd_documents", "Documents in the store, by status.", ["status"], registry=registry
        )
        self.queue_depth = Gauge(
            "syncd_queue_depth",
            "Documents waiting in the work queue, by connector.",
            ["connector_id"],
            registry=registry,
        )
        self.index_latency = Histogram(
            "syncd_index_seconds",
            "Time to index one document, by outcome.",
            ["outcome"],
            buckets=INDEX_LATENCY_BUCKETS,
            registry=registry,
        )
        self.api_latency = Histogram(
            "syncd_api_request_seconds",
            "Control API request latency, by route pattern, method and status code.",
            ["route", "method", "code"],
            buckets=API_LATENCY_BUCKETS,
            registry=registry,
        )
        if process_metrics:
            ProcessCollector(registry=registry)

        for trigger in RunTrigger:
            for outcome in RunOutcome:
                if outcome is not RunOutcome.RUNNING:
                    self.runs.labels(trigger=trigger.value, outcome=outcome.value)
        for reason in WaitReason:
            self.backoff_seconds.labels(reason=reason.value)
        for status in DocStatus:
            self.documents.labels(status=status.value)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Record one API request; ``route`` is the route pattern (``/connectors/{id}``),
        never the raw path, so that the number of series stays bounded."""
        self.api_latency.labels(route=route, method=method.upper(), code=str(status)).observe(
            seconds
        )

    def set_document_counts(self, counts: Mapping[str, int]) -> None:
        """Set ``syncd_documents`` from a status → count snapshot; missing statuses are 0."""
        snapshot = {status.value: 0 for status in DocStatus}
        snapshot.update((str(status), count) for status, count in counts.items())
        for status, count in snapshot.items():
            self.documents.labels(status=status).set(count)

    def set_queue_depth(self, depth: Mapping[str, int]) -> None:
        """Replace ``syncd_queue_depth`` with a connector → depth snapshot.

        Connectors absent from the snapshot (deleted, drained) disappear from the output
        instead of reporting their last depth forever.
        """
        # Scrapes run on the event loop too, so nothing observes the gauge in between.
        self.queue_depth.clear()
        for connector_id, count in depth.items():
            self.queue_depth.labels(connector_id=connector_id).set(count)

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition body and its content type.

        Prometheus text format 0.0.4 by default; OpenMetrics (or a newer text format) when
        the scraper's ``Accept`` header asks for it.
        """
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


#: Seconds between two refreshes of the gauges read from the store and the queue.
REFRESH_SECONDS = 5.0


async def refresh_forever(metrics: Metrics, store: Store, queue: WorkQueue) -> None:
    """Run forever: refresh the queue depth and document count gauges. A refresh that fails
    leaves the previous figures; it never ends the refreshes."""
    while True:
        try:
            metrics.set_queue_depth(await queue.depth())
            totals: dict[str, int] = {str(s): 0 for s in DocStatus}
            after: str | None = None
            for _ in range(10):
                rows = await store.list_connectors(limit=100, after=after)
                for c in rows:
                    for status, n in (await store.document_counts(c.id)).items():
                        totals[str(status)] += n
                if len(rows) < 100:
                    break
                after = rows[-1].id
            metrics.set_document_counts(totals)
        except Exception as exc:
            log.warning(
                "metrics refresh failed", error=str(exc), exc_info=not isinstance(exc, SyncdError)
            )
        await asyncio.sleep(REFRESH_SECONDS)
