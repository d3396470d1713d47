"""Helpers of the recipe tests: the connector files of ``docs/recipes/``, pointed at the local
servers, and a sync of one connector in a daemon. Also the Microsoft identity platform's
token endpoint, which the Microsoft Graph recipe asks first."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.models import DocStatus, Run
from tests.integration.loopback import LoopbackServer

__all__ = [
    "NAMES",
    "RECIPES",
    "MicrosoftLogin",
    "changed",
    "doc_ids",
    "env_names",
    "payload",
    "pointed",
    "recipe",
    "sync",
    "use_env",
]

RECIPES = Path(__file__).resolve().parents[3] / "docs" / "recipes"
NAMES = (
    "stripe",
    "notion",
    "jira",
    "msgraph",
    "github_rest",
    "github_graphql",
    "wordpress",
    "zendesk",
    "elasticsearch",
    "slack",
)
#: Bound for one run against a local server (a rate-limit wait included).
RUN_TIMEOUT = 30.0

_ENV = re.compile(r"\$\{env:([^}]+)\}")


def recipe(name: str) -> dict[str, Any]:
    """The connector file ``docs/recipes/<name>.json``."""
    loaded: dict[str, Any] = json.loads((RECIPES / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def pointed(name: str, base: str, *, token_base: str | None = None) -> dict[str, Any]:
    """The recipe with the origin of its URL replaced by ``base`` (a local server's) and,
    with ``token_base``, the origin of its OAuth2 ``token_url``; nothing else changes."""
    body = recipe(name)
    source = body["source"]
    source["url"] = base + source["url"].removeprefix(_origin(source["url"]))
    if token_base is not None:
        auth = source["auth"]
        auth["token_url"] = token_base + auth["token_url"].removeprefix(_origin(auth["token_url"]))
    return body


def env_names(body: Any) -> set[str]:
    """The environment variables the connector body references."""
    return set(_ENV.findall(json.dumps(body)))


def use_env(monkeypatch: pytest.MonkeyPatch, body: Any, **values: str) -> None:
    """Set the variables the recipe references, which must be exactly ``values``."""
    assert env_names(body) == set(values)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def changed(body: Mapping[str, Any], **source: Any) -> dict[str, Any]:
    """A copy of a connector body with source keys replaced (``None`` removes one)."""
    out = copy.deepcopy(dict(body))
    for key, value in source.items():
        if value is None:
            out["source"].pop(key, None)
        else:
            out["source"][key] = value
    return out


async def sync(daemon: Daemon, connector_id: str) -> Run:
    """Run one sync of the connector to its end; the run."""
    run_id = await daemon.trigger_sync(connector_id)
    assert run_id is not None
    await asyncio.wait_for(daemon.wait_run(connector_id), RUN_TIMEOUT)
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    assert runs[0].id == run_id
    return runs[0]


async def doc_ids(daemon: Daemon, connector_id: str) -> list[str]:
    """The external ids of the connector's live documents, sorted."""
    ids: list[str] = []
    cursor = None
    while True:
        docs, cursor = await daemon.list_documents(connector_id, limit=500, cursor=cursor)
        ids += [d.external_id for d in docs if d.status is not DocStatus.DELETED]
        if cursor is None:
            return sorted(ids)


async def payload(daemon: Daemon, connector_id: str, external_id: str) -> Any:
    """The stored payload of one document."""
    return (await daemon.get_document(connector_id, external_id)).payload


class MicrosoftLogin(LoopbackServer):
    """The Microsoft identity platform's client credentials flow, as
    https://learn.microsoft.com/en-us/entra/identity-platform/v2-oauth2-client-creds-grant-flow
    documents it: ``POST /{tenant}/oauth2/v2.0/token`` with ``client_id``, ``scope``
    (``https://graph.microsoft.com/.default``), ``client_secret``, ``grant_type``; answers
    ``{"token_type": "Bearer", "expires_in", "access_token"}``, errors as
    ``{"error", "error_description"}``. It issues ``access_token`` (a Graph server's)."""

    def __init__(self, access_token: str) -> None:
        self.access_token = access_token
        self.client_id = "6731de76-14a6-49ae-97bc-6eba6914391e"
        self.client_secret = "sampleCredentia1s-fixture"
        self.requests: list[dict[str, str]] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.requests.append({"tenant": request.match_info["tenant"], **form})
        if form.get("grant_type") != "client_credentials":
            return _login_error("unsupported_grant_type", "AADSTS70003")
        if (form.get("client_id"), form.get("client_secret")) != (
            self.client_id,
            self.client_secret,
        ):
            return _login_error("invalid_client", "AADSTS7000215: Invalid client secret.", 401)
        if form.get("scope") != "https://graph.microsoft.com/.default":
            return _login_error("invalid_scope", "AADSTS1002012: The provided value for scope")
        return web.json_response(
            {
                "token_type": "Bearer",
                "expires_in": 3599,
                "ext_expires_in": 3599,
                "access_token": self.access_token,
            }
        )


def _login_error(error: str, description: str, status: int = 400) -> web.Response:
    return web.json_response({"error": error, "error_description": description}, status=status)
