"""The process-wide cache of OAuth2 tokens: per connector, the access token of an auth config
and the newest refresh token of a grant chain, each registered with the log redaction while
it is held."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from syncd.observability.logs import register_secret, unregister_secret


@dataclass
class Token:
    """An access token and when to renew it."""

    fingerprint: str  # of the auth config the token was issued for
    value: str
    renew_at: float | None  # on the cache's clock; None: kept until a 401


@dataclass
class Chain:
    """The newest refresh token of a grant chain (descending from one configured token)."""

    chain_id: str
    refresh_token: str
    generation: int


@dataclass
class Slot:
    """A connector's cached tokens and the lock that makes one fetch at a time."""

    token: Token | None = None
    chain: Chain | None = None
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
        self._slots: dict[str, Slot] = {}

    def slot(self, connector_id: str) -> Slot:
        """The connector's slot, with a lock of the running loop."""
        slot = self._slots.setdefault(connector_id, Slot())
        loop = asyncio.get_running_loop()
        if slot.loop is not loop:  # a lock is bound to one loop (embedding may use several)
            slot.lock, slot.loop = asyncio.Lock(), loop
        return slot

    def drop(self, connector_id: str) -> None:
        """Forget a connector's tokens (e.g. once it is deleted)."""
        slot = self._slots.pop(connector_id, None)
        if slot is not None:
            set_token(slot, None)
            set_chain(slot, None)


def set_token(slot: Slot, token: Token | None) -> None:
    """Hold ``token`` in ``slot`` (``None``: none), replacing the one held."""
    # The cache registers the tokens it holds with the log redaction, and unregisters each
    # one it replaces: access tokens come and go every hour, the redaction must not grow.
    if token is not None:
        register_secret(token.value)
    if slot.token is not None:
        unregister_secret(slot.token.value)
    slot.token = token


def set_chain(slot: Slot, chain: Chain | None) -> None:
    """Hold ``chain`` in ``slot`` (``None``: none), replacing the one held."""
    if chain is not None:
        register_secret(chain.refresh_token)
    if slot.chain is not None:
        unregister_secret(slot.chain.refresh_token)
    slot.chain = chain


TOKENS = TokenCache()
"""The process-wide token cache."""
