"""Stop and restart (DESIGN.md §4 "Stop and restart", §5): SIGTERM during a sync, kill -9
during a sync, and the scheduler taking an orphaned run over as a stale lock."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import STATE_TIMEOUT, Harness, Process, http_source, wait_until
from tests.integration.sourceserver import SourceServer

GRACE = 5.0
_DB_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"  # how the SQLite store writes timestamps


async def create(harness: Harness, source: SourceServer, **fields: Any) -> str:
    body = {"name": "items", "source": http_source(source), "page_retries": 0, **fields}
    connector = await harness.api.ok("POST", "/connectors", body)
    return str(connector["id"])


async def start_hung_sync(harness: Harness, source: SourceServer, cid: str) -> str:
    """Start a sync through the CLI; return once it has committed pages 0 and 1 and hangs
    on the request for page 2."""
    source.hang_on("page-2")
    started = await harness.cli("sync", cid)
    assert started.code == 0, started.stderr
    async with asyncio.timeout(STATE_TIMEOUT):
        await source.requested("page-2").wait()
    return started.stdout.removeprefix("sync started: run ").strip()


async def kill_hard(daemon: Process) -> None:
    daemon.send_signal(signal.SIGKILL)
    assert await daemon.wait(10.0) == -signal.SIGKILL


async def test_sigterm_interrupts_the_run_and_the_next_sync_resumes(
    harness: Harness, source: SourceServer
) -> None:
    harness.write_config(daemon={"grace_seconds": GRACE})
    daemon = await harness.start()
    cid = await create(harness, source)
    # A failed sync first, so that "status unchanged" means `error` stays `error`.
    source.fail_next(500)
    failed = await harness.cli("sync", cid, "--follow")
    assert failed.code == 1 and failed.last_line.startswith("failed: ")
    before = await harness.api.connector(cid)
    assert before["status"] == "error" and "500" in before["last_error"]

    run_id = await start_hung_sync(harness, source, cid)
    signalled = time.monotonic()
    daemon.send_signal(signal.SIGTERM)
    assert await daemon.wait(GRACE + 5) == 0
    elapsed = time.monotonic() - signalled
    assert elapsed < GRACE, f"stopping took {elapsed:.2f}s"
    ended = [e for e in daemon.log_events() if e.get("event") == "sync.ended"]
    assert [(e["run_id"], e["outcome"]) for e in ended][-1] == (run_id, "interrupted")

    await harness.start()
    after = await harness.api.connector(cid)
    assert (after["sync_status"], after["run_id"]) == ("idle", None)
    assert (after["status"], after["last_error"]) == ("error", before["last_error"])
    interrupted, first = await harness.api.runs(cid)
    assert first["outcome"] == "failed"
    assert interrupted["id"] == run_id
    assert (interrupted["outcome"], interrupted["finished_at"] is not None) == (
        "interrupted",
        True,
    )
    assert (interrupted["pages"], interrupted["documents_seen"]) == (2, 20)

    source.release()
    asked = len(source.cursors)
    resumed = await harness.cli("sync", cid, "--follow")
    assert resumed.code == 0, resumed.stdout + resumed.stderr
    assert resumed.last_line == "succeeded"
    assert source.cursors[asked:] == ["page-2"]  # from the checkpoint, not page 0
    latest = (await harness.api.runs(cid))[0]
    assert (latest["outcome"], latest["pages"], latest["documents_seen"]) == ("succeeded", 1, 5)
    final = await harness.api.connector(cid)
    assert (final["status"], final["last_error"], final["sync_status"]) == ("active", None, "idle")


async def test_kill_9_leaves_an_orphaned_run_that_abort_clears(
    harness: Harness, source: SourceServer
) -> None:
    harness.write_config()
    daemon = await harness.start()
    cid = await create(harness, source)
    run_id = await start_hung_sync(harness, source, cid)
    running = await harness.api.connector(cid)
    dead_owner = running["sync_owner"]
    assert running["run_id"] == run_id and dead_owner
    await kill_hard(daemon)

    await harness.start()
    orphaned = await harness.api.connector(cid)
    assert (orphaned["sync_status"], orphaned["run_id"]) == ("running", run_id)
    assert orphaned["sync_owner"] == dead_owner
    assert orphaned["sync_heartbeat_at"] is not None

    refused = await harness.cli("sync", cid)
    assert refused.code == 1
    assert "409 Sync already in progress" in refused.stderr
    answer = await harness.api.request("POST", f"/connectors/{cid}/sync")
    assert answer.status == 409
    assert answer.json == {"detail": "Sync already in progress", "run_id": run_id}

    aborted = await harness.cli("abort", cid, "--json")
    assert aborted.code == 0, aborted.stderr
    assert aborted.json == {
        "connector_id": cid,
        "run_id": run_id,
        "status": "abort_requested",
    }
    idle = await harness.api.connector(cid)  # at once: nothing needs to wind down
    assert (idle["sync_status"], idle["run_id"], idle["status"]) == ("idle", None, "active")
    [run] = await harness.api.runs(cid)
    assert (run["id"], run["outcome"]) == (run_id, "aborted")

    source.release()
    asked = len(source.cursors)
    again = await harness.cli("sync", cid, "--follow")
    assert again.code == 0, again.stdout + again.stderr
    assert again.last_line == "succeeded"
    assert source.cursors[asked:] == ["page-2"]

    async def all_indexed() -> bool:
        documents = (await harness.api.connector(cid))["documents"]
        expected = {"pending": 0, "running": 0, "indexed": 25, "failed": 0, "deleted": 0}
        return bool(documents == expected)

    await wait_until(all_indexed, "every document indexed")


def shift_back(db: Path, cid: str, seconds: float) -> None:
    """Move the connector's run start, heartbeat and next scheduled time ``seconds`` into
    the past, as if the daemon had been down that long."""
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT sync_started_at, sync_heartbeat_at, next_run_at FROM connectors WHERE id = ?",
            (cid,),
        ).fetchone()
        assert row is not None and None not in row, row
        moved = [
            (
                datetime.strptime(v, _DB_TIME).replace(tzinfo=UTC) - timedelta(seconds=seconds)
            ).strftime(_DB_TIME)
            for v in row
        ]
        conn.execute(
            "UPDATE connectors SET sync_started_at = ?, sync_heartbeat_at = ?, next_run_at = ? "
            "WHERE id = ?",
            (*moved, cid),
        )
    conn.close()


async def test_scheduler_takes_over_a_stale_lock(harness: Harness, source: SourceServer) -> None:
    # The first daemon never ticks after start-up: the orphaned run is made only by the kill.
    harness.write_config()
    daemon = await harness.start()
    cid = await create(harness, source, sync_schedule="* * * * *")
    old_run = await start_hung_sync(harness, source, cid)
    dead_owner = (await harness.api.connector(cid))["sync_owner"]
    await kill_hard(daemon)

    # Two minutes of downtime: the run is older than stale_lock_seconds and the schedule
    # is due, so the first tick after the restart must take the run over.
    await asyncio.to_thread(shift_back, harness.db_path, cid, 120)
    harness.write_config(scheduler={"tick_seconds": 0.2, "stale_lock_seconds": 1})
    source.release()
    asked = len(source.cursors)
    restarted_at = datetime.now(UTC)
    await harness.start()

    async def taken_over_and_done() -> bool:
        runs = await harness.api.runs(cid)
        return any(r["trigger"] == "stale_lock" and r["outcome"] != "running" for r in runs)

    await wait_until(taken_over_and_done, "the stale lock to be taken over")
    runs = {r["id"]: r for r in await harness.api.runs(cid)}
    old = runs.pop(old_run)
    assert (old["trigger"], old["outcome"]) == ("manual", "interrupted")
    [new] = [r for r in runs.values() if r["trigger"] == "stale_lock"]
    assert new["outcome"] == "succeeded", new
    assert new["owner"] != dead_owner
    assert (new["pages"], new["documents_seen"]) == (1, 5)
    # Only a scheduled run may follow, if the test crossed a minute boundary.
    assert {r["trigger"] for r in runs.values()} <= {"stale_lock", "schedule"}
    assert source.cursors[asked : asked + 1] == ["page-2"]  # resumed from the checkpoint
    connector = await harness.api.connector(cid)
    assert connector["status"] == "active" and connector["last_error"] is None
    next_run = datetime.fromisoformat(connector["next_run_at"])
    assert next_run > restarted_at  # advanced, not left in the past
