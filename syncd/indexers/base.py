"""Indexer plugin protocol (DESIGN.md §7, §8), and :class:`IndexerKind`, the type object of
a kind."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel

from syncd.config.secrets import SecretsOf, connector_secrets
from syncd.models import Document

if TYPE_CHECKING:
    from syncd.http.transport import Transport
    from syncd.indexers.postgres.pool import PostgresPools


@runtime_checkable
class Indexer(Protocol):
    """Indexes one document. Returning marks it ``indexed``; raising marks it ``failed``
    with ``str(exc)`` as its error.

    An indexer may set ``needs_payload = False`` when it does not read
    ``document.payload``: workers then claim documents without loading their payload.
    Otherwise ``document.payload_json`` is the stored JSON text, and ``document.payload`` is
    parsed from it when first read (an indexer that sends the text as it is parses nothing). An
    indexer whose whole work is the store keeping the document sets ``indexed_on_commit =
    True`` on its factory (class): a crawl then marks documents indexed in the page's own
    transaction, and they never pass through the queue.

    Deletions (DESIGN.md §11): an indexer may also have ``async delete(document)``
    (:class:`DeletingIndexer`), called for a document gone at the source (its ``payload`` is
    the last one indexed, when the indexer reads payloads); returning marks it ``deleted``,
    raising marks it ``failed``. An indexer without ``delete`` is not called: its documents
    gone at the source are marked ``deleted`` (the index keeps them).

    Lifecycle: an indexer that holds resources (connections, pools) may have ``async
    aclose()``; the daemon calls it once when it stops using the instance — its connector
    deleted or its config changed, or the daemon stopping — after the calls in flight.
    """

    async def index(self, document: Document) -> None: ...


@runtime_checkable
class DeletingIndexer(Indexer, Protocol):
    """An indexer that also removes documents from its index."""

    async def delete(self, document: Document) -> None: ...


BatchFailures = Mapping[str, str] | None
"""What a batch call returns: the documents of the batch that failed, external id → error
(``None`` or an empty mapping: every document succeeded). An error given as
:class:`Transient` is retried later (``[workers] max_attempts``); any other is final."""


class Transient(str):
    """A per-document failure worth trying again later (the target was busy: a 429 or 503
    for that item), as a batch indexer reports it: ``{"doc-1": Transient("HTTP 503")}``."""

    __slots__ = ()


@runtime_checkable
class BatchIndexer(Indexer, Protocol):
    """An indexer that also takes documents in batches (DESIGN.md §7).

    Workers call ``index_batch`` with up to ``batch_size`` documents (and never more than
    one worker batch, ``[workers] batch_size``) under one ``index_timeout`` for the call.
    It returns the failures, external id → error: those documents are marked ``failed``
    with the error, the others ``indexed``; ids not in the batch are ignored. Raising (or
    the call timing out) fails every document of the call with that error. Cancelling the
    call (an abort) cancels the work in flight.

    ``batch_size`` (read once per worker batch; absent: no limit of its own) is the most
    documents per call; at 1 the worker calls ``index`` (and ``delete``) per document
    instead. Deletions go through ``delete_batch`` the same way when the indexer has it
    (:class:`BatchDeletingIndexer`); an indexer that deletes without ``delete_batch`` gets
    ``delete`` per document.
    """

    async def index_batch(self, documents: Sequence[Document]) -> BatchFailures: ...


@runtime_checkable
class BatchDeletingIndexer(DeletingIndexer, Protocol):
    """An indexer that also deletes documents in batches (same contract as
    :meth:`BatchIndexer.index_batch`; success marks the documents ``deleted``)."""

    async def delete_batch(self, documents: Sequence[Document]) -> BatchFailures: ...


@dataclass(frozen=True)
class IndexerContext:
    """What an indexer factory gets besides its JSON config: the connector, the daemon's
    shared HTTP transport and its PostgreSQL pools (``None`` outside a daemon: an indexer
    then opens its own, and closes them in ``aclose``)."""

    connector_id: str
    transport: Transport
    pools: PostgresPools | None = None


IndexerFactory = Callable[[Mapping[str, Any], IndexerContext], Indexer]

IndexerCheck = Callable[[Mapping[str, Any], IndexerContext], Awaitable[list[str]]]
"""``check(config, context)``: reach an indexer's target without writing to it; the problems
found (``[]``: none). What ``syncd validate --connect`` runs."""


def indexer_secrets(config: Mapping[str, Any]) -> set[str]:
    """Secrets of an indexer config, found by the generic rules
    (:func:`syncd.config.secrets.connector_secrets`)."""
    return connector_secrets({}, config)


@dataclass(frozen=True)
class IndexerKind:
    """A kind of indexer: everything syncd knows about a ``{"type": name, ...}`` indexer
    config besides the code that runs it (:mod:`syncd.plugins` holds the registry of them).

    ``config_model``: the pydantic model of its config (``None``: any object is accepted).
    ``indexed_on_commit``: its whole work is the store keeping the document, so a crawl marks
    documents indexed in the page's own transaction and they skip the queue.
    ``needs_payload``: workers load documents' payloads for it.
    ``supports_delete``: its instances have ``async delete(document)``, called for documents
    gone at the source (DESIGN.md §11); without it they are marked ``deleted`` without a call.
    A kind that is ``indexed_on_commit`` or does not support delete deletes at once, in the
    transaction that decides it (no queue: :func:`syncd.rules.deletes_at_once`).
    ``check``: :data:`IndexerCheck`, run by ``syncd validate --connect`` on a config that
    passed validation, with the transport the daemon would use; it reports what keeps the
    target from taking the documents (unreachable, refused credentials, wrong shape) as one
    sentence each, secrets left out, and creates or changes nothing. ``None``: the kind has
    nothing to reach, or no way to look.
    """

    name: str
    factory: IndexerFactory
    config_model: type[BaseModel] | None = None
    secrets: SecretsOf = indexer_secrets
    indexed_on_commit: bool = False
    needs_payload: bool = True
    supports_delete: bool = False
    check: IndexerCheck | None = None
