"""The workers read a connector once, not once per batch: each claim reads the connector's
stamp (status, ``updated_at``) in the same statement, and a batch is delivered under the
connector's current config -- a changed one is read again, on both backend pairs."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from syncd.daemon import Daemon
from syncd.indexers.base import IndexerKind
from syncd.models import Connector, DocStatus, Document
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.sourceserver import SourceServer, make_records

# Where a worker claims a batch and reads its connector.
WORKERS = "indexing/lease.py"


class Tagged:
    """Records each batch with its config's ``tag``."""

    def __init__(self, config: Mapping[str, Any], seen: list[tuple[str, list[str]]]) -> None:
        self.tag = str(config["tag"])
        self._seen = seen

    async def index(self, document: Document) -> None:
        raise AssertionError("batches only")

    async def index_batch(self, documents: Sequence[Document]) -> None:
        self._seen.append((self.tag, [d.external_id for d in documents]))


def reads_by_workers(daemon: Daemon) -> list[str]:
    """The connector ids the workers read from the store from now on."""
    reads: list[str] = []
    original: Callable[[str], Awaitable[Connector | None]] = daemon.store.get_connector

    def counting(connector_id: str) -> Awaitable[Connector | None]:
        if sys._getframe(1).f_code.co_filename.endswith(WORKERS):
            reads.append(connector_id)
        return original(connector_id)

    daemon.store.get_connector = counting  # type: ignore[method-assign]
    return reads


async def started(make_any_daemon: DaemonFactory, seen: list[tuple[str, list[str]]]) -> Daemon:
    # One worker, small batches: the batches of a page are delivered one after the other.
    daemon = make_any_daemon(workers={"concurrency": 1, "batch_size": 5})
    kind = IndexerKind("tagged", lambda config, context: Tagged(config, seen))
    daemon.register_indexer("tagged", kind)
    await daemon.start()
    return daemon


async def test_batches_of_an_unchanged_connector_read_it_once(
    make_any_daemon: DaemonFactory,
) -> None:
    seen: list[tuple[str, list[str]]] = []
    daemon = await started(make_any_daemon, seen)
    async with SourceServer(40, page_size=40) as server:
        c = await daemon.create_connector(
            {"name": "t", "source": http_source(server), "indexer": {"type": "tagged", "tag": "a"}}
        )
        reads = reads_by_workers(daemon)
        await daemon.trigger_sync(c.id)
        await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 40)
    assert len(seen) == 8 and {tag for tag, _ in seen} == {"a"}
    # The first batch reads it; the run's start moved its updated_at before the claim, so the
    # stamp may send one more read; none for the other batches.
    assert 1 <= len(reads) <= 2, reads


async def test_a_batch_claimed_after_a_change_is_delivered_under_the_new_config(
    make_any_daemon: DaemonFactory,
) -> None:
    seen: list[tuple[str, list[str]]] = []
    daemon = await started(make_any_daemon, seen)
    async with SourceServer(10, page_size=5) as server:
        c = await daemon.create_connector(
            {"name": "t", "source": http_source(server), "indexer": {"type": "tagged", "tag": "a"}}
        )
        await daemon.trigger_sync(c.id)
        await daemon.wait_run(c.id)
        await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 10)
        assert {tag for tag, _ in seen} == {"a"}

        # The workers hold the connector as it was; the change reaches the next claim.
        await daemon.update_connector(c.id, {"indexer": {"type": "tagged", "tag": "b"}})
        server.set_records([{**r, "title": "changed"} for r in make_records(10)])
        reads = reads_by_workers(daemon)
        await daemon.trigger_sync(c.id)
        await daemon.wait_run(c.id)
        await asyncio.wait_for(
            daemon.wait_documents(
                c.id, lambda n: n[DocStatus.INDEXED] == 10 and n[DocStatus.PENDING] == 0
            ),
            10,
        )
    again = [ids for tag, ids in seen[2:]]
    assert sorted(i for ids in again for i in ids) == [r["id"] for r in make_records(10)]
    assert {tag for tag, _ in seen[2:]} == {"b"}
    assert reads and set(reads) == {c.id}
