"""Records for the contract suites: connectors, documents and running syncs at fixed times."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from syncd.jsontext import content_hash
from syncd.models import (
    Connector,
    DocumentInput,
    RunStart,
    RunTrigger,
    SyncStatus,
    Transition,
    new_id,
)
from syncd.store.base import Store

T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
"""The suite's fixed "now"; tests move time with :func:`at`, never by sleeping."""


def at(seconds: float) -> datetime:
    """``T0`` shifted by ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def make_connector(name: str | None = None, **fields: Any) -> Connector:
    """A fresh connector record (unique name unless given); ``fields`` override defaults."""
    values: dict[str, Any] = {
        "id": new_id(),
        "name": name if name is not None else f"connector-{new_id()}",
        "source": {"type": "http", "url": "http://127.0.0.1:9000/items", "id_field": "id"},
        "indexer": {"type": "store"},
        "created_at": T0,
        "updated_at": T0,
    }
    values.update(fields)
    return Connector(**values)


def make_doc(external_id: str, version: int = 1) -> DocumentInput:
    """A document whose payload (and so content hash) changes with ``version``."""
    payload = {"id": external_id, "title": f"{external_id} v{version}", "tags": ["a", "b"]}
    return DocumentInput(external_id, payload, content_hash(payload))


async def start_run(
    store: Store,
    connector_id: str,
    *,
    now: datetime = T0,
    trigger: RunTrigger = RunTrigger.MANUAL,
    owner: str | None = "instance-a",
) -> str:
    """Mark the connector running under a new run (with its run row); the run id."""
    run_id = new_id()

    def change(c: Connector) -> Transition:
        running = replace(
            c,
            sync_status=SyncStatus.RUNNING,
            run_id=run_id,
            sync_started_at=now,
            sync_owner=owner,
            updated_at=now,
        )
        return Transition(running, start=RunStart(run_id, c.id, trigger, now, owner))

    await store.mutate_connector(connector_id, change)
    return run_id
