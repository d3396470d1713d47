"""What a source's authentication hands the ``http`` source: the :class:`Credentials` of a
request, the :class:`SourceAuth` protocol and its error (configured secrets are resolved at
use by :func:`syncd.config.secrets.resolve_secret`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from syncd.errors import SourceError
from syncd.models import WaitReason


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
