"""``source.auth`` of the http source against a real local API and OAuth2 token endpoint:
static credentials, both OAuth2 grants, expiry, a 401 renewing the token once, refresh token
rotation persisted through ``SourceContext.save_secret_state``, and error texts that never
show a secret."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import pytest
from aiohttp import web

from syncd.api.views import connector_json
from syncd.config.secrets import connector_secrets
from syncd.errors import Aborted, ClientError, ServerError, SourceError
from syncd.http.paginator import AsyncCursorPaginator, CancelToken
from syncd.http.timeouts import Timeouts
from syncd.http.transport import Transport
from syncd.models import Page
from syncd.observability.logs import MASK, redact
from syncd.sources.base import SourceContext
from syncd.sources.http import HttpSource
from syncd.sources.http.auth import OAUTH2_STATE_KEY, TOKENS, AuthError, TokenCache, validate_auth
from tests.integration.conftest import DaemonFactory
from tests.integration.loopback import LoopbackServer


def canary(kind: str) -> str:
    return f"canary-{kind}-{uuid.uuid4().hex}"


@dataclass
class Seen:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    form: dict[str, str] = field(default_factory=dict)
    pairs: list[tuple[str, str]] = field(default_factory=list)  # the query, repeats kept


class Api(LoopbackServer):
    """A local API on its own port: ``/items`` (two pages, cursor style) accepts the access
    tokens that ``/token`` issued, ``/open`` accepts anything and records it, ``/next``
    pages by next URL repeating ``api_key``. ``/token`` is an RFC 6749 token endpoint."""

    def __init__(self) -> None:
        self.client_id = "client-1"
        self.client_secret = canary("client-secret")
        self.refresh_token = canary("refresh")
        self.rotate = False
        self.expires_in: Any = 3600
        self.valid: set[str] = set()
        self.issued: list[str] = []
        self.seen: list[Seen] = []
        self.token_answers: list[tuple[int, dict[str, Any]]] = []  # scripted, then normal
        self.token_gate: asyncio.Event | None = None
        self.token_asked = asyncio.Event()
        self.reject_pages = 0  # answer 401 to this many page requests (revoking the token)
        self.moved_to = ""  # where POST /moved redirects (307)

    @property
    def token_requests(self) -> list[Seen]:
        return [s for s in self.seen if s.path == "/token"]

    @property
    def page_requests(self) -> list[Seen]:
        return [s for s in self.seen if s.path != "/token"]

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/token", self._token)
        app.router.add_post("/moved", self._moved)
        app.router.add_get("/items", self._items)
        app.router.add_get("/open", self._open)
        app.router.add_get("/next", self._open)

    async def stop(self) -> None:
        if self.token_gate is not None:
            self.token_gate.set()
        await super().stop()

    def _record(self, request: web.Request, form: Mapping[str, str] | None = None) -> None:
        query = list(request.query.items())
        self.seen.append(
            Seen(request.path, dict(query), dict(request.headers), dict(form or {}), query)
        )

    async def _token(self, request: web.Request) -> web.StreamResponse:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self._record(request, form)
        self.token_asked.set()
        if self.token_gate is not None:
            await self.token_gate.wait()
        if self.token_answers:
            status, scripted = self.token_answers.pop(0)
            return web.json_response(scripted, status=status)
        if self._client(request, form) != (self.client_id, self.client_secret):
            return web.json_response({"error": "invalid_client"}, status=401)
        grant = form.get("grant_type")
        body: dict[str, Any] = {"token_type": "bearer"}
        if grant == "refresh_token":
            if form.get("refresh_token") != self.refresh_token:
                return web.json_response({"error": "invalid_grant"}, status=400)
            if self.rotate:
                self.refresh_token = canary("rotated")
                body["refresh_token"] = self.refresh_token
        elif grant != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        token = f"access-{len(self.issued)}-{uuid.uuid4().hex}"
        self.issued.append(token)
        self.valid.add(token)
        body["access_token"] = token
        if self.expires_in is not None:
            body["expires_in"] = self.expires_in
        return web.json_response(body)

    async def _moved(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        return web.Response(status=307, headers={"Location": self.moved_to})

    @staticmethod
    def _client(request: web.Request, form: Mapping[str, str]) -> tuple[str, str] | None:
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            return unquote_plus(user), unquote_plus(password)
        if "client_id" in form:
            return form["client_id"], form.get("client_secret", "")
        return None

    async def _items(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if self.reject_pages > 0:
            self.reject_pages -= 1
            self.valid.discard(token)
        if token not in self.valid:
            return web.json_response({"detail": "unauthorized"}, status=401)
        cursor = request.query.get("cursor")
        return web.json_response(
            {"data": [{"id": cursor or "first"}], "next_cursor": None if cursor else "second"}
        )

    async def _open(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        if request.path == "/next" and "page" not in request.query:
            key = request.query.get("api_key", "")
            return web.json_response({"data": [{"id": 1}], "next": f"/next?api_key={key}&page=2"})
        return web.json_response({"data": [{"id": 2}], "next": None})


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    server = Api()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def transport() -> AsyncIterator[Transport]:
    async def no_sleep(seconds: float) -> None:
        return None

    async with Transport(sleep=no_sleep, timeouts=Timeouts(read=5.0, connect=2.0)) as t:
        yield t


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Saved:
    """The store side of ``save_secret_state``: what the lead's store method keeps."""

    values: dict[str, Any] = field(default_factory=dict)

    async def save(self, key: str, value: Mapping[str, Any] | None) -> None:
        if value is None:
            self.values.pop(key, None)
        else:
            self.values[key] = dict(value)


def source(
    api: Api,
    transport: Transport,
    auth: Mapping[str, Any],
    *,
    cache: TokenCache,
    path: str = "/items",
    connector_id: str = "c1",
    saved: Saved | None = None,
    **extra: Any,
) -> HttpSource:
    config = {"url": f"{api.url}{path}", "records": "data", "auth": dict(auth), **extra}
    context = SourceContext(
        connector_id,
        transport,
        secret_state=dict(saved.values) if saved else {},
        save_secret_state=saved.save if saved else None,
    )
    return HttpSource(config, context, token_cache=cache)


async def crawl(src: HttpSource, **kwargs: Any) -> list[Page]:
    return [page async for page in AsyncCursorPaginator(src.fetch_page, **kwargs)]


def client_credentials(api: Api, **more: Any) -> dict[str, Any]:
    return {
        "type": "oauth2",
        "grant": "client_credentials",
        "token_url": f"{api.url}/token",
        "client_id": api.client_id,
        "client_secret": api.client_secret,
        **more,
    }


def refresh_grant(api: Api, refresh_token: str | None = None, **more: Any) -> dict[str, Any]:
    return {
        "type": "oauth2",
        "grant": "refresh_token",
        "token_url": f"{api.url}/token",
        "client_id": api.client_id,
        "client_secret": api.client_secret,
        "refresh_token": refresh_token or api.refresh_token,
        **more,
    }


# --- static credentials ---------------------------------------------------------------------


async def test_bearer_from_a_file_is_resolved_per_request(
    api: Api, transport: Transport, tmp_path: Path
) -> None:
    first, second = canary("first"), canary("second")
    secret = tmp_path / "token"
    secret.write_text(f"{first}\n")
    auth = {"type": "bearer", "token": f"${{file:{secret}}}"}
    src = source(api, transport, auth, cache=TokenCache(), path="/open")
    await src.fetch_page(None)
    secret.write_text(f"{second}\n")  # rotated by the operator
    await src.fetch_page(None)
    assert [s.headers["Authorization"] for s in api.page_requests] == [
        f"Bearer {first}",
        f"Bearer {second}",
    ]
    assert redact(f"sent {second}") == f"sent {MASK}"  # registered once resolved


async def test_basic_auth_replaces_a_configured_authorization_header(
    api: Api, transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = canary("password")
    monkeypatch.setenv("SRC_PASSWORD", password)
    auth = {"type": "basic", "username": "reader", "password": "${env:SRC_PASSWORD}"}
    src = source(
        api,
        transport,
        auth,
        cache=TokenCache(),
        path="/open",
        headers={"authorization": "Bearer stale", "Accept": "application/json"},
    )
    await src.fetch_page(None)
    (seen,) = api.page_requests
    expected = base64.b64encode(f"reader:{password}".encode()).decode()
    assert seen.headers["Authorization"] == f"Basic {expected}"
    assert seen.headers["Accept"] == "application/json"
    shown = src.describe_request()
    assert shown["headers"] == {"Accept": MASK, "Authorization": MASK}


async def test_a_basic_user_name_may_be_a_reference(
    api: Api, transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jira's account email, Zendesk's ``{email}/token``: the reference is resolved per
    request; a resolved value holding ':' is refused then, naming the key only."""
    monkeypatch.setenv("SRC_EMAIL", "agent@example.com")
    auth = {"type": "basic", "username": "${env:SRC_EMAIL}/token", "password": "pw"}
    src = source(api, transport, auth, cache=TokenCache(), path="/open")
    await src.fetch_page(None)
    (seen,) = api.page_requests
    expected = base64.b64encode(b"agent@example.com/token:pw").decode()
    assert seen.headers["Authorization"] == f"Basic {expected}"
    monkeypatch.setenv("SRC_EMAIL", "agent:example")
    with pytest.raises(SourceError, match=r"^auth\.username: resolved value contains ':'$"):
        await src.fetch_page(None)
    assert len(api.page_requests) == 1


async def test_api_key_in_a_header(api: Api, transport: Transport) -> None:
    key = canary("key")
    auth = {"type": "api_key", "in": "header", "name": "X-Api-Key", "value": key}
    await source(api, transport, auth, cache=TokenCache(), path="/open").fetch_page(None)
    (seen,) = api.page_requests
    assert seen.headers["X-Api-Key"] == key
    assert "api_key" not in seen.query


async def test_api_key_in_the_query_is_sent_once_on_every_page(
    api: Api, transport: Transport
) -> None:
    key = canary("key")
    auth = {"type": "api_key", "in": "query", "name": "api_key", "value": key}
    src = source(
        api,
        transport,
        auth,
        cache=TokenCache(),
        path="/next",
        pagination={"type": "next_url", "next_url": "next"},
    )
    pages = await crawl(src)
    assert len(pages) == 2
    # The second URL came from the body with the key already in it: not sent twice.
    assert [sorted(s.pairs) for s in api.page_requests] == [
        [("api_key", key)],
        [("api_key", key), ("page", "2")],
    ]
    assert "api_key=***" in src.describe_request()["url"]
    assert key not in str(src.describe_request())


async def test_a_401_with_static_credentials_is_the_source_answer(
    api: Api, transport: Transport
) -> None:
    src = source(api, transport, {"type": "bearer", "token": "nope-nope"}, cache=TokenCache())
    with pytest.raises(ClientError) as info:  # the source's answer: nothing to renew
        await src.fetch_page(None)
    assert info.value.status == 401
    assert len(api.page_requests) == 1


# --- OAuth2 -------------------------------------------------------------------------------------


async def test_client_credentials_token_is_fetched_once_and_cached(
    api: Api, transport: Transport
) -> None:
    cache = TokenCache()
    auth = client_credentials(
        api, scopes=["read", "write"], audience="https://api.example", extra={"resource": "r1"}
    )
    pages = await crawl(source(api, transport, auth, cache=cache))
    assert [p.records for p in pages] == [[{"id": "first"}], [{"id": "second"}]]
    (asked,) = api.token_requests
    assert asked.form == {
        "grant_type": "client_credentials",
        "scope": "read write",
        "audience": "https://api.example",
        "resource": "r1",
    }
    assert asked.headers["Authorization"].startswith("Basic ")  # client_secret_basic
    assert api.seen[0].path == "/token"  # before the first page
    # Another run of the same connector (same config) uses the cached token.
    await crawl(source(api, transport, auth, cache=cache))
    assert len(api.token_requests) == 1
    assert {s.headers["Authorization"] for s in api.page_requests} == {f"Bearer {api.issued[0]}"}


async def test_client_secret_in_the_form_and_a_changed_config_drops_the_token(
    api: Api, transport: Transport
) -> None:
    cache = TokenCache()
    auth = client_credentials(api, client_auth="post")
    await source(api, transport, auth, cache=cache).fetch_page(None)
    (asked,) = api.token_requests
    assert asked.form["client_secret"] == api.client_secret
    assert "Authorization" not in asked.headers
    # A PATCH that changes the auth config: the cached token is not used for it.
    await source(api, transport, {**auth, "scopes": ["x"]}, cache=cache).fetch_page(None)
    assert len(api.token_requests) == 2
    assert api.page_requests[-1].headers["Authorization"] == f"Bearer {api.issued[1]}"


async def test_token_is_renewed_shortly_before_expires_in(api: Api, transport: Transport) -> None:
    clock = Clock()
    cache = TokenCache(clock=clock)
    api.expires_in = "100"  # a string, as some servers send it
    src = source(api, transport, client_credentials(api), cache=cache)
    await src.fetch_page(None)
    clock.now += 89  # renewed 10 s (10 % of 100) before expiry: not yet
    await src.fetch_page(None)
    assert len(api.token_requests) == 1
    clock.now += 2
    await src.fetch_page(None)
    assert len(api.token_requests) == 2
    assert api.page_requests[-1].headers["Authorization"] == f"Bearer {api.issued[1]}"


async def test_a_401_renews_the_token_once(api: Api, transport: Transport) -> None:
    api.expires_in = None  # kept until a 401
    src = source(api, transport, client_credentials(api), cache=TokenCache())
    await src.fetch_page(None)
    api.reject_pages = 1  # the token is revoked early
    page = await src.fetch_page("second")
    assert page.records == [{"id": "second"}]
    assert len(api.token_requests) == 2
    assert [s.headers["Authorization"] for s in api.page_requests] == [
        f"Bearer {api.issued[0]}",
        f"Bearer {api.issued[0]}",
        f"Bearer {api.issued[1]}",
    ]


async def test_a_401_after_the_refresh_is_a_clear_failure(api: Api, transport: Transport) -> None:
    src = source(api, transport, client_credentials(api), cache=TokenCache())
    api.reject_pages = 2
    with pytest.raises(AuthError) as info:
        await crawl(src, max_retries=3)  # not retried by the paginator either
    assert str(info.value).startswith("source answered 401 after the OAuth2 token was refreshed")
    assert len(api.token_requests) == 2
    assert len(api.page_requests) == 2


async def test_refresh_grant_rotation_is_saved_and_used_after_a_restart(
    api: Api, transport: Transport
) -> None:
    api.rotate = True
    configured = api.refresh_token
    saved = Saved()
    auth = refresh_grant(api)
    src = source(api, transport, auth, cache=TokenCache(), connector_id="c-rot", saved=saved)
    await src.fetch_page(None)
    (asked,) = api.token_requests
    assert asked.form == {"grant_type": "refresh_token", "refresh_token": configured}
    rotated = api.refresh_token
    state = saved.values[OAUTH2_STATE_KEY]
    assert state["refresh_token"] == rotated
    assert redact(f"x {rotated}") == f"x {MASK}"
    # The crawl fails after the rotation: the token is saved already, not with a page.
    # A restart: a new process (empty cache), the config still naming the revoked token.
    src = source(api, transport, auth, cache=TokenCache(), connector_id="c-rot", saved=saved)
    await src.fetch_page(None)
    assert api.token_requests[-1].form["refresh_token"] == rotated
    assert saved.values[OAUTH2_STATE_KEY]["refresh_token"] == api.refresh_token != rotated
    assert saved.values[OAUTH2_STATE_KEY]["generation"] == state["generation"] + 1
    # Without the saved state the revoked token is sent, and refused with a clear error.
    src = source(api, transport, auth, cache=TokenCache(), connector_id="c-rot")
    with pytest.raises(AuthError, match="failed: HTTP 400: invalid_grant"):
        await src.fetch_page(None)


async def test_a_newly_configured_refresh_token_wins_over_a_saved_rotation(
    api: Api, transport: Transport, tmp_path: Path
) -> None:
    api.rotate = True
    token_file = tmp_path / "refresh"
    token_file.write_text(api.refresh_token)
    saved = Saved()
    auth = refresh_grant(api, refresh_token=f"${{file:{token_file}}}")
    cache = TokenCache()
    await source(api, transport, auth, cache=cache, saved=saved).fetch_page(None)
    # The operator authorises again: a new refresh token in the file (the chain restarts).
    api.refresh_token = canary("reauthorised")
    token_file.write_text(api.refresh_token)
    api.valid.clear()  # the cached access token is refused: renewed with the new one
    page = await source(api, transport, auth, cache=cache, saved=saved).fetch_page(None)
    assert page.records == [{"id": "first"}]
    assert api.token_requests[-1].form["refresh_token"] == token_file.read_text()


async def test_token_endpoint_errors_never_show_a_secret(api: Api, transport: Transport) -> None:
    auth = refresh_grant(api, client_auth="post", extra={"client_assertion": canary("jwt")})
    secrets = [api.client_secret, api.refresh_token, auth["extra"]["client_assertion"]]
    echo = " ".join(secrets)
    api.token_answers = [
        (400, {"error": "invalid_grant", "error_description": f"bad token {echo}"}),
        (200, {"access_token": f"no line breaks\n{echo}"}),
        (200, {"token_type": "mac", "access_token": "x"}),
    ]
    messages = []
    for _ in api.token_answers[:]:
        src = source(api, transport, auth, cache=TokenCache())
        with pytest.raises(AuthError) as info:
            await src.fetch_page(None)
        messages.append(str(info.value))
    assert messages[0].startswith(
        f"OAuth2 token request to {api.url}/token failed: HTTP 400: invalid_grant (bad token "
    )
    assert "line break" in messages[1]
    assert "only Bearer" in messages[2]
    for message in messages:
        assert not any(secret in message for secret in secrets), message


async def test_token_requests_are_retried_by_the_transport(api: Api, transport: Transport) -> None:
    api.token_answers = [(503, {"error": "busy"}), (502, {})]
    await source(api, transport, client_credentials(api), cache=TokenCache()).fetch_page(None)
    assert len(api.token_requests) == 3


async def test_an_exhausted_token_endpoint_is_a_server_error(
    api: Api, transport: Transport
) -> None:
    api.token_answers = [(503, {})] * 4
    with pytest.raises(ServerError, match=r"OAuth2 token request to .* failed: HTTP 503"):
        await source(api, transport, client_credentials(api), cache=TokenCache()).fetch_page(None)


async def test_a_token_redirect_to_another_origin_is_refused(
    api: Api, transport: Transport
) -> None:
    other = Api()  # another origin: the client secret must not travel there
    await other.start()
    try:
        api.moved_to = f"{other.url}/token"
        auth = client_credentials(api, token_url=f"{api.url}/moved", client_auth="post")
        with pytest.raises(SourceError, match="another origin") as info:
            await source(api, transport, auth, cache=TokenCache()).fetch_page(None)
        assert api.client_secret not in str(info.value)
        assert other.seen == []
    finally:
        await other.stop()


async def test_abort_cancels_a_token_fetch_at_once(api: Api, transport: Transport) -> None:
    api.token_gate = asyncio.Event()  # the endpoint never answers
    token = CancelToken()
    pages = AsyncCursorPaginator(
        source(api, transport, client_credentials(api), cache=TokenCache()).fetch_page,
        cancel_token=token,
    )

    async def first() -> Page:
        return await anext(aiter(pages))

    crawl_task = asyncio.create_task(first())
    await api.token_asked.wait()
    token.cancel()
    with pytest.raises(Aborted):
        await asyncio.wait_for(crawl_task, timeout=2.0)
    assert api.page_requests == []


async def test_an_abort_during_the_save_of_a_rotation_still_saves_it(
    api: Api, transport: Transport
) -> None:
    api.rotate = True
    release, saving = asyncio.Event(), asyncio.Event()
    saved: dict[str, Any] = {}

    async def slow_save(key: str, value: Mapping[str, Any] | None) -> None:
        saving.set()
        await release.wait()
        saved[key] = value

    context = SourceContext("c-slow", transport, save_secret_state=slow_save)
    config = {"url": f"{api.url}/items", "records": "data", "auth": refresh_grant(api)}
    src = HttpSource(config, context, token_cache=TokenCache())
    task = asyncio.create_task(src.fetch_page(None))
    await saving.wait()
    task.cancel()
    await asyncio.sleep(0)  # let the cancellation land while the save is pending
    assert not task.done()  # it waits for the write
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert saved[OAUTH2_STATE_KEY]["refresh_token"] == api.refresh_token


# --- configuration ----------------------------------------------------------------------------


def test_validate_auth() -> None:
    assert validate_auth({"type": "bearer", "token": "${env:T}"}) == {}
    assert validate_auth({"type": "api_key", "in": "query", "name": "k", "value": "v"}) == {}
    assert (
        validate_auth(
            {
                "type": "oauth2",
                "grant": "refresh_token",
                "token_url": "https://auth.example/token",
                "client_id": "id",
                "client_secret": "${file:/run/secret}",
                "refresh_token": "${env:RT}",
                "scopes": ["a"],
                "audience": "aud",
                "extra": {"resource": "r"},
                "client_auth": "post",
            }
        )
        == {}
    )
    assert validate_auth("x") == {"source.auth": "Must be an object"}
    assert validate_auth({"type": "digest"}) == {
        "source.auth.type": "Must be one of bearer, basic, api_key, oauth2"
    }
    assert validate_auth({"type": "bearer", "token": "t", "x": 1}) == {
        "source.auth.x": "Unknown field for auth type 'bearer'"
    }
    # A reference's own colon is no ':' in the user name; one outside it, or in it, is.
    for username in ("${env:JIRA_EMAIL}", "${env:ZENDESK_EMAIL}/token", "${file:/run/user}"):
        assert validate_auth({"type": "basic", "username": username, "password": "p"}) == {}
    for username in ("a:b", "${env:A}:x", "${env:A:B}"):
        assert validate_auth({"type": "basic", "username": username, "password": "p"}) == {
            "source.auth.username": "Must not contain ':'"
        }
    assert validate_auth({"type": "basic", "username": "a:b", "password": "${vault:x}"}) == {
        "source.auth.password": "unsupported reference ${vault:x}: use ${env:NAME} or ${file:/path}"
    }
    assert validate_auth({"type": "api_key", "in": "body", "name": "k", "value": "v"}) == {
        "source.auth.in": "Must be 'header' or 'query'"
    }
    assert validate_auth({"type": "api_key", "in": "header", "name": "X Key", "value": "v"}) == {
        "source.auth.name": "Invalid header name"
    }
    errors = validate_auth(
        {
            "type": "oauth2",
            "grant": "refresh_token",
            "token_url": "ftp://x",
            "client_id": "id",
            "client_secret": "s",
            "scopes": "a b",
            "extra": {"grant_type": "password"},
        }
    )
    assert errors == {
        "source.auth.refresh_token": "Field required for grant 'refresh_token'",
        "source.auth.token_url": "Must be an http:// or https:// URL",
        "source.auth.scopes": "Must be a list of non-empty strings without spaces",
        "source.auth.extra.grant_type": "Reserved or invalid parameter name",
    }


async def test_the_source_refuses_an_invalid_auth(transport: Transport) -> None:
    context = SourceContext("c1", transport)
    with pytest.raises(SourceError, match=r"source\.auth\.token: Field required"):
        HttpSource({"url": "http://127.0.0.1/x", "auth": {"type": "bearer"}}, context)


def test_every_auth_value_but_the_descriptive_ones_is_a_secret() -> None:
    auth = {
        "type": "oauth2",
        "grant": "refresh_token",
        "token_url": "https://auth.example/token",
        "client_id": "client-name",
        "client_secret": "the-client-secret",
        "refresh_token": "${env:RT}",
        "scopes": ["read"],
        "audience": "https://api.example",
        "extra": {"client_assertion": "the-assertion"},
        "client_auth": "basic",
    }
    secrets = connector_secrets(
        {"url": "https://api.example/x", "auth": auth}, environ={"RT": "resolved-rt"}
    )
    assert secrets == {"the-client-secret", "the-assertion", "resolved-rt"}
    static = [
        {"type": "bearer", "token": "tok"},
        {"type": "basic", "username": "bob", "password": "pw"},
        {"type": "api_key", "in": "query", "name": "api_key", "value": "val"},
    ]
    assert [connector_secrets({"auth": a}) for a in static] == [{"tok"}, {"pw"}, {"val"}]


# --- through the daemon: the rotated refresh token survives a restart ------------------------


async def test_a_rotated_refresh_token_is_stored_and_survives_a_failed_crawl_and_a_restart(
    api: Api, make_any_daemon: DaemonFactory
) -> None:
    api.rotate = True
    configured = api.refresh_token
    first = make_any_daemon()
    await first.start()
    c = await first.create_connector(
        {
            "name": "oauth",
            "source": {
                "type": "http",
                "url": f"{api.url}/items",
                "records": "data",
                "id_field": "id",
                "pagination": {
                    "type": "cursor",
                    "cursor_param": "cursor",
                    "next_cursor": "next_cursor",
                },
                "auth": refresh_grant(api),
            },
            "page_retries": 0,
        }
    )
    # The crawl fails after the token came back rotated: the rotation is kept anyway.
    api.reject_pages = 2
    await first.trigger_sync(c.id)
    await first.wait_run(c.id)
    failed = await first.get_connector(c.id)
    assert failed.last_error is not None and "401" in failed.last_error
    rotated = api.refresh_token
    assert rotated != configured
    assert failed.secret_state[OAUTH2_STATE_KEY]["refresh_token"] == rotated
    # Never shown by the API (nor anything else of the config's secrets).
    shown = json.dumps(connector_json(failed, await first.document_counts(c.id)))
    assert rotated not in shown and configured not in shown
    await first.stop()

    # A restart: a new daemon, no token in memory, the config still naming the revoked one.
    TOKENS.drop(c.id)
    second = make_any_daemon()
    await second.start()
    await second.trigger_sync(c.id)
    await second.wait_run(c.id)
    done = await second.get_connector(c.id)
    assert done.last_error is None and done.last_synced_at is not None
    sent = [r.form["refresh_token"] for r in api.token_requests]
    assert configured in sent[:1] and rotated in sent[1:]
    assert done.secret_state[OAUTH2_STATE_KEY]["refresh_token"] == api.refresh_token
