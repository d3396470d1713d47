"""Secrets in request bodies are masked like headers (DESIGN.md §8, "Real APIs"): a POST
``body`` holding ``${env:}`` and ``${file:}`` references and values under secret-named keys
reaches the source resolved, and reads ``***`` everywhere syncd shows it — ``GET
/connectors/{id}``, a preview's request, a run's error when the source echoes a secret back
(a ``fail_when`` message, a status line), and the JSON logs — through a real daemon serving
its API and a real local source server.

The secrets are made per test (random, no common word), since secrets are registered with the
log redaction process-wide: a value one test registered would be masked in the next one
whatever the code under test did."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.models import Run, RunOutcome
from syncd.observability.logs import configure_logging
from tests.integration.conftest import embedded_config
from tests.integration.loopback import LoopbackServer

pytestmark = pytest.mark.usefixtures("logging_state")

MASK = "***"
ENV_NAME = "SYNCD_TEST_BODY_SESSION"


@dataclass(frozen=True)
class Secrets:
    """This test's secret values: one from the environment, one from a file, two literal."""

    env: str
    file: str
    api_key: str
    password: str
    path: Path

    def all(self) -> tuple[str, ...]:
        return (self.env, self.file, self.api_key, self.password)


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Secrets:
    def made(kind: str) -> str:
        return f"zq{kind}X{uuid.uuid4().hex[:16]}"

    path = tmp_path / "signature.txt"
    found = Secrets(made("env"), made("file"), made("key"), made("pwd"), path)
    path.write_text(found.file + "\n", encoding="utf-8")  # the newline is not part of it
    monkeypatch.setenv(ENV_NAME, found.env)
    return found


def request_body(secrets: Secrets) -> dict[str, Any]:
    """The connector's ``body``: plain values beside secrets of every kind."""
    return {
        "query": "query Things($tenant: String!) { things(tenant: $tenant) { id } }",
        "api_key": secrets.api_key,
        "variables": {
            "tenant": "acme",
            "session": f"${{env:{ENV_NAME}}}",
            "signature": f"${{file:{secrets.path}}}",
        },
        "login": {"user": "svc-reader", "password": secrets.password},
        "filter": {"tags": ["open", "urgent"], "limit": 50},
    }


#: ``request_body`` as every surface shows it.
SHOWN_BODY = {
    "query": "query Things($tenant: String!) { things(tenant: $tenant) { id } }",
    "api_key": MASK,
    "variables": {"tenant": "acme", "session": MASK, "signature": MASK},
    "login": {"user": "svc-reader", "password": MASK},
    "filter": {"tags": ["open", "urgent"], "limit": 50},
}


def resolved_body(secrets: Secrets) -> dict[str, Any]:
    """``request_body`` as the source must receive it."""
    body = request_body(secrets)
    body["variables"].update(session=secrets.env, signature=secrets.file)
    return body


class Things(LoopbackServer):
    """A GraphQL-like endpoint: ``POST /graphql`` answers ``{"ok": true, "data": [...]}``.
    ``mode`` makes it echo the secrets it was sent back, as careless APIs do: ``"fail"`` in
    a 200 ``{"ok": false, "error": ...}``, ``"long"`` likewise after 180 characters of text,
    ``"status"`` in the reason phrase of a 401."""

    path = "/graphql"

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.mode = "ok"

    def routes(self, app: web.Application) -> None:
        app.router.add_post(self.path, self._graphql)

    async def _graphql(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        echoed = (
            f"key {body['api_key']} / session {body['variables']['session']}"
            f" / signature {body['variables']['signature']} / password {body['login']['password']}"
        )
        if self.mode == "fail":
            return web.json_response({"ok": False, "error": f"invalid credentials: {echoed}"})
        if self.mode == "long":
            error = "please check the request. " * 7 + f"key {body['api_key']}; " + "see docs " * 9
            return web.json_response({"ok": False, "error": error})
        if self.mode == "status":
            return web.Response(
                status=401, reason=f"Bad signature {body['variables']['signature']}"
            )
        return web.json_response({"ok": True, "data": [{"id": "t1"}, {"id": "t2"}]})


@pytest.fixture
async def things() -> AsyncIterator[Things]:
    async with Things() as server:
        yield server


@pytest.fixture
async def serving(tmp_path: Path) -> AsyncIterator[Daemon]:
    """A daemon serving its control API on 127.0.0.1 (no token: loopback)."""
    daemon = Daemon(embedded_config(tmp_path))
    await daemon.start()
    try:
        yield daemon
    finally:
        await daemon.stop()


@pytest.fixture
def log_lines() -> io.StringIO:
    """syncd's logging as JSON lines in a buffer, at debug (restored by ``logging_state``)."""
    buf = io.StringIO()
    configure_logging("debug", "json", stream=buf)
    return buf


def connector(url: str, secrets: Secrets) -> dict[str, Any]:
    return {
        "name": "things",
        "page_retries": 0,
        "source": {
            "type": "http",
            "url": url,
            "method": "POST",
            "body": request_body(secrets),
            "records": "data",
            "pagination": {"type": "cursor", "next_cursor": "next"},
            "fail_when": [{"path": "ok", "equals": False, "message": "error"}],
        },
    }


async def sync(daemon: Daemon, connector_id: str) -> Run:
    run_id = await daemon.trigger_sync(connector_id)
    assert run_id is not None
    await asyncio.wait_for(daemon.wait_run(connector_id), 30)
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    assert runs[0].id == run_id
    return runs[0]


def assert_no_secret(text: str, secrets: Secrets) -> None:
    for value in secrets.all():
        assert value not in text


async def test_the_source_receives_the_body_resolved(
    daemon: Daemon, things: Things, secrets: Secrets
) -> None:
    c = await daemon.create_connector(connector(things.url, secrets))
    run = await sync(daemon, c.id)
    assert (run.outcome, run.error, run.documents_seen) == (RunOutcome.SUCCEEDED, None, 2)
    assert things.bodies == [resolved_body(secrets)]
    # What is stored is the reference, never what it resolves to.
    stored = await daemon.get_connector(c.id)
    assert stored.source["body"] == request_body(secrets)


async def test_the_api_shows_the_body_masked_in_the_connector_and_the_preview(
    serving: Daemon, things: Things, secrets: Secrets
) -> None:
    async with aiohttp.ClientSession(base_url=str(serving.api_address)) as http:
        async with http.post("/connectors", json=connector(things.url, secrets)) as reply:
            assert reply.status == 201
            created = await reply.json()
        assert created["source"]["body"] == SHOWN_BODY
        async with http.get(f"/connectors/{created['id']}") as reply:
            assert reply.status == 200
            text = await reply.text()
        assert json.loads(text)["source"]["body"] == SHOWN_BODY
        assert_no_secret(text, secrets)
        assert "${" not in text  # where a secret is read from is not shown either

        for asked in (
            {"connector_id": created["id"]},
            {"connector": connector(things.url, secrets)},
        ):
            async with http.post("/connectors/preview", json=asked) as reply:
                assert reply.status == 200
                text = await reply.text()
            shown = json.loads(text)
            assert "error" not in shown
            assert shown["request"]["method"] == "POST"
            assert shown["request"]["body"] == SHOWN_BODY
            assert [p["records"] for p in shown["pages"]] == [2]
            assert_no_secret(text, secrets)
    # The previews sent the real values.
    assert things.bodies == [resolved_body(secrets)] * 2


async def test_a_secret_echoed_in_a_fail_when_message_is_masked_in_the_run_and_preview(
    serving: Daemon, things: Things, secrets: Secrets
) -> None:
    things.mode = "fail"
    c = await serving.create_connector(connector(things.url, secrets))
    run = await sync(serving, c.id)
    assert run.outcome is RunOutcome.FAILED
    assert run.error == (
        "source reported an error ('ok' is false): invalid credentials:"
        " key *** / session *** / signature *** / password ***"
    )
    after = await serving.get_connector(c.id)
    assert after.last_error == run.error

    async with aiohttp.ClientSession(base_url=str(serving.api_address)) as http:
        async with http.get(f"/connectors/{c.id}/runs") as reply:
            assert reply.status == 200
            text = await reply.text()
        assert_no_secret(text, secrets)
        async with http.post("/connectors/preview", json={"connector_id": c.id}) as reply:
            shown = await reply.json()
        assert shown["error"] == run.error
        assert shown["request"]["body"] == SHOWN_BODY
    assert things.bodies == [resolved_body(secrets)] * 2


async def test_a_secret_echoed_at_the_end_of_a_long_fail_when_message_shows_no_part_of_it(
    daemon: Daemon, things: Things, secrets: Secrets
) -> None:
    things.mode = "long"
    c = await daemon.create_connector(connector(things.url, secrets))
    run = await sync(daemon, c.id)
    assert run.outcome is RunOutcome.FAILED and run.error is not None
    assert run.error.endswith("…")  # the message was cut, after the secret was masked
    assert "key ***; see docs" in run.error
    assert secrets.api_key[:10] not in run.error


async def test_a_secret_echoed_in_a_status_line_is_masked_in_the_run_error(
    daemon: Daemon, things: Things, secrets: Secrets
) -> None:
    things.mode = "status"
    c = await daemon.create_connector(connector(things.url, secrets))
    run = await sync(daemon, c.id)
    assert run.outcome is RunOutcome.FAILED and run.error is not None
    assert run.error.startswith("HTTP 401 Bad signature *** from POST http://127.0.0.1:")
    assert_no_secret(run.error, secrets)
    shown = await daemon.preview({"connector_id": c.id})
    assert shown.error is not None and "Bad signature ***" in shown.error
    assert shown.request is not None and shown.request["body"] == SHOWN_BODY


async def test_no_log_line_shows_a_body_secret(
    log_lines: io.StringIO, daemon: Daemon, things: Things, secrets: Secrets
) -> None:
    c = await daemon.create_connector(connector(things.url, secrets))
    assert (await sync(daemon, c.id)).outcome is RunOutcome.SUCCEEDED
    things.mode = "fail"
    failed = await sync(daemon, c.id)
    assert failed.outcome is RunOutcome.FAILED
    things.mode = "status"
    await daemon.preview({"connector": connector(things.url, secrets)})
    assert (await sync(daemon, c.id)).outcome is RunOutcome.FAILED

    assert len(things.bodies) == 4 and all(b == resolved_body(secrets) for b in things.bodies)
    lines = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    ended = [line for line in lines if line["event"] == "sync.ended"]
    assert [line["outcome"] for line in ended] == ["succeeded", "failed", "failed"]
    # The failures were logged with their errors, the secrets in them masked.
    errors = [line["error"] for line in lines if line["event"] == "sync.failed"]
    assert len(errors) == 2
    assert errors[0].endswith("key *** / session *** / signature *** / password ***")
    assert errors[1].startswith("HTTP 401 Bad signature *** from POST")
    (preview,) = [line for line in lines if line["event"] == "service.preview_failed"]
    assert preview["error"] == errors[1]
    assert_no_secret(log_lines.getvalue(), secrets)
