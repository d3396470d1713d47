"""The ``syncd`` CLI against a real daemon: both run as subprocesses, the daemon on the
embedded default (SQLite file, in-process queue) with its API on a unix socket."""

from __future__ import annotations

import json
from typing import Any

from tests.acceptance.conftest import Harness, http_source, wait_until
from tests.integration.sourceserver import SourceServer


def described(stdout: str) -> dict[str, str]:
    """``syncd show`` output (``key:  value`` lines) as a mapping."""
    fields: dict[str, str] = {}
    for line in stdout.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


async def test_connector_lifecycle_through_the_cli(harness: Harness, source: SourceServer) -> None:
    harness.write_config()
    await harness.start()
    definition = harness.root / "tickets.json"
    definition.write_text(json.dumps({"name": "tickets", "source": http_source(source)}))

    created = await harness.cli("create", str(definition), "--json")
    assert created.code == 0, created.stderr
    connector = json.loads(created.stdout)
    cid = connector["id"]
    assert (connector["name"], connector["status"], connector["sync_status"]) == (
        "tickets",
        "active",
        "idle",
    )

    listed = await harness.cli("list")
    assert listed.code == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "STATUS", "SYNC"]
    assert [row.split()[:4] for row in rows] == [[cid, "tickets", "active", "idle"]]

    synced = await harness.cli("sync", cid, "--follow")
    assert synced.code == 0, synced.stderr
    lines = synced.stdout.splitlines()
    assert lines[0].startswith("sync started: run ")
    run_id = lines[0].removeprefix("sync started: run ")
    assert lines[-2] == f"run {run_id}: 3 pages, 25 documents seen, 25 enqueued"
    assert synced.last_line == "succeeded"
    assert source.cursors == [None, "page-1", "page-2"]

    runs = await harness.cli("runs", cid, "--json")
    assert runs.code == 0, runs.stderr
    page: dict[str, Any] = json.loads(runs.stdout)
    assert page["next_cursor"] is None
    [run] = page["data"]
    assert run["id"] == run_id
    assert (run["trigger"], run["outcome"], run["error"]) == ("manual", "succeeded", None)
    assert (run["pages"], run["documents_seen"], run["documents_enqueued"]) == (3, 25, 25)
    assert run["finished_at"] is not None

    documents = await harness.cli("documents", cid)
    assert documents.code == 0, documents.stderr
    header, *rows = documents.stdout.splitlines()
    assert header.split()[:3] == ["EXTERNAL", "ID", "STATUS"]
    assert [row.split()[0] for row in rows] == [f"item-{i:05d}" for i in range(25)]
    assert {row.split()[1] for row in rows} <= {"pending", "running", "indexed"}

    shown = await harness.cli("show", "tickets")  # by name
    assert shown.code == 0, shown.stderr
    fields = described(shown.stdout)
    assert fields["id"] == cid
    assert (fields["name"], fields["status"], fields["sync status"]) == (
        "tickets",
        "active",
        "idle",
    )
    assert fields["progress"] == "3 pages, 25 documents"
    assert fields["last error"] == "-"
    assert fields["last synced"] != "-"

    paused = await harness.cli("pause", cid)
    assert (paused.code, paused.stdout) == (0, "tickets: paused\n")
    refused = await harness.cli("sync", "tickets")
    assert refused.code == 1
    assert refused.stdout == ""
    assert "409 Connector is paused" in refused.stderr
    assert (await harness.api.connector(cid))["sync_status"] == "idle"

    resumed = await harness.cli("resume", "tickets")
    assert (resumed.code, resumed.stdout) == (0, "tickets: active\n")

    deleted = await harness.cli("delete", cid)
    assert (deleted.code, deleted.stdout) == (0, f"deleting connector {cid}\n")

    async def gone() -> bool:
        answer = await harness.api.get(f"/connectors/{cid}")
        if answer.status == 200:  # the cascade runs in the background
            assert answer.json["status"] == "deleting"
            return False
        assert (answer.status, answer.json) == (404, {"detail": "Connector not found"})
        return True

    await wait_until(gone, "the delete cascade")
    missing = await harness.cli("show", cid)
    assert missing.code == 1
    assert "404 Connector not found" in missing.stderr
    assert missing.stdout == ""


async def test_invalid_configuration_stops_start_up(harness: Harness) -> None:
    harness.write_config(workers={"concurrency": "x"})
    daemon = harness.spawn(harness.daemon_argv())
    await daemon.start()
    assert await daemon.wait(20.0) == 2
    assert "".join(daemon.stderr) == (
        f"error: {harness.config_path}: workers.concurrency: expected an integer ≥ 1, got 'x'\n"
    )
    assert daemon.stdout == []
    assert not harness.socket_path.exists()
    assert not harness.db_path.exists()
