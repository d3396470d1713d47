"""Python plugins: sources and indexers from the ``syncd.sources`` / ``syncd.indexers``
entry-point groups, and registered on the ``Daemon``."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from syncd.errors import ValidationError
from syncd.indexers.base import IndexerContext
from syncd.models import DocStatus, Document, Page, RunOutcome
from syncd.sources.base import SourceContext
from tests.integration.conftest import DaemonFactory

INDEXED: list[str] = []


class CountingSource:
    """Three pages of two records each; the cursor is the page number."""

    def __init__(self, config: Mapping[str, Any], context: SourceContext) -> None:
        self.prefix = str(config.get("prefix", "r"))

    async def fetch_page(self, cursor: str | None) -> Page:
        page = int(cursor or 0)
        records = [{"id": f"{self.prefix}{page}-{i}", "n": i} for i in range(2)]
        return Page(records, str(page + 1) if page < 2 else None)


class ListIndexer:
    """Records what it indexed, through the queue and the workers."""

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        pass

    async def index(self, document: Document) -> None:
        INDEXED.append(document.external_id)


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution on ``sys.path`` declaring both entry points, as ``pip install`` would."""
    dist = tmp_path / "syncd_demo_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: syncd-demo-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[syncd.sources]\n"
        f"counting = {__name__}:CountingSource\n"
        "[syncd.indexers]\n"
        f"listing = {__name__}:ListIndexer\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert str(tmp_path) in sys.path


async def test_entry_point_plugins_are_loaded(
    installed_plugin: None, make_daemon: DaemonFactory
) -> None:
    INDEXED.clear()
    daemon = make_daemon()
    await daemon.start()
    assert {"counting", "http"} <= daemon.source_types
    assert {"listing", "store", "webhook"} <= daemon.indexer_types
    c = await daemon.create_connector(
        {
            "name": "plugin",
            "source": {"type": "counting", "prefix": "p"},
            "indexer": {"type": "listing"},
        }
    )
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    runs, _ = await daemon.list_runs(c.id)
    assert (runs[0].outcome, runs[0].pages, runs[0].documents_seen) == (RunOutcome.SUCCEEDED, 3, 6)
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 6)
    assert sorted(INDEXED) == [f"p{p}-{i}" for p in range(3) for i in range(2)]


async def test_registered_plugins_and_unknown_types(make_daemon: DaemonFactory) -> None:
    daemon = make_daemon()
    daemon.register_source("counting", CountingSource)
    await daemon.start()
    c = await daemon.create_connector({"name": "registered", "source": {"type": "counting"}})
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    assert (await daemon.document_counts(c.id))[DocStatus.INDEXED] == 6
    with pytest.raises(ValidationError) as info:
        await daemon.create_connector({"name": "x", "source": {"type": "nope"}})
    assert "source.type" in info.value.errors


def test_an_indexer_kind_check_is_taken_from_a_class_or_static_method() -> None:
    from syncd.indexers.opensearch import OpenSearchIndexer
    from syncd.plugins import Registry, as_indexer_kind

    class Checked:
        def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None: ...

        async def index(self, document: Document) -> None: ...

        @classmethod
        async def check(cls, config: Mapping[str, Any], context: IndexerContext) -> list[str]:
            return []

    class InstanceCheck(Checked):
        async def check(  # type: ignore[override]
            self, config: Mapping[str, Any], context: IndexerContext
        ) -> list[str]:
            return []

    assert as_indexer_kind("checked", Checked).check == Checked.check
    # An instance method cannot run before the indexer is built: not a check.
    assert as_indexer_kind("instance", InstanceCheck).check is None
    builtin = Registry.builtin()
    opensearch = builtin.find_indexer("opensearch")
    assert opensearch is not None and opensearch.check == OpenSearchIndexer.check
    assert [k for k in ("store", "webhook") if builtin.indexer({"type": k}).check is None] == [
        "store",
        "webhook",
    ]
