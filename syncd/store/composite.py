"""A store made of its parts: the :class:`~syncd.store.base.Store` protocol's four parts,
each a backend's class over the connection it is given, behind one object.

A backend's store class (:class:`~syncd.store.sqlite.SQLiteStore`,
:class:`~syncd.store.postgres.PostgresStore`) builds its connection and the four parts on it,
and adds the lifecycle (``open``, ``close``, ``ping``); this class hands every other call to
the part that owns it.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any

from syncd.models import (
    Connector,
    ConnectorStatus,
    Crawl,
    DocStatus,
    Document,
    DocumentInput,
    PruneResult,
    Rejection,
    Run,
    SyncStatus,
    Waiting,
)
from syncd.store.base import (
    Claim,
    ConnectorStore,
    DocumentStore,
    InstanceBeat,
    InstanceStore,
    PruneRule,
    RunStore,
    StateRule,
)

__all__ = ["CompositeStore"]


class CompositeStore(ConnectorStore, RunStore, DocumentStore, InstanceStore):
    """The protocol's calls, each handed to its part (each method's docstring is the
    protocol's).

    A method returns its part's coroutine rather than awaiting it: a plain call, with no
    coroutine of its own, so the hot paths (a page commit, a claim, a finish) cost what they
    cost when the store was one class.
    """

    def __init__(
        self,
        *,
        connectors: ConnectorStore,
        runs: RunStore,
        documents: DocumentStore,
        instances: InstanceStore,
    ) -> None:
        self._connectors = connectors
        self._runs = runs
        self._documents = documents
        self._instances = instances

    # --- connectors ----------------------------------------------------------------------

    def create_connector(self, connector: Connector) -> Coroutine[Any, Any, Connector]:
        return self._connectors.create_connector(connector)

    def get_connector(self, connector_id: str) -> Coroutine[Any, Any, Connector | None]:
        return self._connectors.get_connector(connector_id)

    def get_connector_with_counts(
        self, connector_id: str
    ) -> Coroutine[Any, Any, tuple[Connector, dict[DocStatus, int]] | None]:
        return self._connectors.get_connector_with_counts(connector_id)

    def list_connectors(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> Coroutine[Any, Any, list[Connector]]:
        return self._connectors.list_connectors(status=status, limit=limit, after=after)

    def list_connectors_with_counts(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> Coroutine[Any, Any, list[tuple[Connector, dict[DocStatus, int]]]]:
        return self._connectors.list_connectors_with_counts(status=status, limit=limit, after=after)

    def mutate_connector(
        self, connector_id: str, rule: StateRule, *, fail_documents: str | None = None
    ) -> Coroutine[Any, Any, tuple[Connector, Connector]]:
        return self._connectors.mutate_connector(connector_id, rule, fail_documents=fail_documents)

    def mutate_with_prune(
        self, connector_id: str, rule: PruneRule, *, unseen_by: str | None = None
    ) -> Coroutine[Any, Any, tuple[Connector, Connector, PruneResult]]:
        return self._connectors.mutate_with_prune(connector_id, rule, unseen_by=unseen_by)

    def delete_connector(self, connector_id: str) -> Coroutine[Any, Any, None]:
        return self._connectors.delete_connector(connector_id)

    def count_admissible(self, now: datetime, *, limit: int) -> Coroutine[Any, Any, int]:
        return self._connectors.count_admissible(now, limit=limit)

    def claim_due(
        self, now: datetime, rule: StateRule, *, limit: int
    ) -> Coroutine[Any, Any, list[tuple[Connector, Connector]]]:
        return self._connectors.claim_due(now, rule, limit=limit)

    def save_secret_state(
        self, connector_id: str, key: str, value: Mapping[str, Any] | None
    ) -> Coroutine[Any, Any, None]:
        return self._connectors.save_secret_state(connector_id, key, value)

    def connector_totals(
        self,
    ) -> Coroutine[Any, Any, dict[tuple[ConnectorStatus, SyncStatus], int]]:
        return self._connectors.connector_totals()

    # --- runs ----------------------------------------------------------------------------

    def commit_page(
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
    ) -> Coroutine[Any, Any, list[str]]:
        return self._runs.commit_page(
            connector_id,
            run_id,
            documents,
            next_cursor=next_cursor,
            source_state=source_state,
            now=now,
            indexed=indexed,
            rejected=rejected,
            note=note,
            crawl=crawl,
            deletions=deletions,
            delete_at_once=delete_at_once,
            filtered=filtered,
        )

    def report(
        self, connector_id: str, run_id: str, *, now: datetime, waiting: Waiting | None
    ) -> Coroutine[Any, Any, bool]:
        return self._runs.report(connector_id, run_id, now=now, waiting=waiting)

    def get_run(self, run_id: str) -> Coroutine[Any, Any, Run | None]:
        return self._runs.get_run(run_id)

    def list_runs(
        self, connector_id: str, *, limit: int = 100, before: str | None = None
    ) -> Coroutine[Any, Any, list[Run]]:
        return self._runs.list_runs(connector_id, limit=limit, before=before)

    # --- documents -----------------------------------------------------------------------

    def get_document(
        self, connector_id: str, external_id: str
    ) -> Coroutine[Any, Any, Document | None]:
        return self._documents.get_document(connector_id, external_id)

    def list_documents(
        self,
        connector_id: str,
        *,
        status: DocStatus | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> Coroutine[Any, Any, list[Document]]:
        return self._documents.list_documents(connector_id, status=status, limit=limit, after=after)

    def document_counts(self, connector_id: str) -> Coroutine[Any, Any, dict[DocStatus, int]]:
        return self._documents.document_counts(connector_id)

    def pending_documents(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> Coroutine[Any, Any, list[tuple[str, str]]]:
        return self._documents.pending_documents(after=after, limit=limit)

    def claim_for_delivery(
        self,
        connector_id: str,
        external_ids: Sequence[str],
        *,
        lease_token: str,
        lease_until: datetime,
        now: datetime,
        with_payload: bool = True,
    ) -> Coroutine[Any, Any, Claim]:
        return self._documents.claim_for_delivery(
            connector_id,
            external_ids,
            lease_token=lease_token,
            lease_until=lease_until,
            now=now,
            with_payload=with_payload,
        )

    def finish_documents(
        self,
        connector_id: str,
        lease_token: str,
        results: Sequence[tuple[str, DocStatus, str | None]],
        *,
        now: datetime,
    ) -> Coroutine[Any, Any, int]:
        return self._documents.finish_documents(connector_id, lease_token, results, now=now)

    def retry_documents(
        self,
        connector_id: str,
        lease_token: str,
        retries: Sequence[tuple[str, str, datetime]],
        *,
        now: datetime,
    ) -> Coroutine[Any, Any, int]:
        return self._documents.retry_documents(connector_id, lease_token, retries, now=now)

    def extend_leases(
        self, connector_id: str, lease_token: str, until: datetime
    ) -> Coroutine[Any, Any, int]:
        return self._documents.extend_leases(connector_id, lease_token, until)

    def release_expired_leases(self, now: datetime) -> Coroutine[Any, Any, list[tuple[str, str]]]:
        return self._documents.release_expired_leases(now)

    def requeue_documents(
        self,
        connector_id: str,
        *,
        error: str | None = None,
        now: datetime,
        run_id: str | None = None,
    ) -> Coroutine[Any, Any, list[str]]:
        return self._documents.requeue_documents(connector_id, error=error, now=now, run_id=run_id)

    def purge_deleted(self, before: datetime) -> Coroutine[Any, Any, int]:
        return self._documents.purge_deleted(before)

    def document_totals(self) -> Coroutine[Any, Any, dict[DocStatus, int]]:
        return self._documents.document_totals()

    # --- instances -----------------------------------------------------------------------

    def heartbeat_instance(
        self, owner: str, info: Mapping[str, Any], now: datetime
    ) -> Coroutine[Any, Any, None]:
        return self._instances.heartbeat_instance(owner, info, now)

    def list_instances(self, since: datetime) -> Coroutine[Any, Any, list[InstanceBeat]]:
        return self._instances.list_instances(since)

    def remove_instance(self, owner: str) -> Coroutine[Any, Any, None]:
        return self._instances.remove_instance(owner)
