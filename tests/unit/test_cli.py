"""The ``syncd`` CLI: argument handling, output formats and exit codes.

Client commands talk to a real local aiohttp server serving canned answers of the control
API (DESIGN.md §3). It stands in for the daemon only to check what the CLI sends, prints and
returns; the CLI against a real daemon is covered by the acceptance tests.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from syncd.cli.client import ApiError, Client, DaemonUnreachable, url_from_listen
from syncd.cli.entry import Streams, build_parser, execute, main
from syncd.cli.files import ConnectorFileError, parse_connector_text
from syncd.cli.format import progress_bar, render_table

REPO = Path(__file__).resolve().parents[2]

T0 = "2024-05-01T12:00:00.123456Z"


def connector(cid: str, name: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": cid,
        "name": name,
        "status": "active",
        "sync_status": "idle",
        "last_error": None,
        "run_id": None,
        "sync_started_at": None,
        "last_synced_at": T0,
        "sync_schedule": "*/15 * * * *",
        "sync_timezone": None,
        "next_run_at": "2024-05-01T12:15:00Z",
        "created_at": T0,
        "updated_at": T0,
        "source": {"type": "http", "url": "http://127.0.0.1:9/items", "headers": {"X": "***"}},
        "indexer": {"type": "store"},
        "page_retries": 3,
        "page_retry_backoff": 2.0,
        "throttle_seconds": 0.0,
        "retry_on_status": [502, 503, 504],
        "progress": {"pages": 4, "documents": 400},
        "waiting": None,
        "sync_owner": None,
        "sync_heartbeat_at": None,
        "documents": {"pending": 0, "running": 0, "indexed": 398, "failed": 2},
    }
    base.update(fields)
    return base


def run_row(rid: str, outcome: str, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": rid,
        "connector_id": "c1",
        "trigger": "manual",
        "outcome": outcome,
        "started_at": T0,
        "finished_at": "2024-05-01T12:00:05Z",
        "pages": 3,
        "documents_seen": 250,
        "documents_enqueued": 40,
        "error": None,
        "owner": "node-1",
        "deleted": 0,
    }
    row.update(fields)
    return row


STATUS = {
    "version": "0.1.0",
    "instance_id": "node-1",
    "owner": "node-1/a1b2c3",
    "started_at": "2024-05-01T10:00:00Z",
    "workers": {"concurrency": 4, "busy": 2},
    "queue": {"depth": 12},
    "running_syncs": 1,
    "loop_lag_seconds": 0.0042,
    "instances": [
        {
            "instance_id": "node-1",
            "owner": "node-1/a1b2c3",
            "version": "0.1.0",
            "started_at": "2024-05-01T10:00:00Z",
            "heartbeat_at": "2024-05-01T12:00:00Z",
            "running_syncs": 1,
            "workers": {"concurrency": 4, "busy": 2},
            "loop_lag_seconds": 0.0042,
        },
        {
            "instance_id": "node-2",
            "owner": "node-2/d4e5f6",
            "version": "0.1.0",
            "started_at": "2024-05-01T11:00:00Z",
            "heartbeat_at": "2024-05-01T12:00:01Z",
            "running_syncs": 0,
            "workers": {"concurrency": 8, "busy": 0},
        },
    ],
}


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    authorization: str | None
    body: Any


@dataclass
class FakeApi:
    """Canned answers of the control API, and a log of what was asked."""

    connectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    documents: list[dict[str, Any]] = field(default_factory=list)
    # States GET /connectors/{id} answers once a sync was started, one per request.
    script: list[dict[str, Any]] = field(default_factory=list)
    sync_started: bool = False
    page_size: int = 100
    token: str | None = None
    seen: list[Seen] = field(default_factory=list)
    hang: asyncio.Event = field(default_factory=asyncio.Event)
    preview_answer: dict[str, Any] = field(default_factory=dict)
    # Answer a sync as queued (no free run slot), as admission control does.
    queue_syncs: bool = False

    def requests(self, method: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method]

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        auth = request.headers.get("Authorization")
        self.seen.append(Seen(request.method, request.path, dict(request.query), auth, body))
        if self.token is not None and auth != f"Bearer {self.token}":
            return web.json_response({"detail": "Unauthorized"}, status=401)
        result: web.StreamResponse = await handler(request)
        return result

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.middleware])
        r = app.router
        r.add_get("/connectors", self.list_connectors)
        r.add_post("/connectors", self.create)
        r.add_get("/connectors/{id}", self.get)
        r.add_patch("/connectors/{id}", self.patch)
        r.add_delete("/connectors/{id}", self.delete)
        r.add_post("/connectors/{id}/sync", self.sync)
        r.add_post("/connectors/{id}/sync/abort", self.abort)
        r.add_get("/connectors/{id}/runs", self.list_runs)
        r.add_get("/connectors/{id}/documents", self.list_documents)
        r.add_get("/connectors/{id}/documents/{external_id}", self.get_document)
        r.add_get("/status", self.status)
        r.add_post("/connectors/{id}/retry-failed", self.retry_failed)
        r.add_post("/connectors/preview", self.preview)
        r.add_get("/plain-error", self.plain_error)
        r.add_get("/hang", self.hang_forever)
        return app

    def page(self, request: web.Request, items: list[dict[str, Any]]) -> web.Response:
        start = int(request.query.get("cursor", "0"))
        limit = int(request.query.get("limit", self.page_size))
        end = start + limit
        more = end < len(items)
        return web.json_response(
            {"data": items[start:end], "next_cursor": str(end) if more else None}
        )

    def find(self, request: web.Request) -> dict[str, Any]:
        found = self.connectors.get(request.match_info["id"])
        if found is None:
            raise web.HTTPNotFound(
                text=json.dumps({"detail": "Connector not found"}), content_type="application/json"
            )
        return found

    async def list_connectors(self, request: web.Request) -> web.Response:
        items = list(self.connectors.values())
        if "status" in request.query:
            items = [c for c in items if c["status"] == request.query["status"]]
        return self.page(request, items)

    async def get(self, request: web.Request) -> web.Response:
        found = self.find(request)
        if self.sync_started and self.script:
            found.update(self.script.pop(0))
        return web.json_response(found)

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "source" not in body:
            detail = [{"loc": ["source"], "msg": "field required"}]
            return web.json_response({"detail": detail}, status=422)
        if any(c["name"] == body["name"] for c in self.connectors.values()):
            return web.json_response({"detail": "Connector name already exists"}, status=409)
        created = connector(f"c{len(self.connectors) + 1}", body["name"], source=body["source"])
        self.connectors[created["id"]] = created
        return web.json_response(created, status=201)

    async def patch(self, request: web.Request) -> web.Response:
        found = self.find(request)
        if found["status"] == "deleting":
            return web.json_response({"detail": "Connector is being deleted"}, status=409)
        body = await request.json()
        problems = [
            {"loc": [key], "msg": "Must be a non-empty string"}
            for key in ("name", "sync_schedule")
            if body.get(key) == ""
        ]
        if problems:
            return web.json_response({"detail": problems}, status=422)
        found.update(body)
        return web.json_response(found)

    async def delete(self, request: web.Request) -> web.Response:
        found = self.find(request)
        if found["sync_status"] == "running":
            detail = "Cannot delete connector while sync is running"
            return web.json_response({"detail": detail}, status=409)
        found["status"] = "deleting"
        return web.json_response({"connector_id": found["id"], "status": "deleting"}, status=202)

    async def sync(self, request: web.Request) -> web.Response:
        found = self.find(request)
        if found["status"] == "paused":
            return web.json_response({"detail": "Connector is paused"}, status=409)
        if found["sync_status"] == "running":
            body = {"detail": "Sync already in progress", "run_id": found["run_id"]}
            return web.json_response(body, status=409)
        if self.queue_syncs:
            found.update(sync_status="queued")
            body = {"connector_id": found["id"], "run_id": None, "sync_status": "queued"}
            return web.json_response(body, status=202)
        found.update(sync_status="running", run_id="r-new")
        self.sync_started = True
        body = {"connector_id": found["id"], "run_id": "r-new", "sync_status": "running"}
        return web.json_response(body, status=202)

    async def abort(self, request: web.Request) -> web.Response:
        found = self.find(request)
        if found["sync_status"] != "running":
            return web.json_response({"detail": "No sync in progress"}, status=409)
        body = {"connector_id": found["id"], "run_id": found["run_id"], "status": "abort_requested"}
        found.update(sync_status="idle", run_id=None)
        return web.json_response(body, status=202)

    async def list_runs(self, request: web.Request) -> web.Response:
        found = self.find(request)
        return self.page(request, self.runs.get(found["id"], []))

    async def list_documents(self, request: web.Request) -> web.Response:
        self.find(request)
        items = self.documents
        if "status" in request.query:
            items = [d for d in items if d["status"] == request.query["status"]]
        return self.page(request, items)

    async def get_document(self, request: web.Request) -> web.Response:
        self.find(request)
        for doc in self.documents:
            if doc["external_id"] == request.match_info["external_id"]:
                return web.json_response(doc)
        return web.json_response({"detail": "Document not found"}, status=404)

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(STATUS)

    async def retry_failed(self, request: web.Request) -> web.Response:
        self.find(request)
        return web.json_response({"requeued": 2}, status=202)

    async def preview(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("connector_id") not in (None, *self.connectors):
            return web.json_response({"detail": "Connector not found"}, status=404)
        return web.json_response(self.preview_answer)

    async def plain_error(self, request: web.Request) -> web.Response:
        return web.Response(status=500, text="upstream exploded\n")

    async def hang_forever(self, request: web.Request) -> web.Response:
        await self.hang.wait()
        return web.json_response({})


async def start(app: web.Application, site: str) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    if site.startswith("unix:"):
        await web.UnixSite(runner, site.removeprefix("unix:")).start()
        return runner, site
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


@pytest.fixture(autouse=True)
def no_config_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run in an empty directory: a ``config.toml`` where pytest was started (this
    repository has one) must not be found by the configuration discovery."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeApi, str]]:
    api = FakeApi()
    api.connectors = {
        "c1": connector("c1", "tickets"),
        "c2": connector(
            "c2", "users", status="error", last_error="HTTP 500 from source", last_synced_at=None
        ),
    }
    runner, url = await start(api.app(), "tcp")
    try:
        yield api, url
    finally:
        api.hang.set()
        await runner.cleanup()


@dataclass
class Result:
    code: int
    out: str
    err: str


class TtyBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


async def syncd(
    *argv: str,
    environ: Mapping[str, str] | None = None,
    stdin: str = "",
    stdout: io.StringIO | None = None,
) -> Result:
    """Run a client command in this event loop (the fake server shares it)."""
    out, err = stdout or io.StringIO(), io.StringIO()
    args = build_parser().parse_args(argv)
    streams = Streams(io.StringIO(stdin), out, err)
    code = await execute(args, streams=streams, environ=environ or {})
    return Result(code, out.getvalue(), err.getvalue())


def code_under_test_env() -> dict[str, str]:
    """The environment without ``SYNCD_*``, importing syncd from this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCD_")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


async def subprocess_syncd(
    *argv: str, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Result:
    """Run ``python -m syncd`` as a real process (without blocking the fake server)."""
    env = code_under_test_env()
    env.update(environ or {})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "syncd",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


# --- as a real process ----------------------------------------------------------------


async def test_help_as_a_process() -> None:
    result = await subprocess_syncd("--help")
    assert result.code == 0
    commands = ("run", "list", "show", "create", "update", "validate", "preview", "sync", "abort")
    for command in (*commands, "pause", "resume"):
        assert f"\n    {command} " in result.out
    assert "delete" in result.out and "runs" in result.out and "documents" in result.out


async def test_config_error_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "syncd.toml"
    path.write_text('[workers]\nconcurrency = "four"\n', encoding="utf-8")
    result = await subprocess_syncd("run", "--config", str(path))
    assert result.code == 2
    assert result.out == ""
    assert result.err == (
        f"error: {path}: workers.concurrency: expected an integer ≥ 1, got 'four'\n"
    )


async def test_config_error_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    result = await subprocess_syncd("run", environ={"SYNCD_STORE_URL": "mysql://x"}, cwd=tmp_path)
    assert result.code == 2
    assert result.err.startswith("error: SYNCD_STORE_URL: expected a sqlite:///path")


async def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    result = await subprocess_syncd("run", environ={"SYNCD_CONFIG": str(missing)})
    assert result.code == 2
    assert str(missing) in result.err and "SYNCD_CONFIG" in result.err


async def test_list_as_a_process(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    result = await subprocess_syncd("list", "--url", url)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATUS", "SYNC", "LAST", "SYNCED", "NEXT", "RUN",
                                "LAST", "ERROR"]  # fmt: skip
    assert lines[1].split()[:4] == ["c1", "tickets", "active", "idle"]
    assert api.requests("GET")[0].path == "/connectors"


async def test_api_error_as_a_process(fake: tuple[FakeApi, str]) -> None:
    _, url = fake
    result = await subprocess_syncd("show", "nope", environ={"SYNCD_URL": url})
    assert result.code == 1
    assert result.err == "error: 404 Connector not found\n"


async def test_unreachable_as_a_process(tmp_path: Path) -> None:
    result = await subprocess_syncd("list", "--url", f"unix:{tmp_path}/absent.sock")
    assert result.code == 3
    assert result.err.startswith(
        f"error: cannot reach the daemon at unix:{tmp_path}/absent.sock: No such file or directory"
    )


# --- list / show ----------------------------------------------------------------------


async def test_list_table_is_aligned(fake: tuple[FakeApi, str]) -> None:
    _, url = fake
    result = await syncd("list", "--url", url)
    assert result.code == 0
    assert result.err == ""
    assert result.out == (
        "ID  NAME     STATUS  SYNC  LAST SYNCED           NEXT RUN              LAST ERROR\n"
        "c1  tickets  active  idle  2024-05-01 12:00:00Z  2024-05-01 12:15:00Z  -\n"
        "c2  users    error   idle  -                     2024-05-01 12:15:00Z  HTTP 500 from source\n"  # noqa: E501
    )  # fmt: skip


async def test_list_json_is_the_answer_verbatim(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    result = await syncd("list", "--url", url, "--json")
    assert result.code == 0
    assert json.loads(result.out) == {"data": list(api.connectors.values()), "next_cursor": None}


async def test_list_passes_status_limit_and_cursor(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    result = await syncd("list", "--url", url, "--status", "error")
    assert [line.split()[0] for line in result.out.splitlines()] == ["ID", "c2"]
    result = await syncd("list", "--url", url, "--limit", "1")
    assert [line.split()[0] for line in result.out.splitlines()] == ["ID", "c1"]
    assert result.err == "more connectors: add --cursor 1\n"
    result = await syncd("list", "--url", url, "--limit", "1", "--cursor", "1")
    assert [line.split()[0] for line in result.out.splitlines()] == ["ID", "c2"]
    assert [s.query for s in api.requests("GET")] == [
        {"status": "error"},
        {"limit": "1"},
        {"limit": "1", "cursor": "1"},
    ]


async def test_empty_list(fake: tuple[FakeApi, str]) -> None:
    _, url = fake
    result = await syncd("list", "--url", url, "--status", "deleting")
    assert (result.code, result.out, result.err) == (0, "", "no connectors\n")


async def test_show_by_id(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.connectors["c2"]["sync_timezone"] = "Europe/Paris"
    result = await syncd("show", "c2", "--url", url)
    assert result.code == 0
    fields = dict(line.split(":  ", 1) for line in result.out.splitlines())
    fields = {k.rstrip(): v.strip() for k, v in fields.items()}
    assert fields["id"] == "c2"
    assert fields["status"] == "error"
    assert fields["last error"] == "HTTP 500 from source"
    assert fields["last synced"] == "-"
    assert fields["schedule"] == "*/15 * * * * (Europe/Paris)"
    assert fields["progress"] == "4 pages, 400 documents"
    assert fields["documents"] == "pending 0, running 0, indexed 398, failed 2"
    assert fields["source"] == (
        '{"type":"http","url":"http://127.0.0.1:9/items","headers":{"X":"***"}}'
    )


async def test_show_by_name_found_on_a_later_page(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.page_size = 1
    result = await syncd("show", "users", "--url", url, "--json")
    assert result.code == 0
    assert json.loads(result.out) == api.connectors["c2"]
    assert [(s.path, s.query) for s in api.requests("GET")] == [
        ("/connectors/users", {}),
        ("/connectors", {}),
        ("/connectors", {"cursor": "1"}),
        ("/connectors/c2", {}),
    ]


async def test_unknown_connector_is_404(fake: tuple[FakeApi, str]) -> None:
    _, url = fake
    result = await syncd("show", "nope", "--url", url)
    assert (result.code, result.out, result.err) == (1, "", "error: 404 Connector not found\n")


async def test_ids_are_escaped_in_paths(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.connectors["a/b c"] = connector("a/b c", "odd")
    result = await syncd("show", "a/b c", "--url", url, "--json")
    assert result.code == 0
    assert json.loads(result.out)["name"] == "odd"


# --- create ---------------------------------------------------------------------------


async def test_create_from_file_and_stdin(fake: tuple[FakeApi, str], tmp_path: Path) -> None:
    api, url = fake
    body = {"name": "orders", "source": {"type": "http", "url": "http://127.0.0.1:9/o"}}
    path = tmp_path / "orders.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    result = await syncd("create", str(path), "--url", url)
    assert (result.code, result.out) == (0, "created connector orders (c3)\n")
    assert api.requests("POST")[0].body == body
    body["name"] = "orders-2"
    result = await syncd("create", "-", "--url", url, "--json", stdin=json.dumps(body))
    assert result.code == 0
    assert json.loads(result.out) == api.connectors["c4"]


async def test_create_conflict_and_validation_errors(
    fake: tuple[FakeApi, str], tmp_path: Path
) -> None:
    _, url = fake
    result = await syncd("create", "-", "--url", url, stdin='{"name": "tickets", "source": {}}')
    assert (result.code, result.err) == (1, "error: 409 Connector name already exists\n")
    result = await syncd("create", "-", "--url", url, stdin='{"name": "x"}')
    assert (result.code, result.err) == (1, "error: 422 source: field required\n")


async def test_create_with_unusable_input_exits_2(
    fake: tuple[FakeApi, str], tmp_path: Path
) -> None:
    api, url = fake
    result = await syncd("create", "-", "--url", url, stdin="{not json")
    assert result.code == 2
    assert result.err.startswith("error: stdin is not valid JSON: ")
    result = await syncd("create", str(tmp_path / "absent.json"), "--url", url)
    assert result.code == 2
    assert result.err == f"error: cannot read {tmp_path}/absent.json: No such file or directory\n"
    assert api.seen == []


# --- sync, abort, pause, resume, delete -------------------------------------------------


async def test_sync_by_name(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    result = await syncd("sync", "tickets", "--url", url)
    assert (result.code, result.out, result.err) == (0, "sync started: run r-new\n", "")
    assert [s.path for s in api.requests("POST")] == ["/connectors/c1/sync"]


async def test_sync_queued_without_a_free_slot(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.queue_syncs = True
    result = await syncd("sync", "tickets", "--url", url)
    assert (result.code, result.err) == (0, "")
    assert result.out == "sync queued: it starts when a run slot frees\n"
    result = await syncd("sync", "c2", "--url", url, "--json")
    assert json.loads(result.out)["sync_status"] == "queued"


async def test_sync_refused(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.connectors["c1"].update(sync_status="running", run_id="r-old")
    api.connectors["c2"].update(status="paused")
    result = await syncd("sync", "c1", "--url", url)
    assert (result.code, result.err) == (1, "error: 409 Sync already in progress\n")
    result = await syncd("sync", "c2", "--url", url, "--json")
    assert (result.code, result.err) == (1, "error: 409 Connector is paused\n")
    assert json.loads(result.out) == {
        "error": {
            "kind": "api",
            "message": "409 Connector is paused",
            "exit_code": 1,
            "status": 409,
            "detail": "Connector is paused",
            "body": {"detail": "Connector is paused"},
        }
    }


async def test_sync_json(fake: tuple[FakeApi, str]) -> None:
    _, url = fake
    result = await syncd("sync", "c1", "--url", url, "--json")
    assert json.loads(result.out) == {
        "connector_id": "c1",
        "run_id": "r-new",
        "sync_status": "running",
    }


async def test_abort(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    result = await syncd("abort", "c1", "--url", url)
    assert (result.code, result.err) == (1, "error: 409 No sync in progress\n")
    api.connectors["c1"].update(sync_status="running", run_id="r-9")
    result = await syncd("abort", "tickets", "--url", url)
    assert (result.code, result.out) == (0, "abort requested: run r-9\n")
    assert api.requests("POST")[-1].path == "/connectors/c1/sync/abort"


async def test_pause_and_resume_patch_the_status(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    result = await syncd("pause", "tickets", "--url", url)
    assert (result.code, result.out) == (0, "tickets: paused\n")
    result = await syncd("resume", "c1", "--url", url)
    assert (result.code, result.out) == (0, "tickets: active\n")
    patches = api.requests("PATCH")
    assert [(s.path, s.body) for s in patches] == [
        ("/connectors/c1", {"status": "paused"}),
        ("/connectors/c1", {"status": "active"}),
    ]


async def test_delete(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.connectors["c2"].update(sync_status="running", run_id="r-1")
    result = await syncd("delete", "users", "--url", url)
    message = "error: 409 Cannot delete connector while sync is running\n"
    assert (result.code, result.err) == (1, message)
    result = await syncd("delete", "tickets", "--url", url, "--json")
    assert result.code == 0
    assert json.loads(result.out) == {"connector_id": "c1", "status": "deleting"}
    result = await syncd("pause", "c1", "--url", url)
    assert (result.code, result.err) == (1, "error: 409 Connector is being deleted\n")


async def test_retry_failed(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    result = await syncd("retry-failed", "c2", "--url", url)
    assert (result.code, result.out) == (0, "re-queued 2 failed documents\n")
    assert api.requests("POST")[0].path == "/connectors/c2/retry-failed"


# --- runs / documents -------------------------------------------------------------------


async def test_runs_table(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.runs["c1"] = [
        run_row("r2", "failed", error="HTTP 503\nafter 4 attempts"),
        run_row(
            "r1",
            "succeeded",
            trigger="schedule",
            deleted=10,
            end_reason="no next cursor at 'cursor'",
            warnings=["next cursor path 'cursor' was absent from every page"],
        ),
    ]
    result = await syncd("runs", "tickets", "--url", url, "--limit", "5")
    assert result.code == 0
    # The store indexer is done once a page is stored: the count is of documents indexed.
    # How a crawl ended is a column; a warning about it, a line under the table.
    assert result.out == (
        "ID  TRIGGER   OUTCOME    STARTED               FINISHED              PAGES  SEEN  INDEXED  DELETED  ENDED                       ERROR\n"  # noqa: E501
        "r2  manual    failed     2024-05-01 12:00:00Z  2024-05-01 12:00:05Z  3      250   40       0        -                           HTTP 503 after 4 attempts\n"  # noqa: E501
        "r1  schedule  succeeded  2024-05-01 12:00:00Z  2024-05-01 12:00:05Z  3      250   40       10       no next cursor at 'cursor'  -\n"  # noqa: E501
        "warning: run r1: next cursor path 'cursor' was absent from every page\n"
    )  # fmt: skip
    assert api.requests("GET")[-1].query == {"limit": "5"}
    api.connectors["c1"]["indexer"] = {"type": "webhook", "url": "http://127.0.0.1:9/hook"}
    result = await syncd("runs", "tickets", "--url", url)
    assert result.out.split()[:9] == [
        *("ID", "TRIGGER", "OUTCOME", "STARTED", "FINISHED", "PAGES", "SEEN", "ENQUEUED"),
        "DELETED",
    ]


async def test_documents_table_with_status(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.documents = [
        {"external_id": "7", "status": "failed", "error": "HTTP 500", "attempts": 3,
         "updated_at": T0, "indexed_at": None},
        {"external_id": "8", "status": "indexed", "error": None, "attempts": 1,
         "updated_at": T0, "indexed_at": T0},
    ]  # fmt: skip
    result = await syncd("documents", "c1", "--url", url, "--status", "failed")
    assert result.code == 0
    assert result.out == (
        "EXTERNAL ID  STATUS  ATTEMPTS  UPDATED               INDEXED  ERROR\n"
        "7            failed  3         2024-05-01 12:00:00Z  -        HTTP 500\n"
    )
    assert api.requests("GET")[-1].query == {"status": "failed"}
    result = await syncd("documents", "c1", "--url", url, "--json")
    assert json.loads(result.out) == {"data": api.documents, "next_cursor": None}


# --- sync --follow ----------------------------------------------------------------------

RUNNING = {"sync_status": "running", "run_id": "r-new"}


def follow_script() -> list[dict[str, Any]]:
    return [
        {**RUNNING, "progress": {"pages": 1, "documents": 100}},
        {**RUNNING, "progress": {"pages": 1, "documents": 100}},
        {
            **RUNNING,
            "progress": {"pages": 2, "documents": 200},
            "waiting": {"reason": "backoff", "until": "2024-05-01T12:00:08Z"},
        },
        {**RUNNING, "progress": {"pages": 3, "documents": 250}, "waiting": None},
        {"sync_status": "idle", "run_id": None, "progress": {"pages": 3, "documents": 250}},
    ]


async def test_follow_prints_one_line_per_change_then_the_outcome(
    fake: tuple[FakeApi, str],
) -> None:
    api, url = fake
    api.connectors["c1"]["indexer"] = {"type": "webhook", "url": "http://127.0.0.1:9/hook"}
    api.script = follow_script()
    api.runs["c1"] = [run_row("r-new", "succeeded"), run_row("r-0", "failed")]
    result = await syncd("sync", "tickets", "--follow", "--interval", "0.01", "--url", url)
    assert result.code == 0, result.err
    assert result.out == (
        "sync started: run r-new\n"
        "pages 1  documents 100\n"
        "pages 2  documents 200  waiting: backoff until 12:00:08Z\n"
        "pages 3  documents 250\n"
        "run r-new: 3 pages, 250 documents seen, 40 enqueued\n"
        "succeeded\n"
    )
    assert api.requests("GET")[-1].query == {"limit": "1"}


@pytest.mark.parametrize(
    ("outcome", "error", "last_line"),
    [
        ("failed", "HTTP 503 after 4 attempts", "failed: HTTP 503 after 4 attempts"),
        ("aborted", None, "aborted"),
        ("interrupted", None, "interrupted"),
    ],
)
async def test_follow_exits_1_unless_the_run_succeeded(
    fake: tuple[FakeApi, str], outcome: str, error: str | None, last_line: str
) -> None:
    api, url = fake
    api.script = follow_script()[-2:]
    api.runs["c1"] = [run_row("r-new", outcome, error=error)]
    result = await syncd("sync", "c1", "-f", "--interval", "0.01", "--url", url)
    assert result.code == 1
    assert result.out.splitlines()[-1] == last_line


async def test_follow_ends_with_how_the_crawl_ended_and_its_warnings(
    fake: tuple[FakeApi, str],
) -> None:
    api, url = fake
    api.script = follow_script()[-2:]
    warning = "next cursor path 'cursor' was absent from every page: check `pagination.next_cursor`"
    api.runs["c1"] = [
        run_row("r-new", "succeeded", end_reason="no next cursor at 'cursor'", warnings=[warning])
    ]
    result = await syncd("sync", "c1", "-f", "--interval", "0.01", "--url", url)
    # A warning does not fail the run: the exit code is that of a success.
    assert result.code == 0, result.err
    assert result.out.splitlines()[-4:] == [
        "crawl ended: no next cursor at 'cursor'",
        f"warning: {warning}",
        "run r-new: 3 pages, 250 documents seen, 40 indexed",
        "succeeded",
    ]


async def test_follow_finds_its_run_behind_a_newer_one(fake: tuple[FakeApi, str]) -> None:
    # A scheduled run started right after ours ended: ours is no longer the latest.
    api, url = fake
    api.page_size = 1
    api.script = [{"sync_status": "running", "run_id": "r-next"}]
    api.runs["c1"] = [run_row("r-next", "running"), run_row("r-new", "succeeded")]
    result = await syncd("sync", "c1", "--follow", "--interval", "0.01", "--url", url, "--json")
    assert result.code == 0
    assert json.loads(result.out) == run_row("r-new", "succeeded")
    assert [s.query for s in api.requests("GET")[-3:]] == [{"limit": "1"}, {}, {"cursor": "1"}]


async def test_follow_waits_for_the_outcome_to_be_recorded(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.script = [{"sync_status": "idle", "run_id": None}]
    api.runs["c1"] = [run_row("r-new", "running")]
    original = api.list_runs
    calls = 0

    async def recorded_on_third_look(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        if calls == 3:
            api.runs["c1"] = [run_row("r-new", "succeeded")]
        return await original(request)

    api.list_runs = recorded_on_third_look  # type: ignore[method-assign]
    runner, url = await start(api.app(), "tcp")
    try:
        result = await syncd("sync", "c1", "--follow", "--interval", "0.01", "--url", url)
    finally:
        await runner.cleanup()
    assert result.code == 0
    assert calls == 3
    assert result.out.splitlines()[-1] == "succeeded"


async def test_follow_on_a_terminal_redraws_one_line(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.script = follow_script()
    api.runs["c1"] = [run_row("r-new", "succeeded")]
    tty = TtyBuffer()
    result = await syncd("sync", "c1", "-f", "--interval", "0.01", "--url", url, stdout=tty)
    assert result.code == 0
    # No start time in the answers: the time is the following's (under a second here).
    first, *frames = result.out.split("\r")
    assert first == "sync started: run r-new\n"
    assert frames[0] == "[====                ] 1 pages  100 documents  - docs/s  0:00\x1b[K"
    assert frames[1].startswith("[ ====               ] 1 pages  100 documents")
    assert (
        "] 2 pages  200 documents  - docs/s  0:00  waiting: backoff until 12:00:08Z (0s)\x1b[K"
        in result.out
    )
    assert result.out.endswith(
        "\r\x1b[Krun r-new: 3 pages, 250 documents seen, 40 indexed\nsucceeded\n"
    )
    assert result.out.count("\n") == 3


# --- connection: URL, token, unix socket, config --------------------------------------


async def test_token_from_option_environment_and_config(
    fake: tuple[FakeApi, str], tmp_path: Path
) -> None:
    api, url = fake
    api.token = "s3cret"
    result = await syncd("list", "--url", url)
    assert result.code == 1
    assert result.err == ("error: 401 Unauthorized\nhint: pass --token or set SYNCD_API_TOKEN\n")
    assert (await syncd("list", "--url", url, "--token", "s3cret")).code == 0
    assert (await syncd("list", environ={"SYNCD_URL": url, "SYNCD_API_TOKEN": "s3cret"})).code == 0
    (tmp_path / "token").write_text("s3cret\n", encoding="utf-8")
    port = url.rsplit(":", 1)[1]
    config = tmp_path / "syncd.toml"
    config.write_text(f'[api]\nlisten = "127.0.0.1:{port}"\ntoken_file = "token"\n', "utf-8")
    assert (await syncd("list", "--config", str(config))).code == 0
    assert (await syncd("list", environ={"SYNCD_CONFIG": str(config)})).code == 0
    assert {s.authorization for s in api.seen} == {None, "Bearer s3cret"}


async def test_option_token_wins_over_an_unreadable_token_file(
    fake: tuple[FakeApi, str], tmp_path: Path
) -> None:
    api, url = fake
    api.token = "opt"
    port = url.rsplit(":", 1)[1]
    config = tmp_path / "syncd.toml"
    config.write_text(f'[api]\nlisten = "127.0.0.1:{port}"\ntoken_file = "/absent"\n', "utf-8")
    assert (await syncd("list", "--config", str(config), "--token", "opt")).code == 0
    result = await syncd("list", "--config", str(config))
    assert result.code == 2
    assert result.err == (
        f"error: {config}: api.token_file: cannot read '/absent': No such file or directory\n"
    )


async def test_unix_socket_from_config(tmp_path: Path) -> None:
    api = FakeApi(connectors={"c1": connector("c1", "tickets")})
    sock = f"unix:{tmp_path}/syncd.sock"
    runner, _ = await start(api.app(), sock)
    try:
        config = tmp_path / "syncd.toml"
        config.write_text(f'[api]\nlisten = "{sock}"\n', encoding="utf-8")
        result = await syncd("show", "tickets", "--config", str(config), "--json")
        assert result.code == 0, result.err
        assert json.loads(result.out)["id"] == "c1"
        result = await syncd("list", "--url", sock)
        assert result.out.splitlines()[1].split()[:2] == ["c1", "tickets"]
    finally:
        await runner.cleanup()


async def test_default_url_comes_from_the_listen_setting(fake: tuple[FakeApi, str]) -> None:
    _, url = fake
    port = url.rsplit(":", 1)[1]
    result = await syncd("list", environ={"SYNCD_API_LISTEN": f"127.0.0.1:{port}"})
    assert result.code == 0, result.err


def test_url_from_listen() -> None:
    assert url_from_listen("127.0.0.1:8765") == "http://127.0.0.1:8765"
    assert url_from_listen("0.0.0.0:80") == "http://127.0.0.1:80"
    assert url_from_listen("[::]:80") == "http://[::1]:80"
    assert url_from_listen("[fe80::1]:80") == "http://[fe80::1]:80"
    assert url_from_listen("unix:/run/syncd/syncd.sock") == "unix:/run/syncd/syncd.sock"


async def test_bad_url_or_config_exits_2(tmp_path: Path) -> None:
    result = await syncd("list", "--url", "ftp://example")
    assert (result.code, result.err) == (
        2,
        "error: --url: 'ftp://example': expected http://host:port, https://… or unix:/path\n",
    )
    result = await syncd("list", environ={"SYNCD_API_LISTEN": "nonsense"})
    assert result.code == 2
    assert result.err.startswith("error: SYNCD_API_LISTEN: expected host:port")


async def test_refused_connection_exits_3() -> None:
    with socket.socket() as probe:  # a port nothing listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        result = await syncd("list", "--url", f"http://127.0.0.1:{port}")
    assert result.code == 3
    assert result.err == (
        f"error: cannot reach the daemon at http://127.0.0.1:{port}: Connection refused\n"
        "hint: is the daemon running? (syncd run)\n"
    )


# --- the client on its own ------------------------------------------------------------


async def test_client_times_out_as_unreachable(fake: tuple[FakeApi, str]) -> None:
    _, url = fake
    async with Client(url, timeout=0.2) as client:
        with pytest.raises(DaemonUnreachable, match=r"did not answer within 0\.2 s"):
            await client.request("GET", "/hang")


async def test_client_reports_a_non_json_error(fake: tuple[FakeApi, str]) -> None:
    _, url = fake
    async with Client(url) as client:
        with pytest.raises(ApiError) as info:
            await client.request("GET", "/plain-error")
    assert (info.value.status, info.value.detail, str(info.value)) == (
        500,
        "upstream exploded",
        "500 upstream exploded",
    )


async def test_client_with_a_trailing_slash(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    async with Client(url + "/") as client:
        assert (await client.get_connector("c1"))["name"] == "tickets"
    assert api.seen[-1].path == "/connectors/c1"


def test_render_table() -> None:
    assert render_table(["A", "LONG HEADER"], [["xyz", None], [1, {"k": [1]}]]) == (
        'A    LONG HEADER\nxyz  -\n1    {"k":[1]}\n'
    )


async def test_interrupting_follow_leaves_the_sync_running(fake: tuple[FakeApi, str]) -> None:
    api, url = fake  # no script: once started, the run never ends
    env = code_under_test_env()
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "syncd", "sync", "c1", "--follow", "--url", url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    try:
        assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"sync started: run r-new\n"
        progress = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert progress == b"pages 4  documents 400\n"
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130
    # Not "interrupted", the name of a run's outcome: the run was not interrupted.
    assert err.decode().splitlines()[-1] == "stopped following; run r-new goes on in the daemon"
    assert "interrupted" not in err.decode()
    assert [s.path for s in api.requests("POST")] == ["/connectors/c1/sync"]  # no abort sent


# --- connector files, update, validate, preview -----------------------------------------


def test_connector_files_are_read_by_extension_or_content() -> None:
    parse = parse_connector_text
    yaml_text = "# yaml-language-server: $schema=https://x/schema.json\nname: a\nsource: {url: u}\n"
    assert parse(yaml_text, "c.yaml", suffix=".yaml") == {"name": "a", "source": {"url": "u"}}
    assert parse(yaml_text, "stdin") == {"name": "a", "source": {"url": "u"}}
    assert parse('{"name": "a"}', "stdin") == {"name": "a"}
    assert parse('  {"name": "a"}', "c.YML", suffix=".YML") == {"name": "a"}  # JSON is YAML
    with pytest.raises(ConnectorFileError, match=r"^c\.json is not valid JSON: Expecting"):
        parse("name: a\n", "c.json", suffix=".json")
    with pytest.raises(ConnectorFileError, match="NaN is not valid JSON"):
        parse('{"x": NaN}', "stdin")
    with pytest.raises(ConnectorFileError, match=r"^stdin is not valid YAML: line 1, column 7: "):
        parse("name: *nope\n", "stdin")
    with pytest.raises(ConnectorFileError, match=r"^c\.yaml is empty$"):
        parse("# just a comment\n", "c.yaml", suffix=".yaml")


def test_yaml_that_json_cannot_say_is_refused_with_its_path() -> None:
    text = (
        "name: a\n"
        "source:\n"
        "  params: {since: 2024-01-01, at: 2024-01-01T10:00:00Z, 1: one, big: .inf}\n"
        "  blob: !!binary aGk=\n"
        "loop: &l [*l]\n"
    )
    with pytest.raises(ConnectorFileError) as caught:
        parse_connector_text(text, "c.yaml")
    assert str(caught.value).split("; ") == [
        "c.yaml: source.params: key 1 is not text (quote it)",
        "source.params.since: a YAML date has no JSON form (quote it to keep it as text)",
        "source.params.at: a YAML datetime has no JSON form (quote it to keep it as text)",
        "source.params.big: inf is not a finite number",
        "source.blob: a YAML bytes has no JSON form",
        "loop." + ".".join(["0"] * 64) + ": nested too deeply",
    ]


async def test_create_and_update_from_yaml(fake: tuple[FakeApi, str], tmp_path: Path) -> None:
    api, url = fake
    path = tmp_path / "orders.yml"
    path.write_text("name: orders\nsource:\n  url: http://127.0.0.1:9/o\n", encoding="utf-8")
    result = await syncd("create", str(path), "--url", url)
    assert (result.code, result.out) == (0, "created connector orders (c3)\n")
    assert api.requests("POST")[0].body == {
        "name": "orders",
        "source": {"url": "http://127.0.0.1:9/o"},
    }
    result = await syncd("update", "orders", "-", "--url", url, stdin="name: orders-2\n")
    assert (result.code, result.out) == (0, "updated connector orders-2 (c3)\n")
    assert [(s.path, s.body) for s in api.requests("PATCH")] == [
        ("/connectors/c3", {"name": "orders-2"})
    ]
    result = await syncd("update", "nope", "-", "--url", url, stdin="name: x\n")
    assert (result.code, result.err) == (1, "error: 404 Connector not found\n")


async def test_validate_without_a_daemon(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: a\nsource: {url: 'http://127.0.0.1:9/i'}\n", encoding="utf-8")
    result = await subprocess_syncd("validate", str(path))
    assert (result.code, result.out, result.err) == (0, "valid\n", "")
    path.write_text("name: 3\nsource: {url: 'ftp://x'}\npage_retries: -1\n", encoding="utf-8")
    result = await subprocess_syncd("validate", str(path))
    assert result.code == 2
    assert sorted(line.split(":")[0] for line in result.out.splitlines()) == [
        "name",
        "page_retries",
        "source.url",
    ]
    config = tmp_path / "syncd.toml"
    config.write_text('[workers]\nconcurrency = "x"\n', encoding="utf-8")
    result = await subprocess_syncd("validate", str(path), "--config", str(config))
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(f"error: {config}: workers.concurrency")


PREVIEW = {
    "request": {"method": "GET", "url": "http://s/items?token=***", "headers": {"Auth": "***"}},
    "pages": [
        {
            "records": 3,
            "ids": ["a", "b"],
            "rejected": [{"index": 2, "reason": "id field 'id' is missing"}],
            "next_cursor": "p2",
            "new": ["a"],
            "changed": [],
            "unchanged": ["b"],
        }
    ],
}


async def test_preview_of_a_connector(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.preview_answer = PREVIEW
    result = await syncd("preview", "tickets", "--pages", "3", "--url", url)
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        "GET http://s/items?token=***\n"
        "  Auth: ***\n"
        "page 1: 3 records, 2 ids, 1 rejected; next cursor: p2\n"
        "  new 1: a\n"
        "  changed 0\n"
        "  unchanged 1\n"
        "  rejected record 2: id field 'id' is missing\n"
    )
    assert api.requests("POST")[-1].body == {"connector_id": "c1", "pages": 3}


async def test_preview_of_a_file_with_a_failing_source(
    fake: tuple[FakeApi, str], tmp_path: Path
) -> None:
    api, url = fake
    ids = [f"id-{i}" for i in range(25)]
    page = {"records": 25, "ids": ids, "rejected": [], "next_cursor": None}
    api.preview_answer = {"request": None, "pages": [page], "error": "HTTP 500 from http://s"}
    path = tmp_path / "c.json"
    path.write_text('{"name": "a", "source": {"url": "http://s"}}', encoding="utf-8")
    result = await syncd("preview", str(path), "--timeout", "30", "--url", url)
    assert result.code == 1
    assert result.out == (
        f"page 1: 25 records, 25 ids; next cursor: -\n  ids 25: {', '.join(ids[:20])}, … (5 more)\n"
    )
    assert result.err == "error: HTTP 500 from http://s\n"
    assert api.requests("POST")[-1].body == {
        "connector": {"name": "a", "source": {"url": "http://s"}},
        "pages": 1,
        "timeout_seconds": 30.0,
    }
    result = await syncd("preview", "-", "--json", "--url", url, stdin="name: a\n")
    assert (result.code, json.loads(result.out)) == (1, api.preview_answer)


async def test_preview_pages_are_bounded() -> None:
    result = await subprocess_syncd("preview", "x", "--pages", "11")
    assert result.code == 2
    assert "expected 1 to 10 pages" in result.err


# --- status, document, --json errors, discovery, completion, progress -------------------


async def test_status_shows_this_daemon_and_every_instance(fake: tuple[FakeApi, str]) -> None:
    _, url = fake
    result = await syncd("status", "--url", url)
    assert result.code == 0, result.err
    head, table = result.out.split("\n\n")
    fields = {k: v.strip() for k, _, v in (line.partition(":") for line in head.splitlines())}
    assert fields.pop("started").startswith("2024-05-01 10:00:00Z (up ")
    assert fields == {
        "version": "0.1.0",
        "instance": "node-1",
        "owner": "node-1/a1b2c3",
        "workers": "2 of 4 busy",
        "queue": "12 documents waiting",
        "running syncs": "1",
        "loop lag": "4.2 ms",
    }
    # node-2 runs an earlier version, which reports no loop lag.
    assert table.splitlines() == [
        "INSTANCE  OWNER          VERSION  STARTED               HEARTBEAT             SYNCS  WORKERS  LOOP LAG",  # noqa: E501
        "node-1    node-1/a1b2c3  0.1.0    2024-05-01 10:00:00Z  2024-05-01 12:00:00Z  1      2/4      4.2 ms",  # noqa: E501
        "node-2    node-2/d4e5f6  0.1.0    2024-05-01 11:00:00Z  2024-05-01 12:00:01Z  0      0/8      -",  # noqa: E501
    ]  # fmt: skip
    result = await syncd("status", "--url", url, "--json")
    assert json.loads(result.out) == STATUS


async def test_document_shows_its_payload(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.documents = [
        {
            "external_id": "a/1",
            "status": "indexed",
            "error": None,
            "content_hash": "h1",
            "attempts": 1,
            "created_at": T0,
            "updated_at": T0,
            "indexed_at": T0,
            "payload": {"id": "a/1", "title": "Ünïcode", "n": 12345678901234567890},
        }
    ]
    result = await syncd("document", "tickets", "a/1", "--url", url)
    assert result.code == 0, result.err
    assert result.out == (
        "external id:   a/1\n"
        "status:        indexed\n"
        "error:         -\n"
        "attempts:      1\n"
        "content hash:  h1\n"
        "created:       2024-05-01 12:00:00Z\n"
        "updated:       2024-05-01 12:00:00Z\n"
        "indexed:       2024-05-01 12:00:00Z\n"
        "payload:\n"
        '{\n  "id": "a/1",\n  "title": "Ünïcode",\n  "n": 12345678901234567890\n}\n'
    )
    assert api.seen[-1].path == "/connectors/c1/documents/a/1"  # sent as a%2F1
    result = await syncd("document", "c1", "a/1", "--url", url, "--json")
    assert json.loads(result.out) == api.documents[0]
    result = await syncd("document", "c1", "zz", "--url", url)
    assert (result.code, result.err) == (1, "error: 404 Document not found\n")


async def test_json_errors_go_to_stdout_with_the_same_exit_code(
    fake: tuple[FakeApi, str],
) -> None:
    api, url = fake
    api.connectors["c1"].update(sync_status="running", run_id="r-old")
    result = await syncd("sync", "c1", "--url", url, "--json")
    assert result.code == 1
    assert json.loads(result.out)["error"] == {
        "kind": "api",
        "message": "409 Sync already in progress",
        "exit_code": 1,
        "status": 409,
        "detail": "Sync already in progress",
        "body": {"detail": "Sync already in progress", "run_id": "r-old"},
    }
    result = await syncd("create", "-", "--url", url, "--json", stdin='{"name": "x"}')
    error = json.loads(result.out)["error"]
    assert (result.code, error["status"], error["problems"]) == (1, 422, ["source: field required"])
    result = await syncd("list", "--url", "ftp://x", "--json")
    assert result.code == 2
    assert json.loads(result.out) == {
        "error": {
            "kind": "usage",
            "message": "--url: 'ftp://x': expected http://host:port, https://… or unix:/path",
            "exit_code": 2,
        }
    }
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        result = await syncd("status", "--url", f"http://127.0.0.1:{port}", "--json")
    assert result.code == 3
    assert json.loads(result.out)["error"]["kind"] == "unreachable"
    assert result.err.endswith("hint: is the daemon running? (syncd run)\n")


async def test_a_paused_connector_has_no_next_run(fake: tuple[FakeApi, str]) -> None:
    api, url = fake
    api.connectors["c1"]["status"] = "paused"
    listed = await syncd("list", "--url", url)
    rows = {line.split()[0]: line for line in listed.out.splitlines()[1:]}
    assert "2024-05-01 12:15:00Z" not in rows["c1"]
    assert "2024-05-01 12:15:00Z" in rows["c2"]  # in error: the scheduler still starts it
    shown = await syncd("show", "c1", "--url", url)
    [next_run] = [line for line in shown.out.splitlines() if line.startswith("next run:")]
    assert next_run.split() == ["next", "run:", "-"]


def write_here(name: str, text: str) -> Path:
    """Write ``name`` in the working directory; the directory."""
    Path(name).write_text(text, encoding="utf-8")
    return Path.cwd()


async def test_the_configuration_is_found_like_run_finds_it(
    fake: tuple[FakeApi, str], tmp_path: Path
) -> None:
    api, url = fake
    api.token = "t0k"
    port = url.rsplit(":", 1)[1]
    # ./config.toml in the working directory (the autouse fixture's empty one).
    write_here("config.toml", f'[api]\nlisten = "127.0.0.1:{port}"\ntoken = "t0k"\n')
    result = await syncd("list")
    assert result.code == 0, result.err
    # $SYNCD_CONFIG wins over ./config.toml, and --config over both.
    other = tmp_path / "other.toml"
    other.write_text('[api]\nlisten = "127.0.0.1:1"\n', encoding="utf-8")
    result = await syncd("list", environ={"SYNCD_CONFIG": str(other)})
    assert result.code == 3
    assert "http://127.0.0.1:1" in result.err
    result = await syncd("list", "--config", "config.toml", environ={"SYNCD_CONFIG": str(other)})
    assert result.code == 0, result.err
    # `run` reads the same file: an invalid one there stops it, naming the file.
    work = write_here("config.toml", "[workers]\nconcurrency = 0\n")
    result = await subprocess_syncd("run", cwd=work)
    assert result.code == 2
    assert result.err.startswith("error: config.toml: workers.concurrency: ")


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_scripts_know_every_command(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    commands = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    assert {"edit", "status", "document", "completion"} <= set(commands)
    for name in commands:
        assert name in script
    assert "--follow" in script
    assert ("_shtab_compgen_files" if shell == "bash" else "_files") in script


def test_progress_bar_moves_to_and_fro_with_rate_and_elapsed_time() -> None:
    bar = progress_bar
    assert bar(pages=3, documents=250, elapsed=6.2, frame=0, width=8) == (
        "[====    ] 3 pages  250 documents  40.3 docs/s  0:06"
    )
    frames = [bar(pages=0, documents=0, elapsed=0, frame=f, width=8)[:10] for f in range(9)]
    assert frames == [
        "[====    ]",
        "[ ====   ]",
        "[  ====  ]",
        "[   ==== ]",
        "[    ====]",
        "[   ==== ]",
        "[  ====  ]",
        "[ ====   ]",
        "[====    ]",
    ]
    assert bar(pages=0, documents=9, elapsed=0.5, frame=0).endswith("- docs/s  0:00")
    assert bar(pages=1, documents=7200, elapsed=3725, frame=0).endswith("1.9 docs/s  1:02:05")


# --- edit -------------------------------------------------------------------------------

EDITOR_SCRIPT = """\
import pathlib, sys
path = pathlib.Path(sys.argv[-1])
pathlib.Path({log!r}).write_text(path.read_text())
text = path.read_text()
for old, new in {replacements!r}:
    text = text.replace(old, new)
path.write_text(text)
sys.exit({code})
"""


def editor(tmp_path: Path, *replacements: tuple[str, str], code: int = 0) -> dict[str, str]:
    """``EDITOR``: a script that makes ``replacements`` in the file it is given (and keeps
    a copy of what it was shown in ``shown.yaml``)."""
    script = tmp_path / f"editor-{len(list(tmp_path.glob('editor-*')))}.py"
    log = tmp_path / "shown.yaml"
    script.write_text(
        EDITOR_SCRIPT.format(log=str(log), replacements=list(replacements), code=code)
    )
    return {"EDITOR": f"{sys.executable} {script}", "TMPDIR": str(tmp_path)}


def kept_files(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("syncd-edit-*.yaml"))


async def test_edit_sends_only_the_changed_keys(fake: tuple[FakeApi, str], tmp_path: Path) -> None:
    api, url = fake
    env = editor(
        tmp_path, ("name: tickets", "name: issues"), ("page_retries: 3", "page_retries: 5")
    )
    result = await syncd("edit", "tickets", "--url", url, environ=env)
    assert result.code == 0, result.err
    assert result.out == "updated connector issues (c1): name, page_retries\n"
    assert [s.body for s in api.requests("PATCH")] == [{"name": "issues", "page_retries": 5}]
    shown = (tmp_path / "shown.yaml").read_text()
    assert shown.startswith("# Edit connector tickets (c1)")
    assert "sync_schedule: '*/15 * * * *'" in shown
    assert "\nstatus:" not in shown and "\nprogress:" not in shown  # read-only fields
    assert kept_files(tmp_path) == []


async def test_edit_without_a_change_saves_nothing(
    fake: tuple[FakeApi, str], tmp_path: Path
) -> None:
    api, url = fake
    result = await syncd("edit", "c1", "--url", url, environ=editor(tmp_path))
    assert (result.code, result.err) == (0, "no changes; nothing saved\n")
    result = await syncd("edit", "c1", "--url", url, environ=editor(tmp_path, ("\n", "\n# ")))
    assert result.code == 0
    assert result.err == "edit cancelled: the file is empty; nothing saved\n"
    assert api.requests("PATCH") == []


async def test_an_invalid_edit_saves_nothing_and_keeps_the_file(
    fake: tuple[FakeApi, str], tmp_path: Path
) -> None:
    api, url = fake
    # Refused by the daemon's validation: each problem on its own line, exit 2.
    env = editor(tmp_path, ("name: tickets", "name: ''"), ("'*/15 * * * *'", "''"))
    result = await syncd("edit", "c1", "--url", url, environ=env)
    assert result.code == 2
    [kept] = kept_files(tmp_path)
    assert result.err == (
        "error: 422 name: Must be a non-empty string\n"
        "error: 422 sync_schedule: Must be a non-empty string\n"
        f"nothing saved; your edit is kept in {kept}\n"
    )
    assert api.connectors["c1"]["name"] == "tickets"
    kept.unlink()
    # Not YAML: refused before anything is sent.
    result = await syncd("edit", "c1", "--url", url, environ=editor(tmp_path, ("name:", "[")))
    assert result.code == 2
    assert result.err.startswith("error: ")
    assert "is not valid YAML" in result.err
    kept_files(tmp_path)[0].unlink()
    # A changed source that still holds a masked secret would overwrite it with the mask.
    env = editor(tmp_path, ("url: http://127.0.0.1:9/items", "url: http://127.0.0.1:10/items"))
    result = await syncd("edit", "c1", "--url", url, environ=env, stdin="")
    assert result.code == 2
    assert result.err.startswith('error: source.headers.X: still masked ("***")')
    kept_files(tmp_path)[0].unlink()
    # The editor failed: nothing is sent.
    result = await syncd("edit", "c1", "--url", url, environ=editor(tmp_path, code=3))
    assert result.code == 2
    assert "exited with 3" in result.err
    # Only the first edit reached the daemon (which refused it).
    assert [s.body for s in api.requests("PATCH")] == [{"name": "", "sync_schedule": ""}]


def test_show_prints_the_documents_awaiting_confirmation() -> None:
    from syncd.cli.format import describe_connector

    base = {"id": "c", "name": "posts", "status": "active", "deletions_held": 0}

    def missed(count: int) -> str:
        shown = describe_connector({**base, "documents_awaiting_confirmation": count})
        [line] = [x for x in shown.splitlines() if x.startswith("missed:")]
        return line.removeprefix("missed:").strip()

    assert missed(0) == "-"
    assert missed(1) == "1 document awaiting confirmation"
    assert missed(2) == "2 documents awaiting confirmation"
