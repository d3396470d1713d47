"""Indexer plugin protocol (DESIGN.md §7, §8)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from syncd.models import Document

if TYPE_CHECKING:
    from syncd.http.transport import Transport


@runtime_checkable
class Indexer(Protocol):
    """Indexes one document. Returning marks it ``indexed``; raising marks it ``failed``
    with ``str(exc)`` as its error.

    An indexer may set ``needs_payload = False`` when it does not read
    ``document.payload``: workers then claim documents without loading their payload. An
    indexer whose whole work is the store keeping the document sets ``indexed_on_commit =
    True`` on its factory (class): a crawl then marks documents indexed in the page's own
    transaction, and they never pass through the queue.

    Deletions (DESIGN.md §11): an indexer may also have ``async delete(document)``
    (:class:`DeletingIndexer`), called for a document gone at the source (its ``payload`` is
    the last one indexed, when the indexer reads payloads); returning marks it ``deleted``,
    raising marks it ``failed``. An indexer without ``delete`` is not called: its documents
    gone at the source are marked ``deleted`` (the index keeps them).
    """

    async def index(self, document: Document) -> None: ...


@runtime_checkable
class DeletingIndexer(Indexer, Protocol):
    """An indexer that also removes documents from its index."""

    async def delete(self, document: Document) -> None: ...


@dataclass(frozen=True)
class IndexerContext:
    """What an indexer factory gets besides its JSON config."""

    connector_id: str
    transport: Transport


IndexerFactory = Callable[[Mapping[str, Any], IndexerContext], Indexer]
