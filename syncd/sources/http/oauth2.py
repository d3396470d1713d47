"""The ``oauth2`` source auth: access tokens from the token endpoint (client credentials or
refresh token grant), through the daemon's transport, kept in a
:class:`~syncd.sources.http.tokencache.TokenCache`, renewed before they expire and once after a
401; a rotated refresh token is saved as secret state."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

import structlog

from syncd.config.secrets import basic_credentials, resolve_secret
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
from syncd.observability.logs import MASK, redact
from syncd.sources.http.auth_config import is_http_url
from syncd.sources.http.credentials import (
    AuthError,
    Credentials,
    OnWait,
    Register,
    SaveState,
)
from syncd.sources.http.tokencache import Chain, Slot, Token, TokenCache, set_chain, set_token

__all__ = ["OAUTH2_STATE_KEY", "OAuth2Auth"]

# The logger of the whole source auth, whichever module logs.
log = structlog.get_logger("syncd.sources.auth")

OAUTH2_STATE_KEY = "oauth2"
"""The key of ``SourceContext.secret_state`` holding the rotated refresh token."""

# A token is renewed 30 s before it expires, or 10 % of its lifetime if that is shorter.
_EARLY_SECONDS = 30.0
_EARLY_FRACTION = 0.1
_DESCRIPTION_CHARS = 200


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

    def _fresh(self, token: Token | None) -> Token | None:
        if token is None or token.fingerprint != self._fingerprint:
            return None
        if token.renew_at is not None and self._cache.clock() >= token.renew_at:
            return None
        return token

    async def _fetch(self, slot: Slot) -> Token:
        """Ask the token endpoint for a new access token (the caller holds the lock)."""
        config = self._config
        grant: str = config["grant"]
        url = resolve_secret("token_url", config["token_url"])
        if not is_http_url(url):
            raise SourceError("auth.token_url: resolved value is not an http(s) URL")
        client_id = resolve_secret("client_id", config["client_id"])
        client_secret = resolve_secret("client_secret", config["client_secret"])
        form = {"grant_type": grant}
        chain_id = ""
        sent_refresh = ""
        if grant == "refresh_token":
            configured = resolve_secret("refresh_token", config["refresh_token"])
            chain_id = _digest("\0".join((url, client_id, configured)))
            self._adopt_saved(slot, chain_id)
            chain = slot.chain if slot.chain and slot.chain.chain_id == chain_id else None
            sent_refresh = chain.refresh_token if chain else configured
            form["refresh_token"] = sent_refresh
        if config.get("scopes"):
            form["scope"] = " ".join(config["scopes"])
        if config.get("audience"):
            form["audience"] = resolve_secret("audience", config["audience"])
        secrets = [client_secret, sent_refresh]
        for key, value in (config.get("extra") or {}).items():
            form[key] = resolve_secret(f"extra.{key}", value)
            secrets.append(form[key])
        headers = {"Accept": "application/json"}
        if config.get("client_auth", "basic") == "post":
            form["client_id"], form["client_secret"] = client_id, client_secret
        else:
            # RFC 6749 §2.3.1: both parts form-encoded before the Basic encoding.
            basic = basic_credentials(quote_plus(client_id), quote_plus(client_secret))
            headers["Authorization"] = f"Basic {basic}"
            secrets.append(basic)
        secrets = [s for s in secrets if s]
        self._register(secrets)
        started = self._cache.clock()
        response = await self._post(url, form, headers, secrets)
        payload = _token_payload(response, url)
        token = Token(self._fingerprint, payload.access_token, None)
        if payload.expires_in is not None:
            early = min(_EARLY_SECONDS, payload.expires_in * _EARLY_FRACTION)
            token.renew_at = started + payload.expires_in - early
        set_token(slot, token)
        rotated = payload.refresh_token
        if grant == "refresh_token" and rotated and rotated != sent_refresh:
            generation = (slot.chain.generation if slot.chain else 0) + 1
            set_chain(slot, Chain(chain_id, rotated, generation))
            await self._persist(slot.chain)
        return token

    def _adopt_saved(self, slot: Slot, chain_id: str) -> None:
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
            set_chain(slot, Chain(chain_id, token, generation))

    async def _persist(self, chain: Chain | None) -> None:
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


def _bearer(token: Token) -> Credentials:
    return Credentials(headers={"Authorization": f"Bearer {token.value}"}, token=token.value)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
