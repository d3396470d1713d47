"""Fixtures for acceptance tests: the real ``syncd`` as subprocesses, driven through its CLI
and its control API on a unix socket, against a real local source server.

Each test gets a :class:`Harness` with its own directory (configuration, SQLite file, API
socket). Every process the harness starts is killed and reaped at teardown, whatever the
test did. The only polling here is waiting for another process (readiness, or a state the
daemon reaches on its own); it is bounded and fails with the process's output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.sourceserver import SourceServer
from tests.tomlwriter import toml_text

REPO = Path(__file__).resolve().parents[2]

#: How long a daemon may take to answer ``/healthz`` after being started.
READY_TIMEOUT = 20.0
#: How long a CLI command may take.
CLI_TIMEOUT = 30.0
#: Default bound for waiting on a state the daemon reaches on its own.
STATE_TIMEOUT = 20.0
#: Pause between two polls of another process.
POLL = 0.05

REPO_ROOT = Path(__file__).resolve().parents[2]

# Variables that would change how the daemon or the CLI behaves if inherited from the
# environment the tests run in.
_INHERITED_PREFIXES = ("SYNCD_", "NOTIFY_SOCKET", "WATCHDOG_", "LISTEN_")


def base_environ(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without syncd or systemd variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    # The code under test, whatever checkout an installed `syncd` happens to point at.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


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


async def wait_until(
    check: Callable[[], Awaitable[bool]], what: str, timeout: float = STATE_TIMEOUT
) -> None:
    """Poll ``check`` (which asks another process) until true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(POLL)


# --- the control API ------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One API answer: status, raw body, and the body parsed as JSON (or ``None``)."""

    status: int
    text: str

    @property
    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.text)


class Api:
    """A client of the daemon's control API on a unix socket (one session, closed by the
    harness)."""

    def __init__(self, socket_path: Path, token: str | None = None) -> None:
        self.socket_path = socket_path
        self.token = token
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=str(self.socket_path)),
                timeout=aiohttp.ClientTimeout(total=10),
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | bool | None = True,
        timeout: float | None = None,
    ) -> Answer:
        """Send a request; ``token=True`` uses the API's token, ``None`` sends none."""
        bearer = self.token if token is True else token
        headers = {"Authorization": f"Bearer {bearer}"} if isinstance(bearer, str) else {}
        extra: dict[str, Any] = {}
        if timeout is not None:
            extra["timeout"] = aiohttp.ClientTimeout(total=timeout)
        async with self._client().request(
            method, f"http://localhost{path}", json=body, headers=headers, **extra
        ) as resp:
            return Answer(resp.status, await resp.text())

    async def get(self, path: str, **kwargs: Any) -> Answer:
        """``GET path``."""
        return await self.request("GET", path, **kwargs)

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON of a 2xx answer (fails the test on anything else)."""
        answer = await self.request(method, path, body)
        assert 200 <= answer.status < 300, f"{method} {path}: {answer.status} {answer.text}"
        return answer.json

    async def connector(self, cid: str) -> dict[str, Any]:
        """``GET /connectors/{cid}``."""
        result: dict[str, Any] = await self.ok("GET", f"/connectors/{cid}")
        return result

    async def runs(self, cid: str) -> list[dict[str, Any]]:
        """The connector's runs, newest first."""
        result: list[dict[str, Any]] = (await self.ok("GET", f"/connectors/{cid}/runs"))["data"]
        return result

    async def healthy(self) -> bool:
        """True when ``GET /healthz`` answers 200."""
        try:
            return (await self.get("/healthz", timeout=2.0)).status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def close(self) -> None:
        """Close the session."""
        if self._session is not None:
            await self._session.close()
            self._session = None


# --- processes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """A finished CLI command."""

    code: int
    stdout: str
    stderr: str

    @property
    def last_line(self) -> str:
        """The last line of stdout."""
        lines = self.stdout.splitlines()
        return lines[-1] if lines else ""

    @property
    def json(self) -> Any:
        """stdout parsed as JSON (for ``--json`` commands)."""
        return json.loads(self.stdout)


class Process:
    """A ``syncd run`` (or wrapper) subprocess whose output lines are collected as they
    come, so the pipes never fill up and the test can inspect every log line."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []

    @property
    def pid(self) -> int:
        """The process id."""
        assert self._proc is not None
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has been reaped (``-N``: killed by signal N)."""
        return None if self._proc is None else self._proc.returncode

    @property
    def output(self) -> str:
        """Everything written so far, stdout then stderr."""
        return "".join(self.stdout) + "".join(self.stderr)

    async def start(self) -> None:
        """Start the process and the tasks that collect its output."""
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
        )
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._readers = [
            asyncio.create_task(self._collect(self._proc.stdout, self.stdout), name="stdout"),
            asyncio.create_task(self._collect(self._proc.stderr, self.stderr), name="stderr"),
        ]

    @staticmethod
    async def _collect(stream: asyncio.StreamReader, into: list[str]) -> None:
        while line := await stream.readline():
            into.append(line.decode("utf-8", errors="replace"))

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the process."""
        assert self._proc is not None
        self._proc.send_signal(sig)

    async def wait(self, timeout: float) -> int:
        """Wait for the exit (and the end of its output); the exit code."""
        assert self._proc is not None
        try:
            code = await asyncio.wait_for(self._proc.wait(), timeout)
        except TimeoutError:
            pytest.fail(f"{' '.join(self.argv)} still running after {timeout:g}s:\n{self.output}")
        await asyncio.gather(*self._readers)
        return code

    def log_events(self) -> list[dict[str, Any]]:
        """The JSON log lines (stderr) parsed; other lines are skipped."""
        events: list[dict[str, Any]] = []
        for line in self.stderr:
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    events.append(value)
        return events

    async def close(self) -> None:
        """Kill the process if it still runs, reap it and stop collecting."""
        if self._proc is None:
            return
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)


class Harness:
    """One test's syncd installation: a directory, its ``config.toml``, the daemons started
    on it, the CLI and an API client."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_path = root / "config.toml"
        self.db_path = root / "syncd.db"
        self.socket_path = root / "syncd.sock"
        self.token: str | None = None
        self.api = Api(self.socket_path)
        self._processes: list[Process] = []
        self._apis: list[Api] = [self.api]

    def write_config(self, **sections: Mapping[str, Any]) -> Path:
        """Write ``config.toml``: the embedded default in this directory, fast heartbeats,
        JSON logs and no scheduler ticks, updated with ``sections``."""
        data: dict[str, dict[str, Any]] = {
            "store": {"url": f"sqlite:///{self.db_path}"},
            "queue": {"url": "memory://"},
            "api": {"listen": f"unix:{self.socket_path}"},
            "scheduler": {"tick_seconds": 3600},
            "sync": {"heartbeat_seconds": 0.1},
            "daemon": {"grace_seconds": 5},
            "log": {"format": "json"},
        }
        for name, values in sections.items():
            data.setdefault(name, {}).update(values)
        self.config_path.write_text(toml_text(data), encoding="utf-8")
        return self.config_path

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Process:
        """A process owned by this harness (killed at teardown), not yet started."""
        process = Process(argv, base_environ(env), self.root)
        self._processes.append(process)
        return process

    def daemon_argv(self) -> list[str]:
        """``python -m syncd run --config <this config>``."""
        return [sys.executable, "-m", "syncd", "run", "--config", str(self.config_path)]

    async def start(self, env: Mapping[str, str] | None = None, *, ready: bool = True) -> Process:
        """Start ``syncd run`` on this configuration and wait until ``/healthz`` answers."""
        process = self.spawn(self.daemon_argv(), env)
        await process.start()
        if ready:
            await self.wait_ready(process, self.api)
        return process

    def client(self, socket_path: Path, token: str | None = None) -> Api:
        """Another API client (closed at teardown)."""
        api = Api(socket_path, token)
        self._apis.append(api)
        return api

    @staticmethod
    async def wait_ready(process: Process, api: Api, timeout: float = READY_TIMEOUT) -> None:
        """Wait until ``api`` answers ``/healthz``; fail at once if the process exits."""
        deadline = time.monotonic() + timeout
        while not await api.healthy():
            if process.returncode is not None:
                await process.wait(1.0)
                pytest.fail(f"syncd exited with {process.returncode}:\n{process.output}")
            if time.monotonic() > deadline:
                pytest.fail(f"syncd not ready after {timeout:g}s:\n{process.output}")
            await asyncio.sleep(POLL)

    async def cli(
        self, *args: str, env: Mapping[str, str] | None = None, config: bool = True
    ) -> Result:
        """Run ``syncd <args>`` (with ``--config`` unless told not to) to completion."""
        command, rest = args[0], args[1:]
        argv = [sys.executable, "-m", "syncd", command]
        if config:
            argv += ["--config", str(self.config_path)]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            *rest,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=base_environ(env),
            cwd=self.root,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            pytest.fail(f"syncd {' '.join(args)} did not finish in {CLI_TIMEOUT:g}s")
        assert proc.returncode is not None
        return Result(proc.returncode, out.decode(), err.decode())

    async def close(self) -> None:
        """Kill and reap every process, close every client."""
        for process in self._processes:
            await process.close()
        for api in self._apis:
            await api.close()


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    """A harness in a short temporary directory (a unix socket path is limited to about
    100 bytes, more than pytest's ``tmp_path`` can promise)."""
    root = Path(tempfile.mkdtemp(prefix="syncd-"))
    h = Harness(root)
    try:
        yield h
    finally:
        await h.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def source() -> AsyncIterator[SourceServer]:
    """25 records in pages of 10 (cursors ``None``, ``page-1``, ``page-2``)."""
    async with SourceServer(25, page_size=10) as server:
        yield server
