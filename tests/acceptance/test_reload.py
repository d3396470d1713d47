"""SIGHUP re-reads the configuration (log level, scheduler settings) without dropping runs."""

from __future__ import annotations

import signal

from tests.acceptance.conftest import Harness, http_source, wait_until
from tests.integration.sourceserver import SourceServer


async def test_sighup_reloads_log_level_without_dropping_a_run(
    harness: Harness, source: SourceServer
) -> None:
    harness.write_config(log={"level": "info", "format": "json"})
    daemon = await harness.start()
    created = await harness.api.ok(
        "POST", "/connectors", {"name": "items", "source": http_source(source)}
    )
    cid = created["id"]
    source.hang_on("page-1")
    run = await harness.api.ok("POST", f"/connectors/{cid}/sync")
    await source.requested("page-1").wait()

    harness.write_config(log={"level": "warning", "format": "json"}, scheduler={"tick_seconds": 2})
    daemon.send_signal(signal.SIGHUP)

    async def reloaded() -> bool:
        return any(e.get("event") == "runner.reloaded" for e in daemon.log_events())

    await wait_until(reloaded, "the reload to be logged")
    event = next(e for e in daemon.log_events() if e.get("event") == "runner.reloaded")
    assert (event["log_level"], event["tick_seconds"]) == ("warning", 2.0)
    after_reload = len(daemon.log_events())

    # The run started before the reload goes on and completes.
    source.release()

    async def finished() -> bool:
        return (await harness.api.connector(cid))["sync_status"] == "idle"

    await wait_until(finished, "the run to finish")
    runs = await harness.api.runs(cid)
    assert [(r["id"], r["outcome"]) for r in runs] == [(run["run_id"], "succeeded")]
    # Info lines ("sync.ended", ...) are no longer written at level warning.
    later = daemon.log_events()[after_reload:]
    assert not [e for e in later if e.get("level") == "info"], later
    assert daemon.returncode is None  # still serving; the harness stops it
