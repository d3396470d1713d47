"""Metrics as a scraper sees them: ``render()`` parsed with the Prometheus text parser."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from syncd.metrics import API_LATENCY_BUCKETS, INDEX_LATENCY_BUCKETS, Metrics

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics: Metrics, prefix: str = "syncd_") -> Samples:
    """Every sample of the rendered text whose name starts with ``prefix`` (no ``_created``)."""
    body, content_type = metrics.render()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name.startswith(prefix) and not sample.name.endswith("_created"):
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
        for t in ("manual", "schedule", "stale_lock")
        for o in ("succeeded", "failed", "aborted", "interrupted")
    }
    assert only(samples, "syncd_pages_fetched_total") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_page_retries_total") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_transport_retries_total") == {NO_LABELS: 0.0}
    assert only(samples, "syncd_backoff_seconds_total") == {
        labels(reason="backoff"): 0.0,
        labels(reason="retry_after"): 0.0,
        labels(reason="throttle"): 0.0,
    }
    assert only(samples, "syncd_documents") == {
        labels(status=s): 0.0 for s in ("pending", "running", "indexed", "failed")
    }
    assert only(samples, "syncd_queue_depth") == {}
    assert only(samples, "syncd_index_seconds_count") == {}
    assert only(samples, "syncd_api_request_seconds_count") == {}


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
    metrics.index_latency.labels(outcome="indexed").observe(0.03)
    metrics.index_latency.labels(outcome="indexed").observe(7.0)
    metrics.index_latency.labels(outcome="failed").observe(120.0)

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
    }
    assert only(samples, "syncd_index_seconds_count") == {
        labels(outcome="indexed"): 2.0,
        labels(outcome="failed"): 1.0,
    }
    assert only(samples, "syncd_index_seconds_sum") == {
        labels(outcome="indexed"): 7.03,
        labels(outcome="failed"): 120.0,
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


def test_document_counts_fill_missing_statuses_with_zero() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.set_document_counts({"pending": 4, "failed": 1, "running": 2, "indexed": 9})
    metrics.set_document_counts({"pending": 2, "indexed": 10})
    assert only(scrape(metrics), "syncd_documents") == {
        labels(status="pending"): 2.0,
        labels(status="running"): 0.0,
        labels(status="indexed"): 10.0,
        labels(status="failed"): 0.0,
    }


def test_queue_depth_replaces_the_previous_snapshot() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.set_queue_depth({"c-a": 3, "c-b": 1})
    assert only(scrape(metrics), "syncd_queue_depth") == {
        labels(connector_id="c-a"): 3.0,
        labels(connector_id="c-b"): 1.0,
    }
    metrics.set_queue_depth({"c-b": 7})
    assert only(scrape(metrics), "syncd_queue_depth") == {labels(connector_id="c-b"): 7.0}
    metrics.set_queue_depth({})
    assert only(scrape(metrics), "syncd_queue_depth") == {}


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
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text; version=1.0.0; charset=utf-8")
    text = body.decode()
    assert text.endswith("# EOF\n")
    assert "syncd_pages_fetched_total 1.0\n" in text
