"""Running as a service: sd_notify and the watchdog, socket activation, secrets kept out of
logs and answers, and Prometheus metrics — all on the real ``syncd run`` process."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import signal
import socket
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.acceptance.conftest import STATE_TIMEOUT, Harness, Result, http_source, wait_until
from tests.integration.sourceserver import SourceServer

WATCHDOG_USEC = 200_000  # → a ping every 0.1 s


@dataclass(frozen=True)
class Datagram:
    """One sd_notify datagram and when it arrived (monotonic seconds)."""

    at: float
    lines: tuple[str, ...]


class NotifySocket:
    """A unix datagram socket standing in for systemd's ``NOTIFY_SOCKET``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.received: list[Datagram] = []
        self._arrived = asyncio.Condition()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.setblocking(False)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start receiving."""
        self._task = asyncio.create_task(self._receive(), name="notify-socket")

    async def _receive(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await loop.sock_recv(self._sock, 4096)
            async with self._arrived:
                self.received.append(Datagram(time.monotonic(), tuple(data.decode().split("\n"))))
                self._arrived.notify_all()

    async def wait_for(self, line: str, count: int = 1, timeout: float = STATE_TIMEOUT) -> Datagram:
        """The datagram carrying the ``count``-th ``line``, once it arrived."""
        async with asyncio.timeout(timeout), self._arrived:
            while True:
                hits = [d for d in self.received if line in d.lines]
                if len(hits) >= count:
                    return hits[count - 1]
                await self._arrived.wait()

    def lines(self) -> list[str]:
        """Every message received, in order."""
        return [line for d in self.received for line in d.lines]

    async def close(self) -> None:
        """Stop receiving and close the socket."""
        if self._task is not None:
            self._task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await self._task
        self._sock.close()


@pytest.fixture
async def notify_socket(harness: Harness) -> AsyncIterator[NotifySocket]:
    notify = NotifySocket(harness.root / "notify.sock")
    notify.start()
    yield notify
    await notify.close()


async def test_sd_notify_ready_watchdog_and_stopping(
    harness: Harness, notify_socket: NotifySocket
) -> None:
    harness.write_config()
    env = {"NOTIFY_SOCKET": str(notify_socket.path), "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    daemon = await harness.start(env, ready=False)

    ready = await notify_socket.wait_for("READY=1")
    # READY=1 is sent only once the API serves: it must answer right away.
    assert (await harness.api.get("/healthz")).status == 200
    assert f"STATUS=listening on unix:{harness.socket_path}" in ready.lines
    assert notify_socket.lines().count("READY=1") == 1

    third = await notify_socket.wait_for("WATCHDOG=1", count=3, timeout=5.0)
    first = await notify_socket.wait_for("WATCHDOG=1")
    pings = [d.at for d in notify_socket.received if "WATCHDOG=1" in d.lines]
    # Paced by the interval, not a burst: over the span seen, at most one ping per 0.1 s
    # (plus the first, plus one catch-up after a stall of the loop).
    span = pings[-1] - pings[0]
    assert len(pings) <= span / (WATCHDOG_USEC / 1e6) + 3, pings
    assert third.at - first.at > 0.05  # three pings take about two intervals

    assert "STOPPING=1" not in notify_socket.lines()
    daemon.send_signal(signal.SIGTERM)
    await notify_socket.wait_for("STOPPING=1")
    assert await daemon.wait(10.0) == 0
    assert notify_socket.lines().index("STOPPING=1") > notify_socket.lines().index("READY=1")


@pytest.mark.needs("systemd-socket-activate")
async def test_socket_activation_serves_the_passed_socket(harness: Harness) -> None:
    activator = shutil.which("systemd-socket-activate")
    assert activator, "systemd-socket-activate is required (Debian: package systemd)"
    harness.write_config()  # api.listen names syncd.sock: it must stay unused
    passed = harness.root / "activated.sock"
    argv = [activator, "-l", str(passed), *harness.daemon_argv()]
    daemon = harness.spawn(argv)
    await daemon.start()
    api = harness.client(passed)

    # systemd-socket-activate starts syncd on the first connection to the socket.
    async def listening() -> bool:
        assert daemon.returncode is None, daemon.output
        return passed.exists()

    await wait_until(listening, "systemd-socket-activate to bind the socket")
    await harness.wait_ready(daemon, api)

    health = await api.get("/healthz")
    assert health.status == 200
    assert (await api.get("/connectors")).json == {"data": [], "next_cursor": None}
    assert not harness.socket_path.exists()
    started = [e for e in daemon.log_events() if e.get("event") == "daemon.started"]
    assert len(started) == 1

    daemon.send_signal(signal.SIGTERM)
    assert await daemon.wait(10.0) == 0


def _canary(kind: str) -> str:
    return f"canary-{kind}-{uuid.uuid4().hex}"


async def test_secrets_never_leave_the_daemon(
    harness: Harness, source: SourceServer, postgres_dsn: str
) -> None:
    token, header, url_password, dsn_password = (
        _canary(k) for k in ("token", "header", "url", "dsn")
    )
    canaries = (token, header, url_password, dsn_password)
    # Trust authentication accepts any password: the DSN carries one all the same.
    store_url = postgres_dsn.replace("://postgres@", f"://postgres:{dsn_password}@", 1)
    assert dsn_password in store_url
    harness.write_config(store={"url": store_url}, log={"level": "debug", "format": "json"})
    harness.api.token = token
    env = {"SYNCD_API_TOKEN": token}
    daemon = await harness.start(env)
    assert (await harness.api.get("/connectors", token=None)).status == 401

    bodies: list[str] = []
    port = source.url.rsplit(":", 1)[1]
    definitions = {
        # aiohttp cannot send an Authorization header and URL credentials together, so
        # each secret gets its own connector.
        "with-header": http_source(source, headers={"Authorization": f"Bearer {header}"}),
        "with-password": http_source(
            source, url=f"http://reader:{url_password}@127.0.0.1:{port}/items"
        ),
    }
    ids: dict[str, str] = {}
    for name, src in definitions.items():
        answer = await harness.api.request(
            "POST", "/connectors", {"name": name, "source": src, "page_retries": 0}
        )
        assert answer.status == 201, answer.text
        bodies.append(answer.text)
        ids[name] = answer.json["id"]

    cli_results: list[Result] = []
    for name, cid in ids.items():
        source.fail_next(500)
        failed = await harness.cli("sync", name, "--follow", env=env)
        cli_results.append(failed)
        assert failed.code == 1, failed.stdout + failed.stderr
        assert failed.last_line.startswith("failed: HTTP 500")
        connector = await harness.api.get(f"/connectors/{cid}")
        bodies.append(connector.text)
        assert connector.json["status"] == "error"
        assert connector.json["last_error"].startswith("HTTP 500")
        shown_url = definitions[name]["url"].replace(url_password, "***")
        assert connector.json["source"]["url"] == shown_url
        runs = await harness.api.get(f"/connectors/{cid}/runs")
        bodies.append(runs.text)
        assert runs.json["data"][0]["outcome"] == "failed"
        shown = await harness.cli("show", cid, env=env)
        cli_results.append(shown)

    # The canaries were in the daemon's hands: the source received them.
    sent = [r.headers.get("Authorization") for r in source.requests]
    basic = base64.b64encode(f"reader:{url_password}".encode()).decode()
    assert sent == [f"Bearer {header}", f"Basic {basic}"]

    for path in ("/connectors", "/metrics", "/openapi.json", "/readyz"):
        answer = await harness.api.get(path)
        assert answer.status == 200, (path, answer.text)
        bodies.append(answer.text)
    for cid in ids.values():
        bodies.append((await harness.api.get(f"/connectors/{cid}/documents")).text)

    daemon.send_signal(signal.SIGTERM)
    assert await daemon.wait(10.0) == 0
    logs = daemon.output
    events = daemon.log_events()
    assert any(e.get("event") == "sync.failed" for e in events)  # the failure was logged
    for canary in canaries:
        assert canary not in logs, f"{canary} in the daemon's output"
        for body in bodies:
            assert canary not in body, f"{canary} in an API answer: {body[:300]}"
        for result in cli_results:
            assert canary not in result.stdout + result.stderr, f"{canary} in CLI output"
    # JSON-escaped or percent-encoded forms would leak just as well.
    for canary in canaries:
        assert json.dumps(canary)[1:-1] not in logs


async def test_metrics_after_a_sync_with_page_retries(
    harness: Harness, source: SourceServer
) -> None:
    harness.write_config()
    await harness.start()
    connector = await harness.api.ok(
        "POST",
        "/connectors",
        {
            "name": "items",
            "source": http_source(source),
            "page_retries": 3,
            "page_retry_backoff": 0.01,
            "retry_on_status": [500],
        },
    )
    source.fail_next(500, times=2)
    synced = await harness.cli("sync", connector["id"], "--follow")
    assert synced.code == 0 and synced.last_line == "succeeded", synced.stdout + synced.stderr

    answer = await harness.api.get("/metrics")
    assert answer.status == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }
    assert samples[("syncd_page_retries_total", ())] == 2
    manual_succeeded = (("outcome", "succeeded"), ("trigger", "manual"))
    assert samples[("syncd_runs_total", manual_succeeded)] == 1
    # Every other series (they are exported at 0 from the start) stays at 0.
    others = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "syncd_runs_total" and labels != manual_succeeded
    }
    assert others and set(others.values()) == {0}
    assert samples[("syncd_pages_fetched_total", ())] == 3
