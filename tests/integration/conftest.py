"""Fixtures for daemon tests: a real daemon on a temporary SQLite file and the in-process
queue, and a real local source server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from syncd.config import Config
from syncd.daemon import Daemon
from tests.integration.sourceserver import SourceServer


def embedded_config(tmp_path: Path, **sections: dict[str, Any]) -> Config:
    """The embedded default on a temporary file, with fast heartbeats and no scheduler
    ticks unless a test asks for them."""
    data: dict[str, Any] = {
        "store": {"url": f"sqlite:///{tmp_path / 'syncd.db'}"},
        "queue": {"url": "memory://"},
        "api": {"listen": "127.0.0.1:0"},
        "scheduler": {"tick_seconds": 3600},
        "sync": {"heartbeat_seconds": 0.05},
        "workers": {"concurrency": 2, "batch_size": 20},
        "daemon": {"grace_seconds": 5},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return Config.from_mapping(data, environ={})


def http_source(server: SourceServer, **extra: Any) -> dict[str, Any]:
    """A connector ``source`` for the server's cursor-paginated ``/items``."""
    return {
        "type": "http",
        "url": server.items_url,
        "records": "data",
        "id_field": "id",
        "pagination": {"type": "cursor", "cursor_param": "cursor", "next_cursor": "next_cursor"},
        **extra,
    }


@pytest.fixture
async def source() -> AsyncIterator[SourceServer]:
    """25 records in pages of 10."""
    async with SourceServer(25, page_size=10) as server:
        yield server


DaemonFactory = Callable[..., Daemon]


@pytest.fixture
async def make_daemon(tmp_path: Path) -> AsyncIterator[DaemonFactory]:
    """Build daemons on this test's SQLite file; every one started is stopped at the end."""
    made: list[Daemon] = []

    def build(**sections: dict[str, Any]) -> Daemon:
        d = Daemon(embedded_config(tmp_path, **sections), serve_api=False)
        made.append(d)
        return d

    yield build
    for d in made:
        await d.stop()


@pytest.fixture
async def daemon(make_daemon: DaemonFactory) -> Daemon:
    d = make_daemon()
    await d.start()
    return d
