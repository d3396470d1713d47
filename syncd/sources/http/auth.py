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
``scopes``, ``audience``: see :mod:`syncd.config.secrets`). What answers show of it — its
shape, ``"***"`` for the rest — is :func:`syncd.config.secrets.shown_auth`.

OAuth2 access tokens are fetched through the daemon's transport (its timeouts and retry
budget: a token request is safe to repeat) and kept in a process-wide :class:`TokenCache`
per connector and auth config, renewed shortly before ``expires_in`` and once when the
source answers 401. A refresh token the endpoint rotates is kept in the cache and saved
through ``SourceContext.save_secret_state`` (key :data:`OAUTH2_STATE_KEY`), so that neither
another run nor a restart sends the revoked one.

This module builds a connector's auth (:func:`build_auth`) and holds the static kinds; the
parts live in :mod:`~syncd.sources.http.credentials` (what an auth hands a request),
:mod:`~syncd.sources.http.auth_config` (validation and JSON Schema),
:mod:`~syncd.sources.http.oauth2` and :mod:`~syncd.sources.http.tokencache`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncd.config.secrets import basic_credentials, resolve_secret
from syncd.http.timeouts import Timeouts
from syncd.http.transport import Transport
from syncd.observability.logs import MASK
from syncd.sources.http.auth_config import AUTH_TYPES, OAUTH2_GRANTS, validate_auth
from syncd.sources.http.credentials import (
    AuthError,
    Credentials,
    OnWait,
    Register,
    SaveState,
    SourceAuth,
)
from syncd.sources.http.oauth2 import OAUTH2_STATE_KEY, OAuth2Auth
from syncd.sources.http.tokencache import TOKENS, TokenCache

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
            secret = resolve_secret("token", config["token"])
            value = f"Bearer {secret}"
        elif kind == "basic":
            secret = resolve_secret("password", config["password"])
            encoded = basic_credentials(resolve_secret("username", config["username"]), secret)
            value = f"Basic {encoded}"
            self._register([encoded])
        else:
            value = secret = resolve_secret("value", config["value"])
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
