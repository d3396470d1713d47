"""Helpers for tests of several instances and of backend faults: daemons on one PostgreSQL
database and one Redis prefix, a webhook receiver that can hold requests, a private
``redis-server`` that a test may stop and start, and ``syncd run`` as a subprocess.

Waiting here is on events (a request arrived, a line was printed, a datagram came); the only
polling is of another process's state, bounded and failing with what was last seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from syncd.config import Config
from syncd.daemon import Daemon
from syncd.models import DocStatus
from tests.tomlwriter import toml_text

__all__ = [
    "HoldingReceiver",
    "NotifySocket",
    "RedisServer",
    "SyncdProcess",
    "UnixApi",
    "document_ids",
    "free_port",
    "poll_until",
    "shared_config",
    "shared_sections",
    "toml_text",
    "wait_indexed",
]

#: Bound for a state another process reaches on its own.
STATE_TIMEOUT = 20.0
#: Pause between two polls of another process.
POLL = 0.05


def shared_sections(
    postgres_dsn: str, queue_url: str, prefix: str, instance_id: str
) -> dict[str, dict[str, Any]]:
    """Configuration sections of an instance on a shared PostgreSQL database and Redis prefix,
    with fast heartbeats and no scheduler ticks unless a test asks for them."""
    return {
        "store": {"url": postgres_dsn, "pool_max_size": 10},
        "queue": {"url": queue_url, "prefix": prefix},
        "api": {"listen": "127.0.0.1:0"},
        "scheduler": {"tick_seconds": 3600},
        "sync": {"heartbeat_seconds": 0.05},
        "workers": {"concurrency": 2, "batch_size": 20},
        "daemon": {"instance_id": instance_id, "grace_seconds": 5},
    }


def shared_config(
    postgres_dsn: str,
    queue_url: str,
    prefix: str,
    instance_id: str,
    **sections: dict[str, Any],
) -> Config:
    """:func:`shared_sections` updated with ``sections``, as a :class:`Config`."""
    data = shared_sections(postgres_dsn, queue_url, prefix, instance_id)
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return Config.from_mapping(data, environ={})


async def wait_indexed(
    daemon: Daemon,
    connector_id: str,
    count: int,
    *,
    timeout: float = 15.0,
    others: Sequence[Daemon] = (),
) -> None:
    """Wait until ``count`` documents of the connector are indexed and none is left
    pending or running; fail with the counts seen when that does not happen in time.

    A daemon's ``wait_documents`` wakes on its own workers' changes only: when instances
    share the work, pass the other ones too (``others``); the instance that makes the last
    change sees the condition met.
    """

    def done(n: dict[DocStatus, int]) -> bool:
        return n[DocStatus.INDEXED] == count and n[DocStatus.PENDING] == n[DocStatus.RUNNING] == 0

    waits = {
        asyncio.create_task(d.wait_documents(connector_id, done, timeout), name=f"wait:{i}")
        for i, d in enumerate((daemon, *others))
    }
    try:
        finished, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        errors = [error for t in finished if (error := t.exception()) is not None]
        if len(errors) < len(finished):
            return
        for error in errors:
            if not isinstance(error, TimeoutError):
                raise error  # a failure, not a timeout: show it as it is
        counts = await daemon.document_counts(connector_id)
        pytest.fail(
            f"not every document indexed after {timeout:g}s: "
            + ", ".join(f"{s}={n}" for s, n in counts.items())
        )
    finally:
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def poll_until(
    check: Callable[[], Awaitable[bool]], what: str, timeout: float = STATE_TIMEOUT
) -> None:
    """Poll ``check`` (which asks another process) until true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(POLL)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- a webhook receiver -----------------------------------------------------------------


class HoldingReceiver:
    """A webhook endpoint: while :attr:`hold` is true, requests are kept unanswered (the
    indexer waits, its worker keeps the lease); otherwise each is answered 200.

    :attr:`answered` lists the external ids answered 200, in order.
    """

    def __init__(self) -> None:
        self.hold = True
        self.held: list[str] = []
        self.answered: list[str] = []
        self.url = ""
        self._release = asyncio.Event()
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Serve on 127.0.0.1, on a free port."""
        app = web.Application()
        app.router.add_post("/index", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/index"

    async def stop(self) -> None:
        """Let held requests go and stop serving."""
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_held(self, count: int, timeout: float = STATE_TIMEOUT) -> None:
        """Wait until ``count`` requests are being held."""
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: len(self.held) >= count)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        external_id = str(body["external_id"])
        if self.hold:
            self.held.append(external_id)
            async with self._arrived:
                self._arrived.notify_all()
            await self._release.wait()
            # The sender of a held request is gone (killed): its answer reaches no one.
            return web.json_response({"ok": False}, status=503)
        self.answered.append(external_id)
        return web.json_response({"ok": True})


# --- a private redis-server -------------------------------------------------------------


class RedisServer:
    """A throwaway ``redis-server`` without persistence on ``port``, that a test may stop
    and start again (on the same port, with an empty dataset)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._proc: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None
        self.output: list[str] = []

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        """Whether the server process is up."""
        return self._proc is not None and self._proc.returncode is None

    async def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait for its "ready" log line."""
        self._proc = await asyncio.create_subprocess_exec(
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        stream = self._proc.stdout
        assert stream is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    line = (await stream.readline()).decode(errors="replace")
                    if not line:
                        pytest.fail("redis-server exited:\n" + "".join(self.output))
                    self.output.append(line)
                    if "Ready to accept connections" in line:
                        break
        except TimeoutError:
            pytest.fail(f"redis-server not ready after {timeout:g}s:\n" + "".join(self.output))
        # Keep reading so that the pipe never fills up.
        self._drain = asyncio.create_task(self._collect(stream), name=f"redis-{self.port}-out")

    async def _collect(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.output.append(line.decode(errors="replace"))

    async def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and wait for its exit."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._drain is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
            self._drain = None


# --- syncd run as a subprocess ----------------------------------------------------------


class NotifySocket:
    """A unix datagram socket standing in for systemd's ``NOTIFY_SOCKET``, to learn without
    polling when a ``syncd run`` subprocess is ready."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.setblocking(False)

    async def wait_for(self, line: str, timeout: float = STATE_TIMEOUT) -> None:
        """Wait for a datagram carrying ``line`` (e.g. ``READY=1``)."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            while True:
                data = await loop.sock_recv(self._sock, 65536)
                if line in data.decode(errors="replace").split("\n"):
                    return

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()


class SyncdProcess:
    """``python -m syncd run --config <path>`` with its output collected as it comes."""

    def __init__(self, config_path: Path, env: Mapping[str, str]) -> None:
        self.argv = [sys.executable, "-m", "syncd", "run", "--config", str(config_path)]
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("SYNCD_")}
        # PYTHONPATH: the code under test, whatever checkout an installed `syncd` points at.
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(filter(None, [root, inherited.get("PYTHONPATH")]))
        self.env = {**inherited, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **env}
        self.output: list[str] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def returncode(self) -> int | None:
        """The exit code once reaped (``-N``: killed by signal N)."""
        return None if self._proc is None else self._proc.returncode

    async def start(self) -> None:
        """Start the process."""
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.env,
        )
        assert self._proc.stdout is not None
        self._reader = asyncio.create_task(self._collect(self._proc.stdout), name="syncd-out")

    async def _collect(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.output.append(line.decode(errors="replace"))

    async def kill(self) -> int | None:
        """SIGKILL the process (if it was started) and reap it; its exit code."""
        if self._proc is None:
            return None
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        code = await self._proc.wait()
        if self._reader is not None:
            await self._reader
            self._reader = None
        return code


class UnixApi:
    """A small client of a daemon's control API on a unix socket."""

    def __init__(self, socket_path: Path) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=str(socket_path)),
            timeout=aiohttp.ClientTimeout(total=10),
        )

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Send a request; ``(status, JSON body)``."""
        async with self._session.request(method, f"http://localhost{path}", json=body) as response:
            return response.status, await response.json()

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON of a 2xx answer (fails the test on anything else)."""
        status, data = await self.call(method, path, body)
        assert 200 <= status < 300, f"{method} {path}: {status} {data}"
        return data

    async def close(self) -> None:
        """Close the session."""
        await self._session.close()


def document_ids(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The external ids of ``records`` (their ``id``), sorted."""
    return sorted(str(r["id"]) for r in records)
