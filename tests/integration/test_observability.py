"""What an operator sees of a running daemon: ``/metrics`` (series, formats) and the log
lines that tell the story of a run (start, end, indexing failures, API access)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from syncd.api import build_app, start_api
from syncd.api.app import ACCESS_LOGGER
from syncd.daemon import Daemon
from syncd.daemon.metrics_poller import refresh
from syncd.models import DocStatus
from syncd.observability.logs import DRIVER_LOGGERS, configure_logging
from syncd.observability.metrics import LOOP_LAG_INTERVAL_SECONDS
from tests.integration.conftest import DaemonFactory, embedded_config, http_source
from tests.integration.sourceserver import SourceServer

Series = set[tuple[str, frozenset[tuple[str, str]]]]


def series(daemon: Daemon) -> Series:
    """Every ``syncd_`` series of the daemon's exposition."""
    body, _ = daemon.metrics.render()
    return {
        (s.name, frozenset(s.labels.items()))
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name.startswith("syncd_")
    }


def value(daemon: Daemon, name: str, **labels: str) -> float:
    body, _ = daemon.metrics.render()
    [found] = [
        s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name == name and s.labels == labels
    ]
    return found


async def create(daemon: Daemon, name: str, url: str, **indexer: Any) -> str:
    connector = await daemon.create_connector(
        {
            "name": name,
            "source": {"type": "http", "url": url},
            "indexer": indexer or {"type": "store"},
        }
    )
    return connector.id


# --- metrics --------------------------------------------------------------------------


async def test_series_stay_flat_with_2000_connectors(daemon: Daemon, source: SourceServer) -> None:
    first = await daemon.create_connector(
        {"name": "first", "source": http_source(source), "indexer": {"type": "store"}}
    )
    await daemon.trigger_sync(first.id)
    await daemon.wait_run(first.id)
    await refresh(daemon.metrics, daemon.store, daemon.queue)
    before = series(daemon)
    for i in range(1999):
        await create(daemon, f"c{i:04}", source.items_url)
    last = await daemon.create_connector(
        {"name": "last", "source": http_source(source), "indexer": {"type": "store"}}
    )
    await daemon.trigger_sync(last.id)
    await daemon.wait_run(last.id)
    await refresh(daemon.metrics, daemon.store, daemon.queue)
    assert series(daemon) == before
    # The documents of the 2,001st connector count: one aggregate query, no cap.
    assert value(daemon, "syncd_documents", status="indexed") == 50
    assert value(daemon, "syncd_connectors", status="active", sync_status="idle") == 2001
    assert value(daemon, "syncd_runs_total", trigger="manual", outcome="succeeded") == 2
    assert value(daemon, "syncd_run_duration_seconds_count", trigger="manual", outcome="succeeded")
    assert value(daemon, "syncd_last_success_timestamp_seconds") > 0


async def test_totals_and_rejections_on_each_backend(any_daemon: Daemon) -> None:
    records: list[dict[str, Any]] = [{"id": f"r{i}"} for i in range(12)]
    records.insert(3, {"id": None})
    async with SourceServer(records, page_size=5) as server:
        paused = await any_daemon.create_connector(
            {"name": "paused", "source": http_source(server)}
        )
        await any_daemon.update_connector(paused.id, {"status": "paused"})
        c = await any_daemon.create_connector(
            {"name": "items", "source": http_source(server), "indexer": {"type": "store"}}
        )
        await any_daemon.trigger_sync(c.id)
        await any_daemon.wait_run(c.id)
    await refresh(any_daemon.metrics, any_daemon.store, any_daemon.queue)
    assert value(any_daemon, "syncd_documents", status="indexed") == 12
    assert value(any_daemon, "syncd_records_rejected_total") == 1
    assert value(any_daemon, "syncd_connectors", status="active", sync_status="idle") == 1
    assert value(any_daemon, "syncd_connectors", status="paused", sync_status="idle") == 1
    assert value(any_daemon, "syncd_queue_depth") == 0
    assert value(any_daemon, "syncd_syncs_running") == 0


async def test_per_connector_series_only_with_the_key(make_daemon: DaemonFactory) -> None:
    name = "syncd_connector_last_success_timestamp_seconds"
    async with SourceServer(3) as server:
        for per_connector in (False, True):
            d = make_daemon(metrics={"per_connector": per_connector})
            await d.start()
            c = await d.create_connector(
                {"name": f"c-{per_connector}", "source": http_source(server)}
                | {"indexer": {"type": "store"}}
            )
            await d.trigger_sync(c.id)
            await d.wait_run(c.id)
            await refresh(d.metrics, d.store, d.queue)
            found = {dict(labels).get("connector") for n, labels in series(d) if n == name}
            assert found == ({f"c-{per_connector}", "c-False"} if per_connector else set())
            await d.stop()


ServingFactory = Callable[..., Daemon]


@pytest.fixture
async def serving(tmp_path: Path) -> AsyncIterator[ServingFactory]:
    """Build daemons that serve their API on 127.0.0.1 (port 0); stopped at the end."""
    made: list[Daemon] = []

    def build(**sections: dict[str, Any]) -> Daemon:
        d = Daemon(embedded_config(tmp_path, **sections), serve_api=True)
        made.append(d)
        return d

    yield build
    for d in made:
        await d.stop()


async def test_metrics_route_serves_openmetrics_when_asked(serving: ServingFactory) -> None:
    d = serving()
    await d.start()
    async with aiohttp.ClientSession() as http:
        url = f"{d.api_address}/metrics"
        async with http.get(url) as plain:
            assert plain.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert "_created" not in await plain.text()
        accept = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3"
        async with http.get(url, headers={"Accept": accept}) as om:
            assert om.headers["Content-Type"].startswith(
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            )
            assert om.headers["Vary"] == "Accept"
            text = await om.text()
            assert text.endswith("# EOF\n") and "_created" not in text
            assert "syncd_build_info{" in text


# --- log lines ------------------------------------------------------------------------


@pytest.fixture
def receiver_down() -> str:
    """A webhook URL on a port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/index"


def events(logs: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def test_a_failing_webhook_logs_one_warning_per_batch(
    make_daemon: DaemonFactory, receiver_down: str
) -> None:
    # One try: a refused connection is transient, tried again later by default.
    daemon = make_daemon(workers={"batch_size": 100, "max_attempts": 1})
    await daemon.start()
    async with SourceServer(25, page_size=25) as server:
        c = await daemon.create_connector(
            {
                "name": "hook-down",
                "source": http_source(server),
                "indexer": {"type": "webhook", "url": receiver_down},
            }
        )
        with capture_logs() as logs:
            await daemon.trigger_sync(c.id)
            await daemon.wait_run(c.id)
            await daemon.wait_documents(c.id, lambda n: n[DocStatus.FAILED] == 25)
            failed, _ = await daemon.list_documents(c.id, status=DocStatus.FAILED)
            await daemon.stop()  # graceful: every batch ends, its line written
    # One line for the batch of 25 (the source's one page), not one per document.
    [line] = events(logs, "worker.index_failed")
    assert line["log_level"] == "warning"
    assert line["connector_id"] == c.id
    assert (line["count"], line["batch"]) == (25, 25)
    errors = {d.external_id: d.error for d in failed}
    assert line["first_error"] == errors[line["first_document"]]  # as stored
    assert line["first_error"]


async def test_run_start_and_end_lines_tell_the_run(daemon: Daemon) -> None:
    records: list[Any] = [{"id": f"r{i}"} for i in range(22)]
    records[5] = {"id": None}
    async with SourceServer(records, page_size=10) as server:
        c = await daemon.create_connector(
            {"name": "story", "source": http_source(server), "indexer": {"type": "store"}}
        )
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            run_id = await daemon.trigger_sync(c.id)
            await daemon.wait_run(c.id)
    [started] = events(logs, "sync.started")
    assert started["connector"] == "story"
    assert (started["connector_id"], started["run_id"]) == (c.id, run_id)
    assert started["trigger"] == "manual"
    [ended] = events(logs, "sync.ended")
    assert ended["log_level"] == "info"
    assert (ended["connector"], ended["connector_id"], ended["run_id"]) == ("story", c.id, run_id)
    assert (ended["trigger"], ended["outcome"]) == ("manual", "succeeded")
    assert ended["pages"] == 3
    assert (ended["documents_seen"], ended["documents_rejected"]) == (21, 1)
    assert ended["documents_enqueued"] == 21  # every document is new
    assert ended["documents_deleted"] == 0
    assert 0 < ended["duration_seconds"] < 30
    [rejected] = events(logs, "sync.records_rejected")
    assert rejected["count"] == 1


async def test_every_event_is_named_component_dot_event(daemon: Daemon) -> None:
    async with SourceServer(5) as server:
        c = await daemon.create_connector(
            {"name": "names", "source": http_source(server), "indexer": {"type": "store"}}
        )
        with capture_logs() as logs:
            await daemon.trigger_sync(c.id)
            await daemon.wait_run(c.id)
            await daemon.stop()
    names = {e["event"] for e in logs}
    assert {"sync.started", "sync.ended", "daemon.stopped"} <= names
    assert all(n.count(".") == 1 and n == n.lower() and " " not in n for n in names), names


# --- access lines ---------------------------------------------------------------------


@pytest.fixture
def log_output() -> Iterator[io.StringIO]:
    """syncd's logging at level info, as JSON lines in a buffer; restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    drivers = {name: logging.getLogger(name).level for name in DRIVER_LOGGERS}
    access_level = logging.getLogger(ACCESS_LOGGER).level
    config = structlog.get_config()
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    yield buf
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, driver_level in drivers.items():
        logging.getLogger(name).setLevel(driver_level)
    logging.getLogger(ACCESS_LOGGER).setLevel(access_level)
    structlog.configure(**config)


def logged(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


@pytest.mark.parametrize("access", [False, True])
async def test_access_lines_only_when_asked(
    daemon: Daemon, log_output: io.StringIO, access: bool
) -> None:
    runner = await start_api(
        build_app(daemon.service, daemon, daemon.config.api, access=access),
        "127.0.0.1:0",
        token=None,
    )
    try:
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as http:
            for path in ("/healthz", "/connectors/nope"):
                async with http.get(f"http://127.0.0.1:{port}{path}") as response:
                    await response.read()
    finally:
        await runner.cleanup()
    lines = logged(log_output)
    # Never aiohttp's own Apache-style line, with or without the key.
    assert not [line for line in lines if line.get("logger") == "aiohttp.access"]
    access_lines = [line for line in lines if line["event"] == "api.access"]
    if not access:
        assert access_lines == []
        return
    assert [(a["method"], a["path"], a["status"]) for a in access_lines] == [
        ("GET", "/healthz", 200),
        ("GET", "/connectors/nope", 404),
    ]
    for line in access_lines:
        # A debug line, written at log.level = info because log.access asked for it.
        assert (line["level"], line["logger"]) == ("debug", ACCESS_LOGGER)
        assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0


@pytest.mark.parametrize("access", [False, True])
async def test_the_log_access_key_reaches_the_api(
    serving: ServingFactory, log_output: io.StringIO, access: bool
) -> None:
    d = serving(log={"access": access})
    await d.start()
    async with aiohttp.ClientSession() as http, http.get(f"{d.api_address}/healthz") as r:
        assert r.status == 200
    paths = [line["path"] for line in logged(log_output) if line["event"] == "api.access"]
    assert paths == (["/healthz"] if access else [])


async def test_loop_lag_is_exported_and_shows_a_blocked_loop(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "loop-lag" in daemon._supervisor.names
    assert value(daemon, "syncd_event_loop_lag_seconds") >= 0
    gauge = daemon.metrics.loop_lag
    samples: asyncio.Queue[float] = asyncio.Queue()
    original = gauge.set

    def observed(lag: float) -> None:
        original(lag)
        samples.put_nowait(lag)

    monkeypatch.setattr(gauge, "set", observed)
    await samples.get()
    blocked = 0.3
    # Whatever the watcher's interval (0.1 s), a stall this long makes it wake that late.
    asyncio.get_running_loop().call_soon(time.sleep, blocked)
    while await samples.get() < blocked - LOOP_LAG_INTERVAL_SECONDS:
        pass
    assert value(daemon, "syncd_event_loop_lag_seconds") >= blocked - LOOP_LAG_INTERVAL_SECONDS
