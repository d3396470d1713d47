"""Metrics as a scraper sees them: ``render()`` parsed with the Prometheus text parser, and
checked by ``promtool`` (Debian package ``prometheus``)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import platform
import re
import subprocess
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from syncd.daemon.metrics_poller import refresh
from syncd.models import ConnectorStatus, RunOutcome, RunTrigger, SyncStatus, Transition
from syncd.observability.metrics import (
    API_LATENCY_BUCKETS,
    INDEX_LATENCY_BUCKETS,
    Metrics,
    observer,
    watch_loop_lag,
)
from syncd.queue.memory import MemoryQueue
from syncd.rules.records import document_inputs
from syncd.store.sqlite import SQLiteStore
from tests.contract.factories import T0, make_connector, start_run

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "systemd" / "prometheus-alerts.yml"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics: Metrics, prefix: str = "syncd_") -> Samples:
    """Every sample of the rendered text whose name starts with ``prefix``."""
    body, content_type = metrics.render()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            assert not sample.name.endswith("_created"), sample.name
            if sample.name.startswith(prefix):
                out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def only(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def labels(**kw: str) -> frozenset[tuple[str, str]]:
    return frozenset(kw.items())


NO_LABELS = frozenset[tuple[str, str]]()


def test_a_fresh_registry_starts_every_known_series_at_zero() -> None:
    samples = scrape(Metrics(process_metrics=False))
    runs = only(samples, "syncd_runs_total")
    assert runs == {
        labels(trigger=t, outcome=o): 0.0
        for t in ("manual", "schedule", "stale_lock", "retry")
        for o in ("succeeded", "failed", "aborted", "interrupted")
    }
    assert only(samples, "syncd_pages_fetched_total") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_page_retries_total") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_transport_retries_total") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_backoff_seconds_total") == {
        labels(reason="backoff"): 0.0,
        labels(reason="retry_after"): 0.0,
        labels(reason="throttle"): 0.0,
        labels(reason="host_cooldown"): 0.0,
        labels(reason="store_unavailable"): 0.0,
        labels(reason="queue_unavailable"): 0.0,
    }
    assert only(samples, "syncd_documents") == {
        labels(status=s): 0.0 for s in ("pending", "running", "indexed", "failed", "deleted")
    }
    assert only(samples, "syncd_connectors") == {
        labels(status=s, sync_status=y): 0.0
        for s in ("active", "paused", "error", "deleting")
        for y in ("idle", "running", "queued")
    }
    assert only(samples, "syncd_queue_depth") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_syncs_running") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_sync_longest_running_seconds") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_last_success_timestamp_seconds") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_records_rejected_total") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_documents_deleted_total") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_run_duration_seconds_count") == {}
    assert only(samples, "syncd_index_seconds_count") == {}
    assert only(samples, "syncd_api_request_seconds_count") == {}
    assert not [name for name, _ in samples if name.startswith("syncd_connector_last_success")]


def test_samples_after_a_sync_with_retries() -> None:
    metrics = Metrics(process_metrics=False)
    # A manual run: 3 pages, the second retried twice after 2 s and 4 s backoffs, one
    # transport retry honouring a 1.5 s Retry-After, 0.2 s throttle between pages.
    for _ in range(3):
        metrics.pages.inc()
    metrics.page_retries.inc(2)
    metrics.transport_retries.inc()
    metrics.backoff_seconds.labels(reason="backoff").inc(2.0)
    metrics.backoff_seconds.labels(reason="backoff").inc(4.0)
    metrics.backoff_seconds.labels(reason="retry_after").inc(1.5)
    metrics.backoff_seconds.labels(reason="throttle").inc(0.4)
    metrics.runs.labels(trigger="manual", outcome="succeeded").inc()
    metrics.runs.labels(trigger="schedule", outcome="failed").inc()
    metrics.index_latency.labels(kind="webhook", outcome="indexed").observe(0.03)
    metrics.index_latency.labels(kind="webhook", outcome="indexed").observe(7.0)
    metrics.index_latency.labels(kind="webhook", outcome="failed").observe(120.0)

    samples = scrape(metrics)
    runs = only(samples, "syncd_runs_total")
    assert runs[labels(trigger="manual", outcome="succeeded")] == 1.0
    assert runs[labels(trigger="schedule", outcome="failed")] == 1.0
    assert sum(runs.values()) == 2.0
    assert only(samples, "syncd_pages_fetched_total") == {NO_LABELS: 3.0}
    assert only(samples, "syncd_page_retries_total") == {NO_LABELS: 2.0}
    assert only(samples, "syncd_transport_retries_total") == {NO_LABELS: 1.0}
    assert only(samples, "syncd_backoff_seconds_total") == {
        labels(reason="backoff"): 6.0,
        labels(reason="retry_after"): 1.5,
        labels(reason="throttle"): 0.4,
        labels(reason="host_cooldown"): 0.0,
        labels(reason="store_unavailable"): 0.0,
        labels(reason="queue_unavailable"): 0.0,
    }
    assert only(samples, "syncd_index_seconds_count") == {
        labels(kind="webhook", outcome="indexed"): 2.0,
        labels(kind="webhook", outcome="failed"): 1.0,
    }
    assert only(samples, "syncd_index_seconds_sum") == {
        labels(kind="webhook", outcome="indexed"): 7.03,
        labels(kind="webhook", outcome="failed"): 120.0,
    }
    buckets = {
        dict(lbl)["le"]: value
        for lbl, value in only(samples, "syncd_index_seconds_bucket").items()
        if dict(lbl)["outcome"] == "indexed"
    }
    expected = {
        _le(b): (0.0 if b < 0.03 else 1.0 if b < 7.0 else 2.0) for b in INDEX_LATENCY_BUCKETS
    }
    assert buckets == {**expected, "+Inf": 2.0}


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def test_observe_request_labels_route_method_and_code() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.observe_request("/connectors/{id}", "get", 200, 0.004)
    metrics.observe_request("/connectors/{id}", "GET", 200, 0.006)
    metrics.observe_request("/connectors/{id}/sync", "POST", 409, 0.02)
    samples = scrape(metrics)
    assert only(samples, "syncd_api_request_seconds_count") == {
        labels(route="/connectors/{id}", method="GET", code="200"): 2.0,
        labels(route="/connectors/{id}/sync", method="POST", code="409"): 1.0,
    }
    assert only(samples, "syncd_api_request_seconds_sum") == {
        labels(route="/connectors/{id}", method="GET", code="200"): 0.01,
        labels(route="/connectors/{id}/sync", method="POST", code="409"): 0.02,
    }
    get_buckets = [
        (lbl, value)
        for lbl, value in only(samples, "syncd_api_request_seconds_bucket").items()
        if dict(lbl)["code"] == "200"
    ]
    assert len(get_buckets) == len(API_LATENCY_BUCKETS) + 1
    assert {dict(lbl)["le"]: v for lbl, v in get_buckets}["0.005"] == 1.0


@pytest.mark.parametrize(
    ("amount", "count"), [(0.0, 3), (0.004, 1), (0.01, 7), (0.3, 100), (61.0, 2), (1.0, 0)]
)
def test_observer_records_what_as_many_observe_calls_do(amount: float, count: int) -> None:
    """``observer`` writes the histogram's state directly: the exposition must be the one
    ``count`` calls of ``observe`` give, bucket by bucket, whatever prometheus_client does."""
    each, once = Metrics(process_metrics=False), Metrics(process_metrics=False)
    child = each.index_latency.labels(kind="webhook", outcome="indexed")
    for _ in range(count):
        child.observe(amount)
    observer(once.index_latency.labels(kind="webhook", outcome="indexed"))(amount, count)
    expected = only(scrape(each), "syncd_index_seconds_bucket")
    assert only(scrape(once), "syncd_index_seconds_bucket") == expected
    assert len(expected) == len(INDEX_LATENCY_BUCKETS) + 1
    for name in ("syncd_index_seconds_count", "syncd_index_seconds_sum"):
        assert only(scrape(once), name) == pytest.approx(only(scrape(each), name))


def test_document_counts_fill_missing_statuses_with_zero() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.set_document_counts({"pending": 4, "failed": 1, "running": 2, "indexed": 9})
    metrics.set_document_counts({"pending": 2, "indexed": 10})
    assert only(scrape(metrics), "syncd_documents") == {
        labels(status="pending"): 2.0,
        labels(status="running"): 0.0,
        labels(status="indexed"): 10.0,
        labels(status="failed"): 0.0,
        labels(status="deleted"): 0.0,
    }


def test_queue_depth_is_one_total() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.set_queue_depth(4)
    assert only(scrape(metrics), "syncd_queue_depth") == {NO_LABELS: 4.0}
    metrics.set_queue_depth(0)
    assert only(scrape(metrics), "syncd_queue_depth") == {NO_LABELS: 0.0}


def test_two_instances_do_not_share_or_clash() -> None:
    first, second = Metrics(), Metrics()
    first.pages.inc(5)
    assert only(scrape(first), "syncd_pages_fetched_total") == {NO_LABELS: 5.0}
    assert only(scrape(second), "syncd_pages_fetched_total") == {NO_LABELS: 0.0}


def test_process_metrics_are_included_by_default() -> None:
    assert only(scrape(Metrics(), prefix="process_"), "process_cpu_seconds_total")
    assert scrape(Metrics(process_metrics=False), prefix="process_") == {}


def test_openmetrics_when_the_scraper_asks_for_it() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.pages.inc()
    metrics.index_latency.labels(kind="webhook", outcome="indexed").observe(0.1)
    # What Prometheus sends: OpenMetrics preferred, the text format as a fallback.
    accept = (
        "application/openmetrics-text;version=1.0.0;q=0.5,"
        "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
    )
    body, content_type = metrics.render(accept)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0; charset=utf-8")
    text = body.decode()
    assert text.endswith("# EOF\n")
    assert "syncd_pages_fetched_total 1.0\n" in text
    assert "_created" not in text
    families = {f.name: f for f in openmetrics_families(text)}  # type: ignore[no-untyped-call]
    assert families["syncd_pages_fetched"].type == "counter"
    assert families["syncd_build_info"].type == "gauge"
    for plain in ("", "text/plain", "*/*", "application/json"):
        assert metrics.render(plain)[1] == "text/plain; version=0.0.4; charset=utf-8"


def test_build_info_names_the_versions() -> None:
    [(labels_, value)] = only(scrape(Metrics(process_metrics=False)), "syncd_build_info").items()
    assert value == 1.0
    found = dict(labels_)
    assert set(found) == {"version", "python_version"}
    assert found["python_version"] == platform.python_version()
    assert re.fullmatch(r"\d+(\.\d+)*\S*", found["version"])


def busy_metrics(**kw: Any) -> Metrics:
    """Metrics with a sample in every family (histograms observed, per-connector series)."""
    metrics = Metrics(per_connector=True, **kw)
    metrics.run_started("r1")
    metrics.run_ended("r1", RunTrigger.MANUAL, RunOutcome.SUCCEEDED)
    metrics.index_latency.labels(kind="webhook", outcome="failed").observe(0.5)
    metrics.observe_request("/connectors", "GET", 200, 0.01)
    metrics.set_last_successes([("c-1", "items", 1.7e9)])
    return metrics


def test_no_created_series_in_either_format() -> None:
    metrics = busy_metrics()
    metrics.pages.inc()
    for accept in ("", "application/openmetrics-text; version=1.0.0"):
        body, _ = metrics.render(accept)
        assert b"_created" not in body
        assert b"syncd_run_duration_seconds_count" in body


COUNTER_SUFFIX = "_total"
NAME = re.compile(r"syncd_[a-z][a-z0-9]*(_[a-z0-9]+)*")
LABEL = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
UNITS = ("_seconds", "_bytes", "_total", "_info")


def test_names_follow_the_prometheus_conventions() -> None:
    body, _ = busy_metrics(process_metrics=False).render()
    families = list(text_string_to_metric_families(body.decode()))
    assert {f.name for f in families} >= {
        "syncd_build_info",
        "syncd_connectors",
        "syncd_syncs_running",
        "syncd_sync_longest_running_seconds",
        "syncd_run_duration_seconds",
        "syncd_last_success_timestamp_seconds",
        "syncd_connector_last_success_timestamp_seconds",
        "syncd_queue_depth",
        "syncd_documents",
        "syncd_documents_deleted",
        "syncd_records_rejected",
    }
    for family in families:
        assert NAME.fullmatch(family.name), family.name
        assert family.documentation.strip(), f"{family.name} has no help"
        assert family.samples, family.name
        for sample in family.samples:
            assert all(LABEL.fullmatch(k) for k in sample.labels), sample
            if family.type == "counter":
                assert sample.name == family.name + COUNTER_SUFFIX, sample.name
            else:
                assert not sample.name.endswith(COUNTER_SUFFIX), sample.name
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name
        if "timestamp" in family.name or "seconds" in family.name:
            assert family.name.endswith(UNITS), family.name
        # No label may grow with the connectors (per_connector is the one opt-in).
        if family.name != "syncd_connector_last_success_timestamp_seconds":
            keys = {k for s in family.samples for k in s.labels}
            assert not keys & {"connector", "connector_id", "name", "run_id"}, family.name


@pytest.mark.needs("promtool")
def test_promtool_accepts_the_exposition() -> None:
    body, _ = busy_metrics().render()
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def test_runs_in_flight_duration_and_last_success() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.run_started("r1")
    metrics.run_started("r2")
    samples = scrape(metrics)
    assert only(samples, "syncd_syncs_running") == {NO_LABELS: 2.0}
    assert only(samples, "syncd_sync_longest_running_seconds")[NO_LABELS] > 0.0
    seconds = metrics.run_ended("r1", RunTrigger.SCHEDULE, RunOutcome.FAILED)
    assert seconds > 0.0
    samples = scrape(metrics)
    assert only(samples, "syncd_syncs_running") == {NO_LABELS: 1.0}
    assert only(samples, "syncd_last_success_timestamp_seconds") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_run_duration_seconds_count") == {
        labels(trigger="schedule", outcome="failed"): 1.0
    }
    metrics.run_ended("r2", RunTrigger.MANUAL, RunOutcome.SUCCEEDED)
    metrics.run_gone("r2")  # the run task's end: nothing left to do
    samples = scrape(metrics)
    assert only(samples, "syncd_syncs_running") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_sync_longest_running_seconds") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_last_success_timestamp_seconds")[NO_LABELS] > 1.7e9
    # A run whose end was not recorded here (fenced) leaves the in-flight count all the same.
    metrics.run_started("r3")
    metrics.run_gone("r3")
    assert only(scrape(metrics), "syncd_syncs_running") == {NO_LABELS: 0.0}


def test_connector_counts_fill_missing_pairs_with_zero() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.set_connector_counts({(ConnectorStatus.ERROR, SyncStatus.IDLE): 2})
    metrics.set_connector_counts({("active", "running"): 3})
    connectors = only(scrape(metrics), "syncd_connectors")
    assert connectors[labels(status="active", sync_status="running")] == 3.0
    assert connectors[labels(status="error", sync_status="idle")] == 0.0
    assert sum(connectors.values()) == 3.0 and len(connectors) == 12


# --- refresh from a real store ------------------------------------------------------------


async def fill(store: SQLiteStore, count: int, **fields: Any) -> list[str]:
    ids = []
    for _ in range(count):
        ids.append((await store.create_connector(make_connector(**fields))).id)
    return ids


async def add_documents(store: SQLiteStore, connector_id: str, count: int) -> None:
    run_id = await start_run(store, connector_id)
    docs, _ = document_inputs([{"id": f"d{i}"} for i in range(count)], "id", None)
    await store.commit_page(connector_id, run_id, docs, next_cursor=None, source_state={}, now=T0)


async def test_refresh_counts_every_connector_with_a_flat_number_of_series(
    tmp_path: Path,
) -> None:
    store, queue = SQLiteStore(tmp_path / "syncd.db"), MemoryQueue()
    await store.open()
    await queue.open()
    try:
        metrics = Metrics(process_metrics=False)
        first = await fill(store, 1)
        await add_documents(store, first[0], 2)
        await queue.push(first[0], ["d0", "d1"])
        await refresh(metrics, store, queue)
        before = scrape(metrics)
        # Past the 1,000 connectors the old refresh stopped at: documents of the last ones
        # count, and not one series more.
        rest = await fill(store, 1999)
        await fill(store, 3, status=ConnectorStatus.ERROR)
        await add_documents(store, rest[-1], 3)
        await queue.push(rest[-1], ["d0", "d1", "d2"])
        await refresh(metrics, store, queue)
        after = scrape(metrics)
        assert set(after) == set(before)
        assert only(after, "syncd_documents")[labels(status="pending")] == 5.0
        assert only(after, "syncd_queue_depth") == {NO_LABELS: 5.0}
        connectors = only(after, "syncd_connectors")
        assert connectors[labels(status="active", sync_status="running")] == 2.0
        assert connectors[labels(status="active", sync_status="idle")] == 1998.0
        assert connectors[labels(status="error", sync_status="idle")] == 3.0
    finally:
        await queue.close()
        await store.close()


async def test_per_connector_last_success_only_when_asked(tmp_path: Path) -> None:
    store, queue = SQLiteStore(tmp_path / "syncd.db"), MemoryQueue()
    await store.open()
    await queue.open()
    try:
        synced = await fill(store, 1200, last_synced_at=T0)
        await fill(store, 5)  # never succeeded: no series
        default, per_connector = Metrics(process_metrics=False), Metrics(per_connector=True)
        for metrics in (default, per_connector):
            await refresh(metrics, store, queue)
        name = "syncd_connector_last_success_timestamp_seconds"
        assert only(scrape(default), name) == {}
        series = only(scrape(per_connector), name)
        assert len(series) == 1200
        assert {dict(k)["connector_id"] for k in series} == set(synced)
        assert set(series.values()) == {T0.timestamp()}
        # A rename or a delete replaces the connector's series instead of adding one.
        await store.mutate_connector(
            synced[0],
            lambda c: Transition(replace(c, name="renamed", last_synced_at=T0 + timedelta(1))),
        )
        await store.delete_connector(synced[1])
        await refresh(per_connector, store, queue)
        series = only(scrape(per_connector), name)
        assert len(series) == 1199
        assert (
            series[labels(connector_id=synced[0], connector="renamed")]
            == (T0 + timedelta(1)).timestamp()
        )
    finally:
        await queue.close()
        await store.close()


async def test_a_queue_outage_leaves_the_store_figures_refreshed(tmp_path: Path) -> None:
    store, queue = SQLiteStore(tmp_path / "syncd.db"), MemoryQueue()
    await store.open()
    try:
        metrics = Metrics(process_metrics=False)
        metrics.set_queue_depth(9)
        await add_documents(store, (await fill(store, 1))[0], 4)
        try:
            await refresh(metrics, store, queue)  # the queue was never opened
        except Exception as exc:
            assert "queue" in str(exc).lower()
        else:
            raise AssertionError("the queue failure was not raised")
        samples = scrape(metrics)
        assert only(samples, "syncd_documents")[labels(status="pending")] == 4.0
        assert only(samples, "syncd_queue_depth") == {NO_LABELS: 9.0}
    finally:
        await store.close()


# --- the example alert rules ----------------------------------------------------------------


@pytest.mark.needs("promtool")
def test_the_example_alert_rules_use_exported_metrics_and_pass_promtool() -> None:
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    [group] = rules["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {
        "SyncdConnectorInError",
        "SyncdSyncRunningTooLong",
        "SyncdIndexerFailing",
        "SyncdDeadLettersGrowing",
        "SyncdQueueGrowing",
        "SyncdEventLoopStalled",
    }
    body, _ = busy_metrics().render()
    exported = {s.name for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    for name, rule in alerts.items():
        assert {"expr", "for", "labels", "annotations"} <= set(rule), name
        used = set(re.findall(r"\bsyncd_[a-z0-9_]+", rule["expr"]))
        assert used and used <= exported, (name, used - exported)
    result = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert b"SUCCESS: 6 rules found" in result.stdout


def lag_gauge(metrics: Metrics) -> float:
    return only(scrape(metrics), "syncd_event_loop_lag_seconds")[NO_LABELS]


async def test_loop_lag_gauge_shows_a_blocked_loop_for_a_window() -> None:
    metrics = Metrics(process_metrics=False)
    assert only(scrape(metrics), "syncd_event_loop_lag_seconds") == {NO_LABELS: 0.0}
    lags: asyncio.Queue[float] = asyncio.Queue()
    interval, blocked = 0.01, 0.2
    watcher = asyncio.create_task(
        watch_loop_lag(metrics, interval=interval, window=0.5, on_sample=lags.put_nowait)
    )
    try:
        await lags.get()
        # The watcher has just gone back to sleep for `interval`: block the loop past that.
        asyncio.get_running_loop().call_soon(time.sleep, blocked)
        assert await lags.get() >= blocked - interval
        assert lag_gauge(metrics) >= blocked - interval
        # The next, short, lags do not hide the stall from a scrape within the window...
        assert await lags.get() < blocked - interval
        assert lag_gauge(metrics) >= blocked - interval
        # ...which forgets it afterwards.
        for _ in range(10_000):
            await lags.get()
            if lag_gauge(metrics) < blocked - interval:
                break
        else:
            raise AssertionError("the gauge never forgot the stall")
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
