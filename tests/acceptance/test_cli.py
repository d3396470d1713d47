"""The ``syncd`` CLI against a real daemon: both run as subprocesses, the daemon on the
embedded default (SQLite file, in-process queue) with its API on a unix socket."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import (
    CLI_TIMEOUT,
    Harness,
    Result,
    base_environ,
    http_source,
    wait_until,
)
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
    # The store indexer indexes the documents a page writes as it stores them: none queued.
    assert lines[-2] == f"run {run_id}: 3 pages, 25 documents seen, 25 indexed"
    assert synced.last_line == "succeeded"
    assert source.cursors == [None, "page-1", "page-2"]

    table = await harness.cli("runs", cid)
    assert table.stdout.split()[:9] == [
        *("ID", "TRIGGER", "OUTCOME", "STARTED", "FINISHED", "PAGES", "SEEN", "INDEXED"),
        "DELETED",
    ]
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


# --- status, document, edit, --json errors, discovery, Ctrl-C, completion ---------------


async def create(harness: Harness, source: SourceServer, name: str = "tickets") -> str:
    definition = harness.root / f"{name}.json"
    definition.write_text(json.dumps({"name": name, "source": http_source(source)}))
    created = await harness.cli("create", str(definition), "--json")
    assert created.code == 0, created.stderr
    cid: str = created.json["id"]
    return cid


async def run_cli(argv: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> Result:
    """``syncd <argv>`` in ``cwd``, with no ``--config``."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "syncd", *argv),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=base_environ(env),
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


async def test_status_and_a_document_with_its_payload(
    harness: Harness, source: SourceServer
) -> None:
    harness.write_config(workers={"concurrency": 3})
    await harness.start()
    status = await harness.cli("status", "--json")
    assert status.code == 0, status.stderr
    answer = status.json
    assert answer["workers"] == {"concurrency": 3, "busy": 0}
    assert (answer["running_syncs"], answer["queue"]) == (0, {"depth": 0})
    [me] = answer["instances"]
    assert (me["owner"], me["instance_id"]) == (answer["owner"], answer["instance_id"])
    shown = await harness.cli("status")
    assert shown.code == 0, shown.stderr
    assert f"version:        {answer['version']}\n" in shown.stdout
    assert "workers:        0 of 3 busy\n" in shown.stdout
    table = shown.stdout.split("\n\n")[1]
    assert table.splitlines()[1].split()[:2] == [answer["instance_id"], answer["owner"]]

    cid = await create(harness, source)
    assert (await harness.cli("sync", cid, "--follow")).code == 0
    document = await harness.cli("document", "tickets", "item-00003")
    assert document.code == 0, document.stderr
    assert document.stdout.splitlines()[:2] == [
        "external id:   item-00003",
        "status:        indexed",
    ]
    payload = document.stdout.split("payload:\n", 1)[1]
    assert json.loads(payload) == source.records[3]
    as_json = await harness.cli("document", cid, "item-00003", "--json")
    assert as_json.json["payload"] == source.records[3]


EDITOR = """\
import sys, yaml
path = sys.argv[-1]
with open(path) as f:
    data = yaml.safe_load(f)
data.update({changes})
with open(path, "w") as f:
    yaml.safe_dump(data, f)
"""


def editor_env(harness: Harness, changes: Mapping[str, Any]) -> dict[str, str]:
    script = harness.root / "editor.py"
    script.write_text(EDITOR.format(changes=json.dumps(changes)))
    return {"EDITOR": f"{sys.executable} {script}", "TMPDIR": str(harness.root)}


async def test_edit_in_the_editor(harness: Harness, source: SourceServer) -> None:
    harness.write_config()
    await harness.start()
    cid = await create(harness, source)
    before = (await harness.api.connector(cid))["updated_at"]

    env = editor_env(harness, {"page_retries": 7, "sync_schedule": "*/5 * * * *"})
    edited = await harness.cli("edit", "tickets", env=env)
    assert edited.code == 0, edited.stderr
    assert edited.stdout == f"updated connector tickets ({cid}): sync_schedule, page_retries\n"
    connector = await harness.api.connector(cid)
    assert (connector["page_retries"], connector["sync_schedule"]) == (7, "*/5 * * * *")
    assert connector["next_run_at"] is not None

    # Invalid: the daemon refuses it, nothing is saved, exit 2, one problem per line.
    env = editor_env(harness, {"page_retries": -1, "sync_schedule": "not cron"})
    refused = await harness.cli("edit", cid, env=env)
    assert refused.code == 2
    *lines, hint = refused.stderr.splitlines()
    assert sorted(line.split(":")[1].strip() for line in lines) == [
        "422 body.page_retries",
        "422 body.sync_schedule",
    ]
    [kept] = harness.root.glob("syncd-edit-*.yaml")
    assert hint == f"nothing saved; your edit is kept in {kept}"
    after = await harness.api.connector(cid)
    assert (after["page_retries"], after["sync_schedule"]) == (7, "*/5 * * * *")
    assert after["updated_at"] != before


async def test_json_errors_on_stdout(harness: Harness) -> None:
    harness.write_config()
    await harness.start()
    missing = await harness.cli("show", "nope", "--json")
    assert missing.code == 1
    assert missing.json["error"] == {
        "kind": "api",
        "message": "404 Connector not found",
        "exit_code": 1,
        "status": 404,
        "detail": "Connector not found",
        "body": {"detail": "Connector not found"},
    }
    assert missing.stderr == "error: 404 Connector not found\n"
    invalid = harness.root / "bad.json"
    invalid.write_text(json.dumps({"name": "x", "source": {"url": "ftp://x"}, "page_retries": -1}))
    refused = await harness.cli("create", str(invalid), "--json")
    assert refused.code == 1
    error = refused.json["error"]
    assert error["status"] == 422
    assert len(error["problems"]) >= 2
    assert refused.stderr.splitlines() == [f"error: 422 {p}" for p in error["problems"]]


async def test_every_command_finds_the_daemon_as_run_does(
    harness: Harness, source: SourceServer
) -> None:
    config = harness.write_config()
    # `run` without --config in the directory of config.toml: it reads it.
    daemon = harness.spawn([sys.executable, "-m", "syncd", "run"])
    await daemon.start()
    await harness.wait_ready(daemon, harness.api)
    await create(harness, source)

    listed = await run_cli(["list"], cwd=harness.root)
    assert listed.code == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[1] == "tickets"
    shown = await run_cli(["show", "tickets", "--json"], cwd=harness.root)
    assert (shown.code, shown.json["name"]) == (0, "tickets")
    # Elsewhere, $SYNCD_CONFIG names the file; it wins over a ./config.toml.
    elsewhere = harness.root / "elsewhere"
    elsewhere.mkdir()
    listed = await run_cli(["list"], cwd=elsewhere, env={"SYNCD_CONFIG": str(config)})
    assert listed.code == 0, listed.stderr
    (elsewhere / "config.toml").write_text('[api]\nlisten = "unix:/nonexistent/syncd.sock"\n')
    listed = await run_cli(["list"], cwd=elsewhere, env={"SYNCD_CONFIG": str(config)})
    assert listed.code == 0, listed.stderr
    unreachable = await run_cli(["list"], cwd=elsewhere)
    assert unreachable.code == 3
    assert "unix:/nonexistent/syncd.sock" in unreachable.stderr


async def test_ctrl_c_stops_following_and_the_run_goes_on(
    harness: Harness, source: SourceServer
) -> None:
    harness.write_config()
    await harness.start()
    cid = await create(harness, source)
    source.hang_on("page-1")
    follow = harness.spawn(
        [
            sys.executable,
            "-m",
            "syncd",
            "sync",
            cid,
            "--follow",
            "--config",
            str(harness.config_path),
        ]
    )
    await follow.start()
    await asyncio.wait_for(source.requested("page-1").wait(), CLI_TIMEOUT)

    async def progress_shown() -> bool:
        return any(line.startswith("pages 1") for line in follow.stdout)

    await wait_until(progress_shown, "a progress line")
    follow.send_signal(signal.SIGINT)
    assert await follow.wait(CLI_TIMEOUT) == 130
    run_id = follow.stdout[0].removeprefix("sync started: run ").strip()
    assert "".join(follow.stderr) == f"\nstopped following; run {run_id} goes on in the daemon\n"
    assert (await harness.api.connector(cid))["run_id"] == run_id  # still running

    source.release()

    async def finished() -> bool:
        return bool((await harness.api.connector(cid))["sync_status"] == "idle")

    await wait_until(finished, "the run to finish")
    runs = await harness.cli("runs", cid, "--json")
    assert runs.json["data"][0]["outcome"] == "succeeded"


async def test_completion_scripts(harness: Harness) -> None:
    for shell, marker in (
        ("bash", "complete -o bashdefault -F _shtab_syncd syncd\n"),
        ("zsh", "#compdef syncd\n"),
    ):
        result = await harness.cli("completion", shell, config=False)
        assert result.code == 0, result.stderr
        assert marker in result.stdout
        for command in ("edit", "status", "document", "sync", "completion"):
            assert command in result.stdout
    # The bash script loads, and registers the completion of `syncd`.
    script = harness.root / "syncd.bash"
    script.write_text((await harness.cli("completion", "bash", config=False)).stdout)
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        f"source {script} && complete -p syncd",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    assert (proc.returncode, out) == (0, b"complete -o bashdefault -F _shtab_syncd syncd\n")
