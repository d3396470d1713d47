"""Connector files in YAML or JSON through the real ``syncd`` CLI: ``validate`` (offline),
``create`` and ``update``, and ``preview`` of a file or of an existing connector against a
daemon and a real local source."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import sys
from typing import Any

import asyncpg
from aiohttp import web

from syncd.indexers.opensearch.bulk import INDEX_MAPPINGS
from tests.acceptance.conftest import CLI_TIMEOUT, Harness, Result, base_environ, http_source
from tests.integration.searchserver import SearchServer
from tests.integration.sourceserver import SourceServer, make_records

VALID_YAML = """\
# yaml-language-server: $schema=https://example.invalid/syncd/connector.schema.json
name: tickets
source:
  url: {url}
  records: data
  id_field: id
  params:
    limit: 10
    since: "2024-01-01"
  pagination: {{type: cursor, cursor_param: cursor, next_cursor: next_cursor}}
sync_schedule: "*/15 * * * *"
page_retries: 0
"""

INVALID_YAML = """\
name: ""
source:
  url: ftp://example.invalid/items
page_retries: 99
retry_on_status: [200, 503]
colour: blue
"""


def error_paths(result: Result) -> list[str]:
    """The paths of ``validate``'s error lines (``path: message``)."""
    return [line.split(":", 1)[0] for line in result.stdout.splitlines()]


async def syncd_with_stdin(*args: str, stdin: str) -> Result:
    """``syncd <args>`` as a process reading ``stdin``."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "syncd", *args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=base_environ(),
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), CLI_TIMEOUT)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


# --- validate ---------------------------------------------------------------------------


async def test_validate_valid_files_offline(harness: Harness) -> None:
    # No daemon runs: validate needs none.
    harness.write_config(sync={"page_retries": 5})
    url = "http://127.0.0.1:9/items"
    (harness.root / "ok.yaml").write_text(VALID_YAML.format(url=url))
    (harness.root / "ok.json").write_text(json.dumps({"name": "t", "source": {"url": url}}))
    for name in ("ok.yaml", "ok.json"):
        result = await harness.cli("validate", str(harness.root / name))
        assert (result.code, result.stdout, result.stderr) == (0, "valid\n", ""), name
    stdin = await syncd_with_stdin("validate", "-", stdin=VALID_YAML.format(url=url))
    assert (stdin.code, stdin.stdout) == (0, "valid\n"), stdin.stderr


async def test_schema_describes_the_files_validate_accepts(harness: Harness) -> None:
    """`syncd schema` prints the JSON Schema editors use; it accepts the valid file and
    refuses the invalid one, as `validate` does."""
    import jsonschema
    import yaml

    result = await harness.cli("schema")
    assert result.code == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    checker = jsonschema.Draft202012Validator(schema)
    valid = yaml.safe_load(VALID_YAML.format(url="http://127.0.0.1:9/items"))
    assert list(checker.iter_errors(valid)) == []
    assert list(checker.iter_errors(yaml.safe_load(INVALID_YAML)))


async def test_validate_prints_every_error_with_its_path(harness: Harness) -> None:
    harness.write_config()
    (harness.root / "bad.yml").write_text(INVALID_YAML)
    result = await harness.cli("validate", str(harness.root / "bad.yml"))
    assert result.code == 2
    assert result.stderr == ""
    assert sorted(error_paths(result)) == sorted(
        ["name", "source.url", "page_retries", "retry_on_status.0", "colour"]
    )
    assert all(": " in line for line in result.stdout.splitlines())

    body = {"name": "t", "source": {"url": "http://h/i", "params": [1]}, "indexer": {}}
    (harness.root / "bad.json").write_text(json.dumps(body))
    result = await harness.cli("validate", str(harness.root / "bad.json"))
    assert result.code == 2
    assert sorted(error_paths(result)) == ["indexer.type", "source.params"]

    # JSON on stdin, recognised by its content.
    stdin = await syncd_with_stdin("validate", "-", stdin='{"name": "x"}')
    assert (stdin.code, error_paths(stdin)) == (2, ["source"])


async def test_validate_refuses_unreadable_files(harness: Harness) -> None:
    harness.write_config()
    cases = {
        "syntax.yaml": ("name: [unclosed\n", "is not valid YAML: line 2, column 1"),
        "syntax.json": ('{"name": ', "is not valid JSON"),
        "dated.yaml": ("name: t\nsource: {url: 'http://h/i', params: {since: 2024-01-01}}\n",
                       "source.params.since: a YAML date has no JSON form (quote it"),
        "empty.yaml": ("# nothing\n", "is empty"),
    }  # fmt: skip
    for name, (text, message) in cases.items():
        path = harness.root / name
        path.write_text(text)
        result = await harness.cli("validate", str(path))
        assert (result.code, result.stdout) == (2, ""), name
        assert result.stderr.startswith(f"error: {path}"), result.stderr
        assert message in result.stderr, (name, result.stderr)
    missing = await harness.cli("validate", str(harness.root / "absent.yaml"))
    assert missing.code == 2
    assert "No such file or directory" in missing.stderr


# --- validate --connect -----------------------------------------------------------------


def search_connector(url: str, **indexer: Any) -> dict[str, Any]:
    """A connector file whose indexer is the ``opensearch`` index ``docs`` at ``url``."""
    return {
        "name": "t",
        "source": {"url": "http://127.0.0.1:9/items"},
        "indexer": {"type": "opensearch", "url": url, "index": "docs", **indexer},
    }


async def test_validate_connect_reaches_an_index_of_the_right_shape(harness: Harness) -> None:
    harness.write_config()
    async with SearchServer(flavor="elasticsearch", users={"syncd": "pw-from-env"}) as server:
        server.create_index("docs", INDEX_MAPPINGS)
        auth = {"type": "basic", "username": "syncd", "password": "${env:SEARCH_PASSWORD}"}
        path = harness.root / "search.json"
        path.write_text(json.dumps(search_connector(server.url, auth=auth)))

        result = await harness.cli(
            "validate", "--connect", str(path), env={"SEARCH_PASSWORD": "pw-from-env"}
        )

        assert result.code == 0, result
        assert result.stdout == "valid\nindexer: opensearch target reached, no problem found\n"
        # The secret was resolved and sent; nothing was written to the cluster.
        sent = {r.headers.get("Authorization") for r in server.requests}
        assert sent == {"Basic " + base64.b64encode(b"syncd:pw-from-env").decode()}
        assert {r.method for r in server.requests} == {"GET"}
        assert "pw-from-env" not in result.stdout + result.stderr

        # Without --connect nothing is reached.
        before = len(server.requests)
        offline = await harness.cli("validate", str(path))
        assert (offline.code, offline.stdout) == (0, "valid\n")
        assert len(server.requests) == before


async def test_validate_connect_names_what_is_wrong_with_the_index(harness: Harness) -> None:
    harness.write_config()
    mappings = json.loads(json.dumps(INDEX_MAPPINGS))
    mappings["properties"]["text"] = {"type": "keyword"}
    async with SearchServer() as server:
        server.create_index("docs", mappings)
        before = server.mapping("docs")
        path = harness.root / "wrong.json"
        path.write_text(json.dumps(search_connector(server.url)))
        result = await harness.cli("validate", "--connect", str(path))
        assert server.mapping("docs") == before  # never altered

        del server.indices["docs"]
        missing = harness.root / "missing.json"
        missing.write_text(json.dumps(search_connector(server.url, create_index=False)))
        absent = await harness.cli("validate", "--connect", str(missing))
        # With create_index (the default) a missing index is made at first use: no problem,
        # and the check creates nothing.
        later = await harness.cli("validate", "--connect", str(path))
        assert server.indices == {}

    assert result.code == 2, result
    assert result.stdout == (
        "indexer: wrong shape (an existing index is never altered): 'text' is mapped as "
        "keyword (needs text)\n"
    )
    assert (absent.code, absent.stdout) == (
        2,
        "indexer: it does not exist and create_index is false\n",
    )
    assert (later.code, later.stdout.splitlines()[0]) == (0, "valid"), later


async def test_validate_connect_checks_a_postgres_table(
    harness: Harness, postgres_dsn: str
) -> None:
    harness.write_config()
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute("CREATE TABLE docs (connector_id text, external_id text)")
    finally:
        await conn.close()
    indexer = {"type": "postgres", "dsn": "${env:TARGET_DSN}", "table": "docs"}
    path = harness.root / "pg.json"
    path.write_text(
        json.dumps({"name": "t", "source": {"url": "http://127.0.0.1:9/x"}, "indexer": indexer})
    )
    fresh = harness.root / "fresh.json"
    fresh.write_text(path.read_text().replace('"docs"', '"fresh_docs"'))
    env = {"TARGET_DSN": postgres_dsn}

    wrong = await harness.cli("validate", "--connect", str(path), env=env)
    missing = await harness.cli("validate", "--connect", str(fresh), env=env)

    assert wrong.code == 2, wrong
    assert wrong.stdout.startswith("indexer: "), wrong
    assert "content_hash" in wrong.stdout  # a missing column is named
    # A missing table is created at first use: no problem, and the check creates nothing.
    assert (missing.code, missing.stdout.splitlines()[0]) == (0, "valid"), missing
    conn = await asyncpg.connect(postgres_dsn)
    try:
        assert await conn.fetchval("SELECT to_regclass('fresh_docs')") is None
        assert [
            r[0]
            for r in await conn.fetch(
                "SELECT attname FROM pg_attribute WHERE "
                "attrelid = 'docs'::regclass AND attnum > 0 ORDER BY attnum"
            )
        ] == [
            "connector_id",
            "external_id",
        ]  # never altered
    finally:
        await conn.close()


async def test_validate_connect_says_when_the_target_cannot_be_reached(
    harness: Harness,
) -> None:
    harness.write_config()
    path = harness.root / "down.json"
    # A password in the URL is a secret: never printed.
    path.write_text(json.dumps(search_connector("http://syncd:url-secret@127.0.0.1:9")))

    result = await harness.cli("validate", "--connect", str(path))

    assert result.code == 2, result
    (line,) = result.stdout.splitlines()
    assert line.startswith("indexer: index 'docs' at http://127.0.0.1:9: cannot connect"), line
    # The daemon's retries are kept, and said while they wait.
    assert [r.split(":", 1)[0] for r in result.stderr.splitlines()] == [
        "retry 1 of 3",
        "retry 2 of 3",
        "retry 3 of 3",
    ]
    assert "url-secret" not in result.stdout + result.stderr


async def test_validate_connect_with_an_indexer_that_has_nothing_to_reach(
    harness: Harness,
) -> None:
    harness.write_config()
    source = {"url": "http://127.0.0.1:9/items"}
    files = {
        "store": {"name": "t", "source": source},
        "webhook": {"name": "t", "source": source, "indexer": {"type": "webhook",
                                                               "url": "http://127.0.0.1:9/h"}},
    }  # fmt: skip
    for kind, body in files.items():
        path = harness.root / f"{kind}.json"
        path.write_text(json.dumps(body))
        result = await harness.cli("validate", "--connect", str(path))
        assert (result.code, result.stderr) == (0, ""), result
        assert result.stdout == (
            f"valid\nindexer: the {kind} indexer has no connection check: nothing reached\n"
        )
    # An invalid file is refused offline, before anything is reached.
    (harness.root / "bad.json").write_text(json.dumps({"name": "t"}))
    result = await harness.cli("validate", "--connect", str(harness.root / "bad.json"))
    assert (result.code, error_paths(result)) == (2, ["source"])


# --- create and update ------------------------------------------------------------------


async def test_create_and_update_from_yaml(harness: Harness, source: SourceServer) -> None:
    harness.write_config()
    await harness.start()
    path = harness.root / "tickets.yaml"
    path.write_text(VALID_YAML.format(url=source.items_url))
    created = await harness.cli("create", str(path), "--json")
    assert created.code == 0, created.stderr
    connector = created.json
    assert connector["name"] == "tickets"
    assert connector["source"]["params"] == {"limit": 10, "since": "2024-01-01"}
    assert (connector["sync_schedule"], connector["page_retries"]) == ("*/15 * * * *", 0)

    patch = harness.root / "patch.yml"
    patch.write_text("# only what changes\nname: tickets-2\nsync_schedule: null\n")
    updated = await harness.cli("update", "tickets", str(patch))
    assert updated.code == 0, updated.stderr
    assert updated.stdout == f"updated connector tickets-2 ({connector['id']})\n"
    after = await harness.api.connector(connector["id"])
    assert (after["name"], after["sync_schedule"]) == ("tickets-2", None)
    assert after["source"] == connector["source"]

    refused = await harness.cli("update", connector["id"], str(patch.with_name("p.json")))
    assert refused.code == 2
    patch.with_name("p.json").write_text('{"status": "gone"}')
    refused = await harness.cli("update", connector["id"], str(patch.with_name("p.json")))
    assert refused.code == 1
    assert refused.stderr == "error: 422 body.status: Must be one of: active, paused\n"


# --- preview ----------------------------------------------------------------------------


async def test_preview_of_a_file_and_of_a_connector(harness: Harness, source: SourceServer) -> None:
    harness.write_config()
    await harness.start()
    path = harness.root / "tickets.yaml"
    path.write_text(VALID_YAML.format(url=source.items_url))

    shown = await harness.cli("preview", str(path), "--pages", "2")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"GET {source.items_url}?limit=10&since=2024-01-01"
    assert lines[1] == "page 1: 10 records, 10 ids; next cursor: page-1"
    assert lines[2] == "  continues: next cursor at 'next_cursor'"
    assert lines[3].startswith("  ids 10: item-00000, item-00001, ")
    assert lines[4] == "page 2: 10 records, 10 ids; next cursor: page-2"
    answer = (await harness.cli("preview", str(path), "--json")).json
    assert [p["ids"] for p in answer["pages"]] == [[f"item-{i:05d}" for i in range(10)]]
    assert (await harness.api.ok("GET", "/connectors"))["data"] == []  # nothing stored

    created = (await harness.cli("create", str(path), "--json")).json
    synced = await harness.cli("sync", "tickets", "--follow")
    assert synced.code == 0, synced.stderr
    records = make_records(25)
    records[0] = {**records[0], "title": "renamed"}
    records[1] = {"title": "no id"}
    source.set_records([*records, *make_records(1, start=25)])
    runs = await harness.api.runs(created["id"])

    shown = await harness.cli("preview", "tickets", "--pages", "3")
    assert shown.code == 0, shown.stderr
    assert shown.stdout.splitlines()[1:] == [
        "page 1: 10 records, 9 ids, 1 rejected; next cursor: page-1",
        "  continues: next cursor at 'next_cursor'",
        "  new 0",
        "  changed 1: item-00000",
        "  unchanged 8",
        "  rejected record 1: id field 'id' is missing",
        "page 2: 10 records, 10 ids; next cursor: page-2",
        "  continues: next cursor at 'next_cursor'",
        "  new 0",
        "  changed 0",
        "  unchanged 10",
        "page 3: 6 records, 6 ids; next cursor: -",
        "  ends: no next cursor at 'next_cursor'",
        "  new 1: item-00025",
        "  changed 0",
        "  unchanged 5",
    ]
    assert await harness.api.runs(created["id"]) == runs


async def test_preview_of_a_failing_source_exits_1(harness: Harness, source: SourceServer) -> None:
    harness.write_config()
    await harness.start()
    path = harness.root / "t.json"
    body = {"name": "t", "source": http_source(source), "page_retries": 0}
    path.write_text(json.dumps(body))
    source.fail_next(404)
    result = await harness.cli("preview", str(path))
    assert result.code == 1
    assert result.stdout == f"GET {source.items_url}\nno page fetched\n"
    assert result.stderr.startswith("error: HTTP 404")
    source.fail_next(404)
    answer = await harness.cli("preview", str(path), "--json")
    assert answer.code == 1
    assert answer.json["pages"] == [] and answer.json["error"].startswith("HTTP 404")
    missing = await harness.cli("preview", "no-such-connector")
    assert (missing.code, missing.stderr) == (1, "error: 404 Connector not found\n")


async def test_ctrl_c_stops_a_preview_and_its_request(harness: Harness) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_get("/items", hang)
    # handler_cancellation: this source sees its client (the daemon) leave as a cancellation.
    runner = web.AppRunner(app, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        harness.write_config()
        await harness.start()
        path = harness.root / "slow.json"
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/items"
        path.write_text(json.dumps({"name": "slow", "source": {"url": url}}))
        argv = [*harness_cli_argv(harness, "preview"), str(path), "--timeout", "60"]
        cli = harness.spawn(argv)
        await cli.start()
        await asyncio.wait_for(started.wait(), CLI_TIMEOUT)
        cli.send_signal(signal.SIGINT)
        assert await cli.wait(CLI_TIMEOUT) == 130
        assert "interrupted" in "".join(cli.stderr)
        # The daemon saw its client leave and cancelled the request to the source.
        await asyncio.wait_for(cancelled.wait(), 10)
    finally:
        await runner.cleanup()


def harness_cli_argv(harness: Harness, command: str) -> list[str]:
    return [sys.executable, "-m", "syncd", command, "--config", str(harness.config_path)]
