"""Prometheus metrics of one daemon, exposed on ``GET /metrics``.

Each :class:`Metrics` owns its own :class:`~prometheus_client.CollectorRegistry`, so several
daemons embedded in one process (or one test session) never clash over metric names.

The number of series does not grow with the number of connectors: the store and queue
gauges are totals, which the daemon polls (:mod:`syncd.daemon.metrics_poller`). The only
series labelled by connector, the last successful sync of each, exist only with
``[metrics] per_connector``. No ``_created`` series are exported (they double the series of
every counter and histogram and say nothing an alert needs); the filter is this registry's
own, so that an application embedding syncd keeps its own metrics as they are.
"""

from __future__ import annotations

import asyncio
import platform
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from syncd.models import ConnectorStatus, DocStatus, RunOutcome, RunTrigger, SyncStatus, WaitReason

__all__ = [
    "API_LATENCY_BUCKETS",
    "INDEX_LATENCY_BUCKETS",
    "RUN_DURATION_BUCKETS",
    "Metrics",
    "observer",
    "watch_loop_lag",
]

#: Indexing calls a webhook or a plugin: allow for slow ones up to the index timeout.
INDEX_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Control API requests are store reads and writes: milliseconds to a second.
API_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: A sync run crawls a source: a second for a small one, hours for a large one.
RUN_DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0)
#: Seconds between two samples of the event loop's lag.
LOOP_LAG_INTERVAL_SECONDS = 0.1
#: ``syncd_event_loop_lag_seconds`` is the worst sample of this many seconds, so that a
#: scrape sees a stall that ended since the previous scrape (at the usual 10-15 s intervals).
LOOP_LAG_WINDOW_SECONDS = 15.0


class Metrics:
    """The daemon's counters, gauges and histograms.

    Counters and histograms are updated where things happen (``metrics.pages.inc()``,
    ``metrics.records_rejected.inc(n)``, ``metrics.documents_deleted.inc(n)``); runs report
    their start and end (:meth:`run_started`, :meth:`run_ended`); the store and queue gauges
    are snapshots the daemon's poller sets (:func:`syncd.daemon.metrics_poller.refresh`).
    Label combinations known in advance are created at zero so that ``rate()`` works from
    the first scrape.
    """

    registry: CollectorRegistry
    per_connector: bool
    build_info: Gauge
    runs: Counter
    run_duration: Histogram
    syncs_running: Gauge
    sync_longest_running: Gauge
    last_success: Gauge
    connector_last_success: Gauge | None
    pages: Counter
    page_retries: Counter
    transport_retries: Counter
    backoff_seconds: Counter
    records_rejected: Counter
    connectors: Gauge
    documents: Gauge
    document_retries: Counter
    documents_deleted: Counter
    deletions_held: Counter
    queue_depth: Gauge
    index_latency: Histogram
    api_latency: Histogram
    loop_lag: Gauge

    def __init__(self, *, process_metrics: bool = True, per_connector: bool = False) -> None:
        """Create the metrics in a fresh registry (with ``process_*`` metrics unless disabled;
        with the series labelled by connector only when ``per_connector``)."""
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.per_connector = per_connector
        # Runs of this instance in flight: run id -> monotonic start.
        self._running: dict[str, float] = {}
        self.build_info = Gauge(
            "syncd_build_info",
            "Always 1; the labels name the syncd and Python versions.",
            ["version", "python_version"],
            registry=registry,
        )
        self.build_info.labels(version=_version(), python_version=platform.python_version()).set(1)
        self.runs = Counter(
            "syncd_runs",
            "Sync runs finished, by trigger and outcome.",
            ["trigger", "outcome"],
            registry=registry,
        )
        self.run_duration = Histogram(
            "syncd_run_duration_seconds",
            "Duration of the sync runs of this instance, by trigger and outcome.",
            ["trigger", "outcome"],
            buckets=RUN_DURATION_BUCKETS,
            registry=registry,
        )
        self.syncs_running = Gauge(
            "syncd_syncs_running", "Sync runs executing in this instance now.", registry=registry
        )
        self.syncs_running.set_function(lambda: len(self._running))
        self.sync_longest_running = Gauge(
            "syncd_sync_longest_running_seconds",
            "How long the oldest sync run executing in this instance has run (0: none).",
            registry=registry,
        )
        self.sync_longest_running.set_function(self._longest_running)
        self.last_success = Gauge(
            "syncd_last_success_timestamp_seconds",
            "Unix time of the last successful sync run of this instance (0: none yet).",
            registry=registry,
        )
        self.connector_last_success = None
        if per_connector:
            self.connector_last_success = Gauge(
                "syncd_connector_last_success_timestamp_seconds",
                "Unix time of each connector's last successful sync run, from the store.",
                ["connector_id", "connector"],
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
            "Seconds sync runs spent waiting, by reason (backoff, retry_after, throttle, "
            "host_cooldown, store_unavailable, queue_unavailable).",
            ["reason"],
            registry=registry,
        )
        self.records_rejected = Counter(
            "syncd_records_rejected",
            "Source records that did not become documents (bad id, invalid JSON, not an object).",
            registry=registry,
        )
        self.connectors = Gauge(
            "syncd_connectors",
            "Connectors in the store, by status and sync status.",
            ["status", "sync_status"],
            registry=registry,
        )
        self.documents = Gauge(
            "syncd_documents", "Documents in the store, by status.", ["status"], registry=registry
        )
        self.document_retries = Counter(
            "syncd_document_retries",
            "Documents whose indexing failed for a transient reason and is tried again later "
            "(`[workers] max_attempts`).",
            registry=registry,
        )
        self.documents_deleted = Counter(
            "syncd_documents_deleted",
            "Documents deleted because they were gone at the source (DESIGN.md §11).",
            registry=registry,
        )
        self.deletions_held = Counter(
            "syncd_deletions_held",
            "Deletions held by the guard of a completed crawl (applied only on request).",
            registry=registry,
        )
        self.queue_depth = Gauge(
            "syncd_queue_depth",
            "Documents waiting in the work queue, all connectors together.",
            registry=registry,
        )
        self.index_latency = Histogram(
            "syncd_index_seconds",
            "Time to index one document, by indexer kind and outcome (the count is the "
            "documents indexed or failed).",
            ["kind", "outcome"],
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
        self.loop_lag = Gauge(
            "syncd_event_loop_lag_seconds",
            "The longest delay of the event loop over the last "
            f"{LOOP_LAG_WINDOW_SECONDS:g} s: how late a periodic timer woke up.",
            registry=registry,
        )
        self._loop_lag = 0.0
        if process_metrics:
            ProcessCollector(registry=registry)

        for trigger in RunTrigger:
            for outcome in RunOutcome:
                if outcome is not RunOutcome.RUNNING:
                    self.runs.labels(trigger=trigger.value, outcome=outcome.value)
        for reason in WaitReason:
            self.backoff_seconds.labels(reason=reason.value)
        self.set_document_counts({})
        self.set_connector_counts({})

    # --- runs -------------------------------------------------------------------------

    def set_loop_lag(self, seconds: float) -> None:
        """The event loop's worst lag of the window (:func:`watch_loop_lag`)."""
        self._loop_lag = seconds
        self.loop_lag.set(seconds)

    def loop_lag_seconds(self) -> float:
        """What ``syncd_event_loop_lag_seconds`` holds (``GET /status`` shows it too)."""
        return self._loop_lag

    def run_started(self, run_id: str) -> None:
        """A run of this instance started (counted in ``syncd_syncs_running``)."""
        self._running[run_id] = time.monotonic()

    def run_ended(self, run_id: str, trigger: RunTrigger, outcome: RunOutcome) -> float:
        """A run of this instance ended with ``outcome``: observe its duration (returned, in
        seconds) and, when it succeeded, the time of the last success. ``syncd_runs_total``
        is counted apart, where the outcome is recorded."""
        started = self._running.pop(run_id, None)
        seconds = 0.0 if started is None else time.monotonic() - started
        self.run_duration.labels(trigger=str(trigger), outcome=str(outcome)).observe(seconds)
        if outcome is RunOutcome.SUCCEEDED:
            self.last_success.set(time.time())
        return seconds

    def run_gone(self, run_id: str) -> None:
        """The run's task is over, whether or not its end was recorded here (no-op after
        :meth:`run_ended`)."""
        self._running.pop(run_id, None)

    def _longest_running(self) -> float:
        if not self._running:
            return 0.0
        return time.monotonic() - min(self._running.values())

    # --- API --------------------------------------------------------------------------

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Record one API request; ``route`` is the route pattern (``/connectors/{id}``),
        never the raw path, so that the number of series stays bounded."""
        self.api_latency.labels(route=route, method=method.upper(), code=str(status)).observe(
            seconds
        )

    # --- snapshots --------------------------------------------------------------------

    def set_document_counts(self, counts: Mapping[DocStatus, int] | Mapping[str, int]) -> None:
        """Set ``syncd_documents`` from a status → count snapshot; missing statuses are 0."""
        snapshot = {status.value: 0 for status in DocStatus}
        snapshot.update((str(status), count) for status, count in counts.items())
        for status, count in snapshot.items():
            self.documents.labels(status=status).set(count)

    def set_connector_counts(
        self,
        counts: Mapping[tuple[ConnectorStatus, SyncStatus], int] | Mapping[tuple[str, str], int],
    ) -> None:
        """Set ``syncd_connectors`` from a ``(status, sync_status)`` → count snapshot;
        missing pairs are 0."""
        snapshot = {(s.value, y.value): 0 for s in ConnectorStatus for y in SyncStatus}
        snapshot.update(((str(s), str(y)), n) for (s, y), n in counts.items())
        for (status, sync_status), count in snapshot.items():
            self.connectors.labels(status=status, sync_status=sync_status).set(count)

    def set_queue_depth(self, total: int) -> None:
        """Set ``syncd_queue_depth``: entries waiting in the queue, all connectors together."""
        self.queue_depth.set(total)

    def set_last_successes(self, successes: Iterable[tuple[str, str, float]]) -> None:
        """Replace the per-connector last successes with ``(id, name, unix time)`` triples
        (a no-op without ``per_connector``). Connectors absent from the snapshot (deleted,
        renamed) disappear from the output instead of reporting forever."""
        gauge = self.connector_last_success
        if gauge is None:
            return
        # Scrapes run on the event loop too, so nothing observes the gauge in between.
        gauge.clear()
        for connector_id, name, at in successes:
            gauge.labels(connector_id=connector_id, connector=name).set(at)

    # --- exposition -------------------------------------------------------------------

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition body and its content type.

        Prometheus text format 0.0.4 by default; OpenMetrics when the scraper's ``Accept``
        header asks for ``application/openmetrics-text``.
        """
        encoder, content_type = choose_encoder(accept)
        return encoder(_WithoutCreated(self.registry)), content_type


class _WithoutCreated:
    """The registry's metrics minus their ``_created`` samples.

    prometheus_client can only turn those off process-wide (``disable_created_metrics``),
    which would change the metrics of an application embedding syncd too.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        for metric in self._registry.collect():
            samples = [s for s in metric.samples if not s.name.endswith("_created")]
            if len(samples) != len(metric.samples):
                metric.samples = samples
            yield metric


def _version() -> str:
    try:
        return metadata.version("syncd")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        return "0"


async def watch_loop_lag(
    metrics: Metrics,
    *,
    interval: float = LOOP_LAG_INTERVAL_SECONDS,
    window: float = LOOP_LAG_WINDOW_SECONDS,
    on_sample: Callable[[float], None] | None = None,
) -> None:
    """Run forever: sleep ``interval`` seconds, and count how much later than asked the loop
    woke up; ``syncd_event_loop_lag_seconds`` is the largest such lag of the last ``window``
    seconds. A lag is time every other task waited too: a blocking call, or more CPU work
    than the loop can do. ``on_sample`` sees each lag (tests)."""
    loop = asyncio.get_running_loop()
    # The samples that can still be the window's maximum: (time, lag), lags decreasing.
    worst: deque[tuple[float, float]] = deque()
    while True:
        due = loop.time() + interval
        await asyncio.sleep(interval)
        now = loop.time()
        lag = max(0.0, now - due)
        while worst and worst[-1][1] <= lag:
            worst.pop()
        worst.append((now, lag))
        while worst[0][0] < now - window:
            worst.popleft()
        metrics.set_loop_lag(worst[0][1])
        if on_sample is not None:
            on_sample(lag)


def observer(histogram: Histogram) -> Callable[[float, int], None]:
    """``observe(amount, count)``: what ``count`` calls of ``histogram.observe(amount)``
    record, in one step (a batch's documents share one duration; each call takes two locks).

    It writes prometheus_client's histogram state (``_sum``, ``_upper_bounds``,
    ``_buckets``), which ``tests/unit/test_metrics.py`` checks against ``observe`` itself;
    where that state is not there, it calls ``observe`` ``count`` times."""
    try:
        total, bounds, buckets = histogram._sum, histogram._upper_bounds, histogram._buckets
    except AttributeError:  # another prometheus_client: the public way

        def observe_each(amount: float, count: int) -> None:
            for _ in range(count):
                histogram.observe(amount)

        return observe_each

    def observe(amount: float, count: int) -> None:
        if count <= 0:
            return
        total.inc(amount * count)
        for i, bound in enumerate(bounds):  # the first bucket that holds it, as observe does
            if amount <= bound:
                buckets[i].inc(count)
                break

    return observe
