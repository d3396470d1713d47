"""``source.auth`` in every answer: its shape (``type``, ``grant``, ``token_url`` …) is shown,
every secret, identity and reference is ``"***"`` — in the connector answers, the ``GET
/events`` stream and ``syncd show`` — and what was shown, sent back, never replaces a secret
(``PATCH`` and ``syncd edit``). The rule itself: tests/unit/test_auth_shape.py."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from syncd.cli.entry import execute
from syncd.cli.io import Streams
from syncd.cli.parser import build_parser
from syncd.observability.logs import MASK as M
from tests.unit.test_cli import editor, kept_files

from .conftest import Api, Harness

SOURCE = {"type": "http", "url": "http://127.0.0.1:9/items", "records": "data"}

# (auth, what every answer shows), one per kind; every literal secret holds "canary".
AUTHS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "bearer": (
        {"type": "bearer", "token": "canary-bearer-token"},
        {"type": "bearer", "token": M},
    ),
    "basic": (
        {"type": "basic", "username": "canary-user", "password": "canary-password"},
        {"type": "basic", "username": M, "password": M},
    ),
    "api_key_header": (
        {"type": "api_key", "in": "header", "name": "X-Api-Key", "value": "canary-api-key"},
        {"type": "api_key", "in": "header", "name": "X-Api-Key", "value": M},
    ),
    "api_key_query": (
        {"type": "api_key", "in": "query", "name": "key", "value": "${env:CANARY_KEY_VAR}"},
        {"type": "api_key", "in": "query", "name": "key", "value": M},
    ),
    "oauth2_client_credentials": (
        {
            "type": "oauth2",
            "grant": "client_credentials",
            "token_url": "https://auth.example.com/oauth/token",
            "client_id": "canary-client-id",
            "client_secret": "canary-client-secret",
            "scopes": ["tickets.read", "tickets.write"],
            "audience": "https://api.example.com",
            "extra": {"client_assertion": "canary-assertion"},
            "client_auth": "post",
        },
        {
            "type": "oauth2",
            "grant": "client_credentials",
            "token_url": "https://auth.example.com/oauth/token",
            "client_id": M,
            "client_secret": M,
            "scopes": ["tickets.read", "tickets.write"],
            "audience": "https://api.example.com",
            "extra": {"client_assertion": M},
            "client_auth": "post",
        },
    ),
    "oauth2_refresh_token": (
        {
            "type": "oauth2",
            "grant": "refresh_token",
            "token_url": "${env:CANARY_TOKEN_URL_VAR}",
            "client_id": "${env:CANARY_CLIENT_ID_VAR}",
            "client_secret": "${file:/run/secrets/canary-secret-file}",
            "refresh_token": "canary-refresh-token",
            "audience": "${env:CANARY_AUDIENCE_VAR}",
        },
        {
            "type": "oauth2",
            "grant": "refresh_token",
            "token_url": M,
            "client_id": M,
            "client_secret": M,
            "refresh_token": M,
            "audience": M,
        },
    ),
}
CANARY = "canary"  # in every secret, identity and reference name above, nowhere else
OAUTH2 = "oauth2_client_credentials"
MASKED = 'Still masked ("***"): write the secret or a ${env:NAME} / ${file:/path} reference'


async def _create(api: Api, kind: str) -> dict[str, Any]:
    auth, _ = AUTHS[kind]
    reply = await api.post("/connectors", {"name": kind, "source": {**SOURCE, "auth": auth}})
    assert reply.status == 201, reply.body
    assert CANARY not in reply.text
    created: dict[str, Any] = reply.body
    return created


@pytest.mark.parametrize("kind", list(AUTHS))
async def test_every_answer_shows_the_auth_shape_and_no_secret(api: Api, kind: str) -> None:
    _, shown = AUTHS[kind]
    c = await _create(api, kind)
    assert c["source"] == {**SOURCE, "auth": shown}
    replies = [
        await api.get(f"/connectors/{c['id']}"),
        await api.get("/connectors"),
        await api.patch(f"/connectors/{c['id']}", {"status": "paused"}),
        await api.patch(f"/connectors/{c['id']}", {"name": f"{kind}-renamed"}),
    ]
    assert [r.status for r in replies] == [200, 200, 200, 200]
    one, page, *patched = (r.body for r in replies)
    assert one["source"]["auth"] == shown
    assert [x["source"]["auth"] for x in page["data"]] == [shown]
    assert [x["source"]["auth"] for x in patched] == [shown, shown]
    for reply in replies:
        assert CANARY not in reply.text


async def test_a_patched_auth_shows_its_new_shape(api: Api) -> None:
    c = await _create(api, "bearer")
    auth, shown = AUTHS[OAUTH2]
    reply = await api.patch(f"/connectors/{c['id']}", {"source": {**SOURCE, "auth": auth}})
    assert reply.status == 200, reply.body
    assert reply.body["source"]["auth"] == shown
    assert CANARY not in reply.text


async def test_a_shown_source_sent_back_is_refused_and_keeps_every_secret(
    harness: Harness,
) -> None:
    api = harness.api
    c = await _create(api, OAUTH2)
    reply = await api.patch(f"/connectors/{c['id']}", {"source": c["source"]})
    assert reply.status == 422
    found = {tuple(d["loc"]): d["msg"] for d in reply.body["detail"]}
    assert found == {
        ("body", "source", "auth", "client_id"): MASKED,
        ("body", "source", "auth", "client_secret"): MASKED,
    }
    # A POST of a shown body alike; `extra`'s values are refused once the rest is valid.
    auth, _ = AUTHS[OAUTH2]
    body = {"name": "copy", "source": {**SOURCE, "auth": {**auth, "extra": {"a": M}}}}
    refused = await api.post("/connectors", body)
    assert refused.status == 422
    assert {tuple(d["loc"])[-2:]: d["msg"] for d in refused.body["detail"]} == {
        ("extra", "a"): MASKED
    }
    stored = await harness.daemon.get_connector(c["id"])
    assert stored.source["auth"] == auth


# --- the events stream ----------------------------------------------------------------------


async def _connector_events(api: Api, cid: str, count: int, after: Any = None) -> list[Any]:
    """The first ``count`` ``connector`` events of ``GET /events?connector_id=cid``; ``after``
    (a coroutine function) runs once the first has arrived."""
    events: list[Any] = []
    async with (
        asyncio.timeout(10),
        api.session.get("/events", params={"connector_id": cid}) as response,
    ):
        assert response.status == 200
        kind = ""
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "connector":
                assert CANARY not in line
                events.append(json.loads(line.removeprefix("data: ")))
                if len(events) == count:
                    break
                if len(events) == 1 and after is not None:
                    await after()
    return events


async def test_the_events_stream_shows_the_same_shape(api: Api) -> None:
    _, shown = AUTHS[OAUTH2]
    c = await _create(api, OAUTH2)

    async def pause() -> None:
        assert (await api.patch(f"/connectors/{c['id']}", {"status": "paused"})).status == 200

    snapshot, live = await _connector_events(api, c["id"], 2, after=pause)
    assert snapshot["source"]["auth"] == shown
    assert live["status"] == "paused" and live["source"]["auth"] == shown
    assert live == (await api.get(f"/connectors/{c['id']}")).body


# --- the CLI ----------------------------------------------------------------------------------


async def _syncd(harness: Harness, *argv: str, environ: dict[str, str] | None = None) -> Any:
    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args([*argv, "--url", str(harness.daemon.api_address)])
    streams = Streams(io.StringIO(), out, err)
    code = await execute(args, streams=streams, environ=environ or {})
    return code, out.getvalue(), err.getvalue()


async def test_syncd_show_prints_the_shape(harness: Harness) -> None:
    _, shown = AUTHS[OAUTH2]
    c = await _create(harness.api, OAUTH2)
    code, out, _ = await _syncd(harness, "show", c["id"])
    assert code == 0 and CANARY not in out
    [line] = [line for line in out.splitlines() if line.startswith("source:")]
    assert json.loads(line.removeprefix("source:"))["auth"] == shown
    code, out, _ = await _syncd(harness, "show", c["id"], "--json")
    assert code == 0 and CANARY not in out
    assert json.loads(out)["source"]["auth"] == shown


async def test_syncd_edit_keeps_the_secrets_of_an_unchanged_auth(
    harness: Harness, tmp_path: Path
) -> None:
    auth, _ = AUTHS[OAUTH2]
    c = await _create(harness.api, OAUTH2)
    # The auth is left as shown: only the name is sent, the secrets stay.
    env = editor(tmp_path, (f"name: {OAUTH2}", "name: renamed"))
    code, out, err = await _syncd(harness, "edit", c["id"], environ=env)
    assert (code, err) == (0, "")
    assert out == f"updated connector renamed ({c['id']}): name\n"
    shown = (tmp_path / "shown.yaml").read_text()
    assert "grant: client_credentials" in shown and "- tickets.read" in shown
    assert CANARY not in shown
    assert (await harness.daemon.get_connector(c["id"])).source["auth"] == auth
    # A changed auth that still holds a mask is refused before anything is sent.
    env = editor(tmp_path, ("- tickets.write", "- tickets.admin"))
    code, out, err = await _syncd(harness, "edit", c["id"], environ=env)
    assert code == 2
    assert err.startswith(
        'error: source.auth.client_id: still masked ("***"): write the secret or a '
        "${env:NAME} reference\n"
        'error: source.auth.client_secret: still masked ("***")'
    )
    kept_files(tmp_path)[0].unlink()
    stored = await harness.daemon.get_connector(c["id"])
    assert (stored.name, stored.source["auth"]) == ("renamed", auth)
