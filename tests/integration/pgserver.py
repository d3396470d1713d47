"""A private PostgreSQL cluster for outage tests: ``initdb`` in a temporary directory, served on
a free port of 127.0.0.1, stopped and started again at will (the shared server is never
touched: other suites use it).

When the tests run as root, the cluster is created and served by the ``postgres`` system user
(PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

__all__ = ["PostgresServer", "postgres_bin"]


def postgres_bin() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl`` (newest installed version), or ``None``."""
    found = shutil.which("pg_ctl")
    if found is not None:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


class PostgresServer:
    """A throwaway PostgreSQL cluster on ``port`` (trust authentication, no fsync)."""

    def __init__(self, port: int) -> None:
        self.port = port
        bin_dir = postgres_bin()
        if bin_dir is None:
            pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self._bin = bin_dir
        self._root = Path(tempfile.mkdtemp(prefix="syncd-pg-"))
        self._data = self._root / "data"
        self._log = self._root / "server.log"
        self._user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            self._user = pwd.getpwnam("postgres")
            os.chown(self._root, self._user.pw_uid, self._user.pw_gid)

    @property
    def dsn(self) -> str:
        """The DSN of the cluster's ``postgres`` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    async def _run(self, *argv: str) -> None:
        command = [str(self._bin / argv[0]), *argv[1:]]
        if self._user is not None:
            command = ["runuser", "-u", self._user.pw_name, "--", *command]
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            log = self._log.read_text(errors="replace") if self._log.exists() else ""
            pytest.fail(f"{' '.join(argv)} failed:\n{out.decode(errors='replace')}\n{log}")

    async def init(self) -> None:
        """Create the cluster (once)."""
        await self._run(
            "initdb", "-D", str(self._data), "-U", "postgres", "-A", "trust", "--no-sync"
        )

    async def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self._root}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        await self._run(
            "pg_ctl", "-D", str(self._data), "-l", str(self._log), "-o", options, "-w", "start"
        )

    async def stop(self) -> None:
        """Stop the server now (``fast``: every session is cut), and wait for its exit."""
        await self._run("pg_ctl", "-D", str(self._data), "-m", "fast", "-w", "stop")

    async def close(self) -> None:
        """Stop the server if it runs and remove the cluster."""
        if (self._data / "postmaster.pid").exists():
            await self.stop()
        shutil.rmtree(self._root, ignore_errors=True)
