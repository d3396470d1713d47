"""The state store protocol (DESIGN.md §1, §2, §4, §7).

The store is the source of truth. Every backend (SQLite, PostgreSQL) implements this one
protocol and passes the same contract suite in ``tests/contract``. Backends translate driver
errors into :class:`syncd.errors.StoreError` (and :class:`~syncd.errors.NameConflict`,
:class:`~syncd.errors.NotFound`, :class:`~syncd.errors.Fenced` where documented).

The protocol has four parts (:class:`ConnectorStore`, :class:`RunStore`,
:class:`DocumentStore`, :class:`InstanceStore`); a backend implements each as a class over
its connection, and :class:`~syncd.store.composite.CompositeStore` hands each call to its part.

Ordering and pagination: connector and run ids are time-ordered strings (``models.new_id``),
so keyset pagination by id is creation order. Lists take ``after`` (exclusive) and ``limit``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from syncd.models import (
    Connector,
    ConnectorStatus,
    Crawl,
    DocStatus,
    Document,
    DocumentInput,
    PruneCounts,
    PruneResult,
    Rejection,
    Run,
    SyncStatus,
    Transition,
    Waiting,
)

StateRule = Callable[[Connector], Transition]
"""A pure state rule: given the connector's current record, the transition to apply.

It may raise (e.g. :class:`~syncd.errors.Conflict`); then nothing is written and the
exception propagates out of :meth:`Store.mutate_connector`.
"""

PruneRule = Callable[[Connector, PruneCounts | None], Transition]
"""A state rule that also sees the prune counts of a crawl (``None`` when none were asked
for); its transition may carry a prune plan (:class:`~syncd.models.PrunePlan`)."""


@dataclass(frozen=True)
class Claim:
    """What :meth:`Store.claim_for_delivery` took: the documents, and the connector's
    ``(status, updated_at)`` as the claim read it (``None`` when nothing was claimed), so a
    worker can tell whether the connector it holds is still the current one."""

    documents: list[Document]
    stamp: tuple[ConnectorStatus, datetime] | None


@dataclass(frozen=True)
class InstanceBeat:
    """The last heartbeat of one daemon incarnation (``owner``): what it reported and when."""

    owner: str
    info: Mapping[str, Any]
    heartbeat_at: datetime


class ConnectorStore(Protocol):
    """The connectors: their records and state changes, the scheduler's claims, the prunes
    of their documents, their secret state and their totals."""

    async def create_connector(self, connector: Connector) -> Connector:
        """Insert a new connector; :class:`NameConflict` if the name is taken."""

    async def get_connector(self, connector_id: str) -> Connector | None:
        """The connector, or ``None``."""

    async def get_connector_with_counts(
        self, connector_id: str
    ) -> tuple[Connector, dict[DocStatus, int]] | None:
        """The connector and its :meth:`document_counts`, read together in one statement
        (one round trip: what ``GET /connectors/{id}`` shows), or ``None``."""

    async def list_connectors(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> list[Connector]:
        """Connectors ordered by id, ids greater than ``after``, optionally of one status."""

    async def list_connectors_with_counts(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> list[tuple[Connector, dict[DocStatus, int]]]:
        """:meth:`list_connectors`, each connector with its :meth:`document_counts`, in one
        statement (not one count per connector)."""

    async def mutate_connector(
        self, connector_id: str, rule: StateRule, *, fail_documents: str | None = None
    ) -> tuple[Connector, Connector]:
        """Atomically read the connector (row-locked), apply ``rule``, write the result.

        With ``fail_documents``, the connector's ``pending`` and ``running`` documents are
        marked ``failed`` with that error in the same transaction (an abort: no run started
        right after it can have its documents failed by it).

        Writes every field of the returned connector except ``id`` and ``created_at`` (the
        rule sets ``updated_at``), inserts ``transition.start`` as a new run row, and applies
        each of ``transition.ends`` to its run row if that row's outcome is still ``running``.
        All in one transaction. Returns ``(before, after)``. :class:`NotFound` if missing;
        :class:`NameConflict` if a rename collides.
        """

    async def mutate_with_prune(
        self, connector_id: str, rule: PruneRule, *, unseen_by: str | None = None
    ) -> tuple[Connector, Connector, PruneResult]:
        """:meth:`mutate_connector` for the rules that delete documents (DESIGN.md §11, §12).

        With ``unseen_by`` (a crawl id) that is the connector's current crawl — the
        completion of that crawl — the rule is also given, read in the transaction, the
        connector's live documents (not ``deleted``), how many of them that crawl did not
        see and are not already being deleted, and how many of those it confirms gone: missed
        before by at least ``prune_confirmations - 1`` complete crawls in a row
        (:func:`syncd.rules.prune_confirmations`; :class:`~syncd.models.PruneCounts`).
        Otherwise the counts are ``None``. Then, in the same transaction:

        - on a completion, each document's ``missed`` (the complete crawls in a row that did
          not see it) becomes 0 if the crawl saw it, and one more if it did not, is prunable
          and the plan is ``DELETE_UNSEEN`` or ``HOLD_UNSEEN``; without such a plan (``prune``
          off, nothing unseen) every ``missed`` becomes 0. No document stays held but those
          the plan holds, and what the connector's crawls saw is forgotten once the plan is
          applied;
        - ``DELETE_UNSEEN`` (on a completion only) / ``DELETE_HELD``: the prunable documents
          now missed by the plan's ``confirmations`` crawls or more / the held ones that no
          crawl begun since has seen get ``op = delete``, error, attempts and ``missed``
          reset, lease dropped, no longer held, and become ``deleted`` at once (payload
          dropped) when the plan is ``delete_at_once``, else ``pending``: the result's
          ``queued`` ids, to enqueue;
        - ``HOLD_UNSEEN`` (on a completion only): those documents are marked held; ``held``
          counts them.

        The plan's run (if any) adds the documents deleted or queued to its ``deleted`` and
        the held ones to its ``deletions_held``, and records the plan's ``awaiting`` as its
        ``awaiting_confirmation``. Returns ``(before, after, result)``.
        """

    async def delete_connector(self, connector_id: str) -> None:
        """Delete the connector with all its documents, runs and document counts (no-op if
        missing)."""

    async def count_admissible(self, now: datetime, *, limit: int) -> int:
        """How many connectors a tick could act on at ``now``, at most ``limit``: those due
        (``next_run_at <= now``, status ``active`` or ``error``) and those queued
        (``sync_queued_at`` set). Served by indexes: cheap when nothing is due."""

    async def claim_due(
        self, now: datetime, rule: StateRule, *, limit: int
    ) -> list[tuple[Connector, Connector]]:
        """The scheduler's bulk claim, one transaction: lock up to ``limit`` of the
        connectors :meth:`count_admissible` counts, oldest first (age: the earlier of a due
        ``next_run_at`` and ``sync_queued_at``; then id), skipping rows another transaction
        holds (so that instances claiming at once share the work and never wait for each
        other); apply ``rule`` to each; write every result (connector, run start, run
        ends as :meth:`mutate_connector` does) together.

        ``rule`` may change only the run, the schedule and the queued trigger
        (:data:`~syncd.store.codec.CLAIM_COLUMNS`; ``ValueError`` otherwise, nothing
        written); a row for which it raises :class:`~syncd.rules.NotDue` is left as it is.
        Returns ``(before, after)`` for every row locked, in age order (``after is before``
        when nothing was written)."""

    async def save_secret_state(
        self, connector_id: str, key: str, value: Mapping[str, Any] | None
    ) -> None:
        """Set (or, with ``None``, remove) one key of the connector's ``secret_state``, durably,
        in its own transaction. Not fenced by a run: a rotated refresh token must survive a
        failed, aborted or interrupted crawl. No-op if the connector is gone."""

    async def connector_totals(self) -> dict[tuple[ConnectorStatus, SyncStatus], int]:
        """Connectors per ``(status, sync_status)``, from one aggregate query (every pair
        present, zero if none)."""


class RunStore(Protocol):
    """The writes of a running crawl, fenced by its run id, and the runs' history."""

    async def commit_page(
        self,
        connector_id: str,
        run_id: str,
        documents: Sequence[DocumentInput],
        *,
        next_cursor: str | None,
        source_state: Mapping[str, Any],
        now: datetime,
        indexed: bool = False,
        rejected: Sequence[Rejection] = (),
        note: str | None = None,
        crawl: Crawl | None = None,
        deletions: Sequence[str] = (),
        delete_at_once: bool = False,
        filtered: int = 0,
    ) -> list[str]:
        """Commit one crawled page in one transaction, fenced by ``run_id``.

        If the connector's ``run_id`` is not ``run_id``: write nothing, raise :class:`Fenced`.
        Otherwise upsert ``documents`` (by external id), set ``resume_cursor = next_cursor``,
        ``source_state``, ``progress += (1 page, len(documents))``, ``sync_heartbeat_at =
        now``, and add to the run row's ``pages``, ``documents_seen`` and
        ``documents_enqueued``.

        ``rejected`` are the page's records that did not become documents: their number is
        added to the run's ``documents_rejected`` and the first of them join the run's
        ``rejections`` sample (at most :data:`~syncd.models.MAX_REJECTIONS` per run, each
        with ``page`` set to the run's page number). ``note``, when given, becomes the run's
        note (e.g. why it started over instead of resuming). ``filtered`` records the source
        read and left out (a backfill's past its window) are added to the run's
        ``documents_filtered``.

        A payload is stored as its canonical JSON text (``payload_json``) and read back
        exactly: integers of any size, every Unicode character including ``\\u0000``.

        A document becomes (or stays) ``pending`` with ``attempts = 0`` and ``error`` null —
        and its external id is returned to be enqueued — when it is new, when its content hash
        changed, or when it is ``failed`` with error ``"Aborted"``. Otherwise it is left as it
        is (an unchanged indexed, pending, running or failed document is not enqueued again).
        Duplicate external ids within one page: the last one wins.

        With ``indexed``, the documents written become ``indexed`` (``indexed_at = now``)
        instead of ``pending``: for indexers whose work is storing the document, so that
        nothing needs to pass through the queue. The returned ids are then the ones written.

        Deletions (DESIGN.md §11): a document written gets ``op = index`` (so a ``deleted``
        one, or one being deleted, that the crawl sees again is written and indexed again).
        With ``crawl``, the connector's ``crawl_id`` / ``crawl_full`` become the crawl's, and
        a full crawl records the page's external ids as seen by it (what its prune reads; one
        row per page, so a re-crawl of unchanged documents rewrites none of them). A document
        written stops being held, and its ``missed`` is 0 again. ``deletions`` are external
        ids the source reported deleted (tombstones; ids also among ``documents`` are
        ignored): those stored, live and not already being deleted are marked for deletion
        like :meth:`mutate_with_prune` does (``deleted`` at once with ``delete_at_once``,
        else ``pending`` deletes whose ids are returned with the others) and counted in the
        run's ``deleted``.
        """

    async def report(
        self, connector_id: str, run_id: str, *, now: datetime, waiting: Waiting | None
    ) -> bool:
        """Heartbeat of a running run: set ``sync_heartbeat_at`` and ``waiting``.

        Fenced: returns ``False`` (and writes nothing) if ``run_id`` is no longer current —
        the caller then stops the run. This poll is how an abort sent to another instance is
        noticed even when its broadcast is lost.
        """

    # --- runs -----------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""

    async def list_runs(
        self, connector_id: str, *, limit: int = 100, before: str | None = None
    ) -> list[Run]:
        """A connector's runs, newest first, ids smaller than ``before``."""


class DocumentStore(Protocol):
    """The documents: read, listed and counted, the indexing workers' writes under a lease,
    and the purge of tombstones."""

    async def get_document(self, connector_id: str, external_id: str) -> Document | None:
        """The document with its payload (and ``payload_json``, the stored JSON text), or
        ``None``."""

    async def list_documents(
        self,
        connector_id: str,
        *,
        status: DocStatus | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Document]:
        """Documents (without payload) ordered by external id, greater than ``after``."""

    async def document_counts(self, connector_id: str) -> dict[DocStatus, int]:
        """Number of documents per status (every status present, zero if none).

        Read from counters, never by counting documents: every statement that inserts,
        deletes or changes the status of documents updates the counts of their connector in
        its own transaction (database triggers), so they always equal a recount of what is
        committed."""

    async def pending_documents(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """``(connector_id, external_id)`` of pending documents, ordered by that pair,
        greater than ``after``: used to rebuild the queue on start."""

    async def claim_for_delivery(
        self,
        connector_id: str,
        external_ids: Sequence[str],
        *,
        lease_token: str,
        lease_until: datetime,
        now: datetime,
        with_payload: bool = True,
    ) -> Claim:
        """Compare-and-set ``pending → running`` for those of ``external_ids`` that are
        pending: set the lease, ``attempts += 1``. Returns the claimed documents, with their
        payload unless ``with_payload`` is false (an indexer that does not read it), and in
        the same statement the connector's status and ``updated_at`` (every change of its
        config or status moves it): a worker reads the connector again only when they differ
        from the copy it holds."""

    async def finish_documents(
        self,
        connector_id: str,
        lease_token: str,
        results: Sequence[tuple[str, DocStatus, str | None]],
        *,
        now: datetime,
    ) -> int:
        """Record ``(external_id, indexed|failed|deleted, error)`` for documents still
        ``running`` under ``lease_token`` (clears the lease; sets ``indexed_at`` when indexed;
        drops the payload when deleted). Returns how many were written; others (aborted,
        re-leased, seen again by a crawl) are left alone. One batch of results is one
        transaction whose cost grows with the results, not with the connector's documents
        (each id is looked up by key); the last result given for an id wins."""

    async def retry_documents(
        self,
        connector_id: str,
        lease_token: str,
        retries: Sequence[tuple[str, str, datetime]],
        *,
        now: datetime,
    ) -> int:
        """Record ``(external_id, error, not_before)`` transient failures of documents still
        ``running`` under ``lease_token``: back to ``pending`` with ``error``, not claimed
        before ``not_before`` (kept in ``lease_until``), when :meth:`release_expired_leases`
        hands them back to be queued. Returns how many were written."""

    async def extend_leases(self, connector_id: str, lease_token: str, until: datetime) -> int:
        """Push back the lease of documents running under ``lease_token``."""

    async def release_expired_leases(self, now: datetime) -> list[tuple[str, str]]:
        """Return ``running`` documents whose lease expired to ``pending``, and end the wait
        of ``pending`` documents retried (:meth:`retry_documents`) whose time has come;
        the ids of both, to be queued."""

    async def requeue_documents(
        self,
        connector_id: str,
        *,
        error: str | None = None,
        now: datetime,
        run_id: str | None = None,
    ) -> list[str]:
        """``failed → pending`` (attempts reset) for the connector's failed documents, only
        those with this ``error`` when given. Returns their external ids.

        With ``run_id`` the write is fenced like :meth:`commit_page`: unless the connector's
        current ``run_id`` is ``run_id``, nothing is written and :class:`Fenced` is raised.
        """

    async def purge_deleted(self, before: datetime) -> int:
        """Remove ``deleted`` documents (tombstones) whose deletion (``updated_at``) is older
        than ``before``; how many. Served by an index on deleted documents, not a scan."""

    async def document_totals(self) -> dict[DocStatus, int]:
        """Documents of every connector per status, from one aggregate query over the
        counters of :meth:`document_counts` (every status present, zero if none)."""


class InstanceStore(Protocol):
    """The heartbeats of the daemon's instances (``GET /status``)."""

    async def heartbeat_instance(self, owner: str, info: Mapping[str, Any], now: datetime) -> None:
        """Record that the instance ``owner`` is alive at ``now`` and reports ``info`` (a
        JSON object: version, running syncs, workers …); upsert by owner."""

    async def list_instances(self, since: datetime) -> list[InstanceBeat]:
        """The instances whose last heartbeat is newer than ``since``, by owner."""

    async def remove_instance(self, owner: str) -> None:
        """Forget the instance ``owner`` (it stopped cleanly); no-op if unknown."""


class Store(ConnectorStore, RunStore, DocumentStore, InstanceStore, Protocol):
    """Persistence of connectors, runs and documents: the four parts above, and the
    connection they share."""

    async def open(self) -> None:
        """Connect and apply migrations (idempotent; safe when several processes start)."""

    async def close(self) -> None:
        """Release connections."""

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless the store answers."""
