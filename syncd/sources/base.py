"""Source plugin protocol (DESIGN.md §8).

A source turns a cursor into a :class:`~syncd.models.Page`. The built-in ``http`` source and
Python plugins (entry-point group ``syncd.sources``, or ``Daemon.register_source``) are both
built by a factory ``factory(config, context) -> Source``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from syncd.models import Page, WaitReason

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


@dataclass(frozen=True)
class SourceContext:
    """What a source factory gets besides its JSON config."""

    connector_id: str
    transport: Transport
    state: Mapping[str, Any] = field(default_factory=dict)
    # True when this run resumes a previous, unfinished crawl from its checkpoint cursor.
    resuming: bool = False
    # Told of every wait inside a fetch (a transport retry, a Retry-After), so that the
    # connector shows what its run waits for; sources pass it to ``Transport.request``.
    on_wait: Callable[[WaitReason, float], None] | None = None


SourceFactory = Callable[[Mapping[str, Any], SourceContext], Source]
