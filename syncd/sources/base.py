"""Source plugin protocol (DESIGN.md §8), and :class:`SourceKind`, the type object of a kind.

A source turns a cursor into a :class:`~syncd.models.Page`. The built-in ``http`` source and
Python plugins (entry-point group ``syncd.sources``, or ``Daemon.register_source``) are both
built by a factory ``factory(config, context) -> Source``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel

from syncd.config.secrets import SecretsOf, connector_secrets
from syncd.models import CrawlEnd, CrawlWindow, Page, WaitReason, utcnow

if TYPE_CHECKING:
    from syncd.http.transport import Transport


@runtime_checkable
class Source(Protocol):
    """Fetches one page per call; the first call gets ``None``."""

    async def fetch_page(self, cursor: str | None) -> Page: ...


@runtime_checkable
class StatefulSource(Source, Protocol):
    """A source with state to keep between runs (e.g. an incremental high-water mark).

    ``checkpoint()`` is saved with every committed page and handed back as
    ``SourceContext.state`` to the next run.
    """

    def checkpoint(self) -> Mapping[str, Any]: ...


@runtime_checkable
class EndingSource(Source, Protocol):
    """A source that says how its crawl ended (the built-in ``http`` source does).

    ``crawl_end()`` is read after a page without a next cursor: the rule that ended the
    crawl and any warning about it, recorded on the run. A run of any other source records
    that the source returned no next cursor.
    """

    def crawl_end(self) -> CrawlEnd | None: ...


@runtime_checkable
class BlockingSource(Protocol):
    """A source with a plain ``def fetch_page`` (a blocking SDK): syncd runs each call in a
    worker thread (:mod:`syncd.sources.threaded`). It may have a ``checkpoint()`` too."""

    def fetch_page(self, cursor: str | None) -> Page: ...


SaveSecretState = Callable[[str, Mapping[str, Any] | None], Awaitable[None]]
"""``save_secret_state(key, value)`` of :class:`SourceContext`."""


@dataclass(frozen=True)
class SourceContext:
    """What a source factory gets besides its JSON config."""

    connector_id: str
    transport: Transport
    state: Mapping[str, Any] = field(default_factory=dict)
    # True when this run resumes a previous, unfinished crawl from its checkpoint cursor.
    resuming: bool = False
    # A backfill's window of the incremental field (DESIGN.md §12): the crawl asks for
    # ``since`` (and ``until``) instead of the mark, fresh or resumed; ``None`` otherwise.
    window: CrawlWindow | None = None
    # Told of every wait inside a fetch (a transport retry, a Retry-After), so that the
    # connector shows what its run waits for; sources pass it to ``Transport.request``.
    on_wait: Callable[[WaitReason, float], None] | None = None
    # Per-connector values that must outlive every crawl, failed ones included (the OAuth2
    # refresh token a token endpoint rotated: the old one is revoked). ``secret_state`` is
    # what was saved, as of the run's start; ``save_secret_state(key, value)`` stores one
    # value durably (``None`` deletes it) before it returns. Not fenced by the run: what it
    # records has already happened at the provider. ``None``: nothing can be saved (a
    # preview of a connector not created yet). Values are secrets: never shown.
    secret_state: Mapping[str, Any] = field(default_factory=dict)
    save_secret_state: SaveSecretState | None = None
    # The clock (aware UTC) a source reads the time of its crawl's start from: an
    # incremental mark never passes it (DESIGN.md §12). A test's own makes it exact.
    now: Callable[[], datetime] = utcnow


SourceFactory = Callable[[Mapping[str, Any], SourceContext], Source | BlockingSource]

MarkReader = Callable[[Mapping[str, Any], Any], Any]
"""``read_mark(config, value)``: a value of the incremental field of a source ``config`` (a
mark, a backfill's bound) as a key that orders such values; ``ValueError``, saying why, when
the config's format cannot read it."""


def source_secrets(config: Mapping[str, Any]) -> set[str]:
    """Secrets of a source config: header values, ``${env:}``/``${file:}`` references, URL
    passwords, auth values and values under secret-like keys."""
    return connector_secrets(config, None)


@dataclass(frozen=True)
class SourceKind:
    """A kind of source: everything syncd knows about a ``{"type": name, ...}`` source config
    besides the code that runs it (:mod:`syncd.plugins` holds the registry of them).

    ``config_model``: the pydantic model of its config (``None``: any object is accepted).
    ``stateful``: its instances have a ``checkpoint()`` saved with each committed page
    (:class:`StatefulSource`). ``read_mark``: how its config reads a value of the incremental
    field — a mark set by ``PUT /connectors/{id}/state``, a backfill's bounds (``None``:
    numbers and text, as they are).
    """

    name: str
    factory: SourceFactory
    config_model: type[BaseModel] | None = None
    secrets: SecretsOf = source_secrets
    stateful: bool = False
    read_mark: MarkReader | None = None
