"""Source authentication of the ``http`` source: ``source.auth`` (DESIGN.md §8).

One of::

    {"type": "bearer", "token": "..."}                      -> Authorization: Bearer <token>
    {"type": "basic", "username": "...", "password": "..."}  -> Authorization: Basic ...
    {"type": "api_key", "in": "header"|"query", "name": "...", "value": "..."}
    {"type": "oauth2", "grant": "client_credentials"|"refresh_token", "token_url": "...",
     "client_id": "...", "client_secret": "...", "refresh_token": "..." (that grant only),
     "scopes": ["..."], "audience": "...", "extra": {"param": "..."},
     "client_auth": "basic"|"post"}

Every string but ``type``, ``in``, ``name`` and ``grant`` may hold ``${env:NAME}`` /
``${file:/path}``, resolved at each use (a rotated file is picked up). Every value is a secret
except those that describe the credential (``username``, ``client_id``, ``token_url``,
``scopes``, ``audience``: see :mod:`syncd.sources.secrets`).

OAuth2 access tokens are fetched through the daemon's transport (its timeouts and retry
budget: a token request is safe to repeat) and kept in a process-wide :class:`TokenCache`
per connector and auth config, renewed shortly before ``expires_in`` and once when the
source answers 401. A refresh token the endpoint rotates is kept in the cache and saved
through ``SourceContext.save_secret_state`` (key :data:`OAUTH2_STATE_KEY`), so that neither
another run nor a restart sends the revoked one.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote_plus, urlsplit

import structlog

from syncd.errors import (
    ClientConnectionError,
    ClientError,
    ClientTimeoutError,
    HTTPStatusError,
    ServerError,
    SourceError,
)
from syncd.http.retry_after import parse_retry_after
from syncd.http.timeouts import Timeouts
from syncd.http.transport import Response, Transport, safe_url
from syncd.logs import MASK, redact, register_secret, unregister_secret
from syncd.models import WaitReason
from syncd.sources.secrets import check_refs, resolve_refs

__all__ = [
    "AUTH_TYPES",
    "OAUTH2_GRANTS",
    "OAUTH2_STATE_KEY",
    "TOKENS",
    "AuthError",
    "Credentials",
    "SourceAuth",
    "TokenCache",
    "build_auth",
    "validate_auth",
]

log = structlog.get_logger("syncd.sources.auth")

AUTH_TYPES = ("bearer", "basic", "api_key", "oauth2")
OAUTH2_GRANTS = ("client_credentials", "refresh_token")
OAUTH2_STATE_KEY = "oauth2"
"""The key of ``SourceContext.secret_state`` holding the rotated refresh token."""

# Keys of each auth type: required, optional. Strings unless listed in _NON_STRING.
_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "bearer": (frozenset({"token"}), frozenset()),
    "basic": (frozenset({"username", "password"}), frozenset()),
    "api_key": (frozenset({"in", "name", "value"}), frozenset()),
    "oauth2": (
        frozenset({"grant", "token_url", "client_id", "client_secret"}),
        frozenset({"refresh_token", "scopes", "audience", "extra", "client_auth"}),
    ),
}
_NON_STRING = frozenset({"scopes", "extra"})
# Form parameters syncd sets itself: ``extra`` may not replace them.
_RESERVED_FORM = frozenset(
    {"grant_type", "refresh_token", "scope", "audience", "client_id", "client_secret"}
)
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A token is renewed 30 s before it expires, or 10 % of its lifetime if that is shorter.
_EARLY_SECONDS = 30.0
_EARLY_FRACTION = 0.1
_DESCRIPTION_CHARS = 200


class AuthError(SourceError):
    """Source authentication failed: the token endpoint refused or answered unusably, or the
    source still answered 401 with a freshly refreshed token. Never retried by a run."""


@dataclass(frozen=True)
class Credentials:
    """What to add to one request: headers and query parameters (resolved secrets).
    ``token`` is the OAuth2 access token used, to tell on a 401 whether it was renewed."""

    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    token: str | None = None


class SourceAuth(Protocol):
    """A source's authentication, resolved per request."""

    async def credentials(self) -> Credentials:
        """The credentials of the next request (an OAuth2 token may be fetched first)."""
        ...

    async def after_unauthorized(self, used: Credentials) -> Credentials | None:
        """New credentials after the source answered 401 to ``used``, or ``None`` when
        nothing can be renewed (the 401 stands)."""
        ...

    def shown(self) -> Credentials:
        """The header and parameter names this auth adds, each value ``"***"`` (a preview)."""
        ...


Register = Callable[[Iterable[str]], None]
SaveState = Callable[[str, Mapping[str, Any] | None], Awaitable[None]]
OnWait = Callable[[WaitReason, float], None]


# --- validation -----------------------------------------------------------------------------


def validate_auth(auth: Any) -> dict[str, str]:
    """Field errors of a ``source.auth`` value, keyed ``source.auth.<key>`` (``{}`` if valid)."""
    where = "source.auth"
    if not isinstance(auth, Mapping):
        return {where: "Must be an object"}
    kind = auth.get("type")
    if not isinstance(kind, str) or kind not in _FIELDS:
        return {f"{where}.type": f"Must be one of {', '.join(AUTH_TYPES)}"}
    required, optional = _FIELDS[kind]
    errors: dict[str, str] = {}
    for key, value in auth.items():
        if key == "type":
            continue
        if key not in required and key not in optional:
            errors[f"{where}.{key}"] = f"Unknown field for auth type {kind!r}"
        elif key not in _NON_STRING and (problem := _string_problem(value)):
            errors[f"{where}.{key}"] = problem
    for key in sorted(required - set(auth)):
        errors[f"{where}.{key}"] = "Field required"
    if errors:
        return errors
    if kind == "api_key":
        if auth["in"] not in ("header", "query"):
            errors[f"{where}.in"] = "Must be 'header' or 'query'"
        if "${" in auth["name"]:
            errors[f"{where}.name"] = "Must be a name, not a reference"
        elif auth["in"] == "header" and not _HEADER_NAME.fullmatch(auth["name"]):
            errors[f"{where}.name"] = "Invalid header name"
    elif kind == "basic" and ":" in auth["username"]:
        errors[f"{where}.username"] = "Must not contain ':'"
    elif kind == "oauth2":
        _check_oauth2(auth, errors)
    return errors


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return False


def _string_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return "Must be a non-empty string"
    if problem := check_refs(value):
        return problem
    if "\n" in value or "\r" in value:
        return "Must not contain line breaks"
    return None


def _check_oauth2(auth: Mapping[str, Any], errors: dict[str, str]) -> None:
    where = "source.auth"
    grant = auth["grant"]
    if grant not in OAUTH2_GRANTS:
        errors[f"{where}.grant"] = f"Must be one of {', '.join(OAUTH2_GRANTS)}"
    elif grant == "refresh_token" and "refresh_token" not in auth:
        errors[f"{where}.refresh_token"] = "Field required for grant 'refresh_token'"
    elif grant == "client_credentials" and "refresh_token" in auth:
        errors[f"{where}.refresh_token"] = "Only for grant 'refresh_token'"
    if "${" not in auth["token_url"] and not _is_http_url(auth["token_url"]):
        errors[f"{where}.token_url"] = "Must be an http:// or https:// URL"
    scopes = auth.get("scopes")
    if scopes is not None and (
        not isinstance(scopes, list)
        or not all(isinstance(s, str) and s and " " not in s for s in scopes)
    ):
        errors[f"{where}.scopes"] = "Must be a list of non-empty strings without spaces"
    extra = auth.get("extra")
    if extra is not None:
        if not isinstance(extra, Mapping):
            errors[f"{where}.extra"] = "Must be an object of strings"
        else:
            for key, value in extra.items():
                if key in _RESERVED_FORM or not isinstance(key, str) or not key:
                    errors[f"{where}.extra.{key}"] = "Reserved or invalid parameter name"
                elif problem := _string_problem(value):
                    errors[f"{where}.extra.{key}"] = problem
    if auth.get("client_auth", "basic") not in ("basic", "post"):
        errors[f"{where}.client_auth"] = "Must be 'basic' or 'post'"


# --- building ---------------------------------------------------------------------------------


def build_auth(
    config: Mapping[str, Any],
    *,
    connector_id: str,
    transport: Transport,
    timeouts: Timeouts,
    register: Register,
    on_wait: OnWait | None = None,
    secret_state: Mapping[str, Any] | None = None,
    save_secret_state: SaveState | None = None,
    cache: TokenCache | None = None,
) -> SourceAuth:
    """The :class:`SourceAuth` of a valid ``source.auth`` value (see :func:`validate_auth`).

    ``register`` has the log redaction mask resolved secrets; ``secret_state`` and
    ``save_secret_state`` are the source context's (see :class:`~syncd.sources.base
    .SourceContext`); ``cache`` defaults to the process-wide :data:`TOKENS`.
    """
    if config["type"] != "oauth2":
        return StaticAuth(config, register)
    return OAuth2Auth(
        config,
        connector_id=connector_id,
        transport=transport,
        timeouts=timeouts,
        register=register,
        on_wait=on_wait,
        secret_state=secret_state or {},
        save_secret_state=save_secret_state,
        cache=cache if cache is not None else TOKENS,
    )


class StaticAuth:
    """``bearer``, ``basic`` and ``api_key``: the configured values, resolved per request."""

    def __init__(self, config: Mapping[str, Any], register: Register) -> None:
        self._config = dict(config)
        self._register = register

    def _header_name(self) -> str:
        kind = self._config["type"]
        return str(self._config["name"]) if kind == "api_key" else "Authorization"

    async def credentials(self) -> Credentials:
        """See :class:`SourceAuth`."""
        config = self._config
        kind = config["type"]
        if kind == "bearer":
            secret = _resolve("token", config["token"])
            value = f"Bearer {secret}"
        elif kind == "basic":
            secret = _resolve("password", config["password"])
            encoded = _basic(_resolve("username", config["username"]), secret)
            value = f"Basic {encoded}"
            self._register([encoded])
        else:
            value = secret = _resolve("value", config["value"])
        # Resolved now: a file rotated since the connector was loaded holds a new secret.
        self._register([secret, value])
        if kind == "api_key" and config["in"] == "query":
            return Credentials(params={config["name"]: value})
        return Credentials(headers={self._header_name(): value})

    async def after_unauthorized(self, used: Credentials) -> Credentials | None:
        """See :class:`SourceAuth`: a static credential cannot be renewed."""
        return None

    def shown(self) -> Credentials:
        """See :class:`SourceAuth`."""
        if self._config["type"] == "api_key" and self._config["in"] == "query":
            return Credentials(params={self._config["name"]: MASK})
        return Credentials(headers={self._header_name(): MASK})


def _resolve(key: str, value: str) -> str:
    resolved = resolve_refs(value)
    # A file with several lines must not smuggle a header (or a form field) in.
    if "\n" in resolved or "\r" in resolved:
        raise SourceError(f"auth.{key}: resolved value contains a line break")
    if not resolved:
        raise SourceError(f"auth.{key}: resolved value is empty")
    return resolved


def _basic(username: str, password: str) -> str:
    if ":" in username:
        raise SourceError("auth.username: resolved value contains ':'")
    return base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


# --- the token cache ----------------------------------------------------------------------------


@dataclass
class _Token:
    fingerprint: str  # of the auth config the token was issued for
    value: str
    renew_at: float | None  # on the cache's clock; None: kept until a 401


@dataclass
class _Chain:
    """The newest refresh token of a grant chain (descending from one configured token)."""

    chain_id: str
    refresh_token: str
    generation: int


@dataclass
class _Slot:
    """A connector's cached tokens and the lock that makes one fetch at a time."""

    token: _Token | None = None
    chain: _Chain | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loop: asyncio.AbstractEventLoop | None = None


class TokenCache:
    """OAuth2 tokens of every connector of the process, by connector id.

    An access token is kept for the auth config (its fingerprint) it was issued for: a PATCH
    that changes the config drops it. A rotated refresh token is kept per grant chain, the
    configured refresh token it descends from (a new one configured starts a new chain).
    ``clock`` (monotonic seconds) times expiry; tests pass their own.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._slots: dict[str, _Slot] = {}

    def slot(self, connector_id: str) -> _Slot:
        """The connector's slot, with a lock of the running loop."""
        slot = self._slots.setdefault(connector_id, _Slot())
        loop = asyncio.get_running_loop()
        if slot.loop is not loop:  # a lock is bound to one loop (embedding may use several)
            slot.lock, slot.loop = asyncio.Lock(), loop
        return slot

    def drop(self, connector_id: str) -> None:
        """Forget a connector's tokens (e.g. once it is deleted)."""
        slot = self._slots.pop(connector_id, None)
        if slot is not None:
            _set_token(slot, None)
            _set_chain(slot, None)


def _set_token(slot: _Slot, token: _Token | None) -> None:
    # The cache registers the tokens it holds with the log redaction, and unregisters each
    # one it replaces: access tokens come and go every hour, the redaction must not grow.
    if token is not None:
        register_secret(token.value)
    if slot.token is not None:
        unregister_secret(slot.token.value)
    slot.token = token


def _set_chain(slot: _Slot, chain: _Chain | None) -> None:
    if chain is not None:
        register_secret(chain.refresh_token)
    if slot.chain is not None:
        unregister_secret(slot.chain.refresh_token)
    slot.chain = chain


TOKENS = TokenCache()
"""The process-wide token cache."""


# --- OAuth2 ---------------------------------------------------------------------------------------


class OAuth2Auth:
    """``oauth2``: an access token from ``token_url``, sent as ``Authorization: Bearer``."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        connector_id: str,
        transport: Transport,
        timeouts: Timeouts,
        register: Register,
        on_wait: OnWait | None,
        secret_state: Mapping[str, Any],
        save_secret_state: SaveState | None,
        cache: TokenCache,
    ) -> None:
        self._config = dict(config)
        self._connector_id = connector_id
        self._transport = transport
        self._timeouts = timeouts
        self._register = register
        self._on_wait = on_wait
        self._save = save_secret_state
        self._cache = cache
        self._fingerprint = _digest(json.dumps(self._config, sort_keys=True, default=str))
        self._saved = secret_state.get(OAUTH2_STATE_KEY)

    async def credentials(self) -> Credentials:
        """See :class:`SourceAuth`: the cached token while it is fresh, else a new one."""
        slot = self._cache.slot(self._connector_id)
        token = self._fresh(slot.token)
        if token is None:
            async with slot.lock:  # one fetch at a time: a refresh token is spent by use
                token = self._fresh(slot.token) or await self._fetch(slot)
        return _bearer(token)

    async def after_unauthorized(self, used: Credentials) -> Credentials | None:
        """See :class:`SourceAuth`: one new token (unless another request already renewed
        the one that was refused)."""
        slot = self._cache.slot(self._connector_id)
        async with slot.lock:
            token = self._fresh(slot.token)
            if token is None or token.value == used.token:
                token = await self._fetch(slot)
        return _bearer(token)

    def shown(self) -> Credentials:
        """See :class:`SourceAuth`."""
        return Credentials(headers={"Authorization": MASK})

    def _fresh(self, token: _Token | None) -> _Token | None:
        if token is None or token.fingerprint != self._fingerprint:
            return None
        if token.renew_at is not None and self._cache.clock() >= token.renew_at:
            return None
        return token

    async def _fetch(self, slot: _Slot) -> _Token:
        """Ask the token endpoint for a new access token (the caller holds the lock)."""
        config = self._config
        grant: str = config["grant"]
        url = _resolve("token_url", config["token_url"])
        if not _is_http_url(url):
            raise SourceError("auth.token_url: resolved value is not an http(s) URL")
        client_id = _resolve("client_id", config["client_id"])
        client_secret = _resolve("client_secret", config["client_secret"])
        form = {"grant_type": grant}
        chain_id = ""
        sent_refresh = ""
        if grant == "refresh_token":
            configured = _resolve("refresh_token", config["refresh_token"])
            chain_id = _digest("\0".join((url, client_id, configured)))
            self._adopt_saved(slot, chain_id)
            chain = slot.chain if slot.chain and slot.chain.chain_id == chain_id else None
            sent_refresh = chain.refresh_token if chain else configured
            form["refresh_token"] = sent_refresh
        if config.get("scopes"):
            form["scope"] = " ".join(config["scopes"])
        if config.get("audience"):
            form["audience"] = _resolve("audience", config["audience"])
        secrets = [client_secret, sent_refresh]
        for key, value in (config.get("extra") or {}).items():
            form[key] = _resolve(f"extra.{key}", value)
            secrets.append(form[key])
        headers = {"Accept": "application/json"}
        if config.get("client_auth", "basic") == "post":
            form["client_id"], form["client_secret"] = client_id, client_secret
        else:
            # RFC 6749 §2.3.1: both parts form-encoded before the Basic encoding.
            basic = _basic(quote_plus(client_id), quote_plus(client_secret))
            headers["Authorization"] = f"Basic {basic}"
            secrets.append(basic)
        secrets = [s for s in secrets if s]
        self._register(secrets)
        started = self._cache.clock()
        response = await self._post(url, form, headers, secrets)
        payload = _token_payload(response, url)
        token = _Token(self._fingerprint, payload.access_token, None)
        if payload.expires_in is not None:
            early = min(_EARLY_SECONDS, payload.expires_in * _EARLY_FRACTION)
            token.renew_at = started + payload.expires_in - early
        _set_token(slot, token)
        rotated = payload.refresh_token
        if grant == "refresh_token" and rotated and rotated != sent_refresh:
            generation = (slot.chain.generation if slot.chain else 0) + 1
            _set_chain(slot, _Chain(chain_id, rotated, generation))
            await self._persist(slot.chain)
        return token

    def _adopt_saved(self, slot: _Slot, chain_id: str) -> None:
        """Take the saved refresh token of this chain if it is newer than the cached one (it
        may have been rotated by another instance, or before a restart)."""
        saved = self._saved
        if not isinstance(saved, Mapping) or saved.get("chain") != chain_id:
            return
        token, generation = saved.get("refresh_token"), saved.get("generation")
        if not isinstance(token, str) or not token or not isinstance(generation, int):
            return
        if (
            slot.chain is None
            or slot.chain.chain_id != chain_id
            or (generation > slot.chain.generation)
        ):
            _set_chain(slot, _Chain(chain_id, token, generation))

    async def _persist(self, chain: _Chain | None) -> None:
        if chain is None:
            return
        if self._save is None:
            log.warning(
                "auth.refresh_token_not_saved",
                connector_id=self._connector_id,
            )
            return
        value = {
            "chain": chain.chain_id,
            "refresh_token": chain.refresh_token,
            "generation": chain.generation,
        }
        self._saved = value
        save = asyncio.ensure_future(self._save(OAUTH2_STATE_KEY, value))
        if isinstance(save, asyncio.Task):
            save.set_name(f"save-oauth2-state:{self._connector_id}")
        try:
            await asyncio.shield(save)
        except asyncio.CancelledError:
            # The endpoint has already revoked the previous refresh token: an abort arriving
            # now waits for this one write (milliseconds), or a restart would be locked out.
            await asyncio.wait({save})
            if not save.cancelled() and (error := save.exception()) is not None:
                log.warning(
                    "auth.refresh_token_save_failed",
                    connector_id=self._connector_id,
                    error=redact(str(error)),
                )
            raise

    async def _post(
        self, url: str, form: dict[str, str], headers: dict[str, str], secrets: list[str]
    ) -> Response:
        try:
            response = await self._transport.request(
                "POST",
                url,
                data=form,
                headers=headers,
                timeout=self._timeouts,
                raise_for_status=False,
                on_wait=self._on_wait,
                # Safe to send again: a client_credentials request changes nothing, and if a
                # refresh request's answer is lost, the token just sent is the only one held
                # (the next run would send it too).
                idempotent=True,
            )
        except HTTPStatusError as exc:  # a dropped connection, after the transport's retries
            message = _scrub(f"OAuth2 token request failed: {exc}", secrets)
            raise type(exc)(exc.status, message, retry_after=exc.retry_after) from exc
        except (ClientTimeoutError, ClientConnectionError, SourceError) as exc:
            # Same class, so that the run retries (or not) as it would after the page request.
            raise type(exc)(_scrub(f"OAuth2 token request failed: {exc}", secrets)) from exc
        if response.ok:
            return response
        status = response.status
        message = _scrub(
            f"OAuth2 token request to {safe_url(url)} failed: HTTP {status}"
            + _oauth_error(response),
            secrets,
        )
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if status >= 500:
            raise ServerError(status, message, retry_after=retry_after)
        if status in (408, 429):
            raise ClientError(status, message, retry_after=retry_after)
        raise AuthError(message)


@dataclass(frozen=True)
class _Payload:
    access_token: str
    expires_in: float | None
    refresh_token: str | None


def _token_payload(response: Response, url: str) -> _Payload:
    """The usable parts of a token response; never quotes the body (it holds tokens)."""
    where = f"OAuth2 token endpoint {safe_url(url)}"
    try:
        body = json.loads(response.body)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise AuthError(f"{where} answered HTTP {response.status} without a JSON object")
    access = body.get("access_token")
    if not isinstance(access, str) or not access:
        raise AuthError(f"{where} answered without an access_token")
    if "\n" in access or "\r" in access:
        raise AuthError(f"{where} answered an access_token with a line break")
    token_type = body.get("token_type")
    if isinstance(token_type, str) and token_type.lower() != "bearer":
        raise AuthError(f"{where} answered token_type {token_type[:40]!r}: only Bearer is usable")
    refresh = body.get("refresh_token")
    return _Payload(
        access,
        _expires_in(body.get("expires_in")),
        refresh if isinstance(refresh, str) and refresh else None,
    )


def _expires_in(value: Any) -> float | None:
    """Seconds from ``expires_in`` (a number, or a numeric string as some servers send);
    ``None`` when absent or unusable: the token is then kept until a 401."""
    if isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _oauth_error(response: Response) -> str:
    """``": <error> (<error_description>)"`` from an RFC 6749 §5.2 error body, if any."""
    try:
        body = json.loads(response.body)
    except ValueError:
        return ""
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return ""
    text = f": {body['error'][:80]}"
    description = body.get("error_description")
    if isinstance(description, str) and description:
        text += f" ({description[:_DESCRIPTION_CHARS]})"
    return text


def _scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` without any of ``secrets`` (the endpoint may echo what it was sent) and with
    the log redaction applied."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return redact(text)


def _bearer(token: _Token) -> Credentials:
    return Credentials(headers={"Authorization": f"Bearer {token.value}"}, token=token.value)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
