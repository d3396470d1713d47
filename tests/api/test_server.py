"""Serving the API: TCP (port 0), unix sockets, pre-bound sockets, and the refusal to listen
beyond loopback without a token."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import anyio
import pytest
from aiohttp import web

from syncd.api import start_api
from syncd.config import Config
from syncd.config.listen import is_loopback_host
from syncd.errors import ConfigError


def make_app() -> web.Application:
    async def ping(request: web.Request) -> web.Response:
        return web.json_response({"pong": True})

    app = web.Application()
    app.router.add_get("/ping", ping)
    return app


@pytest.fixture
async def runners() -> AsyncIterator[list[web.AppRunner]]:
    """Runners started by a test; cleaned up after it."""
    started: list[web.AppRunner] = []
    yield started
    for runner in started:
        await runner.cleanup()


async def ping(url: str, connector: aiohttp.BaseConnector | None = None) -> int:
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(url) as response,
    ):
        assert await response.json() == {"pong": True}
        return response.status


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for unix sockets (their paths are limited to ~107 bytes, which a
    deep pytest ``tmp_path`` can exceed); removed after the test."""
    path = Path(tempfile.mkdtemp(prefix="syncd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --- TCP ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("listen", "host"), [("127.0.0.1:0", "127.0.0.1"), ("[::1]:0", "::1")])
async def test_tcp_port_zero_is_read_back(
    runners: list[web.AppRunner], listen: str, host: str
) -> None:
    runner = await start_api(make_app(), listen, token=None)
    runners.append(runner)
    [address] = runner.addresses
    assert address[0] == host and address[1] > 0
    shown = f"[{host}]" if ":" in host else host
    assert await ping(f"http://{shown}:{address[1]}/ping") == 200


async def test_cleanup_stops_listening(runners: list[web.AppRunner]) -> None:
    runner = await start_api(make_app(), "127.0.0.1:0", token=None)
    port = runner.addresses[0][1]
    await runner.cleanup()
    with pytest.raises(aiohttp.ClientConnectionError):
        await ping(f"http://127.0.0.1:{port}/ping")


@pytest.mark.parametrize("listen", ["0.0.0.0:0", ":0", "[::]:0", "example.com:8765", "10.1.2.3:1"])
async def test_refuses_exposed_addresses_without_a_token(listen: str) -> None:
    with pytest.raises(ConfigError) as info:
        await start_api(make_app(), listen, token=None)
    assert info.value.key == "api.listen"
    assert "without an API token" in info.value.message


async def test_exposed_address_with_a_token(runners: list[web.AppRunner]) -> None:
    runner = await start_api(make_app(), "0.0.0.0:0", token="t0ken")
    runners.append(runner)
    [address] = runner.addresses
    assert address[0] == "0.0.0.0"
    assert await ping(f"http://127.0.0.1:{address[1]}/ping") == 200


async def test_a_port_in_use_is_a_config_error(runners: list[web.AppRunner]) -> None:
    first = await start_api(make_app(), "127.0.0.1:0", token=None)
    runners.append(first)
    port = first.addresses[0][1]
    with pytest.raises(ConfigError) as info:
        await start_api(make_app(), f"127.0.0.1:{port}", token=None)
    assert info.value.key == "api.listen"


@pytest.mark.parametrize(
    "listen",
    ["nonsense", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:http", "::1:80",
     "[::1]80", "[::1", "unix:"],
)  # fmt: skip
async def test_malformed_listen_addresses(listen: str) -> None:
    with pytest.raises(ConfigError) as info:
        await start_api(make_app(), listen, token=None)
    assert info.value.key == "api.listen"


async def test_every_interface_with_a_token(runners: list[web.AppRunner]) -> None:
    # ":port" binds every interface, as aiohttp does for host=None: reachable on loopback.
    runner = await start_api(make_app(), ":0", token="t0ken")
    runners.append(runner)
    # One socket per address family (each with its own free port when asked for port 0).
    assert runner.addresses
    for host, port, *_ in runner.addresses:
        loopback = "[::1]" if ":" in host else "127.0.0.1"
        assert await ping(f"http://{loopback}:{port}/ping") == 200


@pytest.mark.parametrize(
    "listen",
    [
        ":0",  # every interface: config once called it malformed, the server exposed
        "[::]:0",
        "0.0.0.0:0",
        "example.com:8765",
        "[nothost]:80",  # the server once tried to bind it
        "127.0.0.1:\u0668\u0660",  # Arabic-Indic digits: config once accepted port 80
        "exa mple:80",
        "8765",
        "::1:80",
        "unix:",
    ],
)
async def test_server_and_config_agree(listen: str) -> None:
    """One rule (syncd.config.listen): the same refusal, word for word, from the configuration and
    from the server handed the same string without a token."""
    with pytest.raises(ConfigError) as from_config:
        Config.from_mapping({"api": {"listen": listen}}, environ={})
    with pytest.raises(ConfigError) as from_server:
        await start_api(make_app(), listen, token=None)
    assert (from_server.value.key, from_server.value.message) == (
        from_config.value.key,
        from_config.value.message,
    )


async def test_every_interface_is_named_in_the_refusal() -> None:
    with pytest.raises(ConfigError) as info:
        await start_api(make_app(), ":8765", token=None)
    assert info.value.message.startswith("':8765' (every interface) is not a loopback address")


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", True),
        ("127.5.5.5", True),
        ("::1", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.168.1.1", False),
        ("localhost.example.com", False),
    ],
)
def test_is_loopback_host(host: str, expected: bool) -> None:
    assert is_loopback_host(host) is expected


# --- unix sockets ---------------------------------------------------------------------------


async def test_unix_socket_mode_0600(sock_dir: Path, runners: list[web.AppRunner]) -> None:
    path = str(sock_dir / "api.sock")
    runner = await start_api(make_app(), f"unix:{path}", token=None)
    runners.append(runner)
    assert runner.addresses == [path]
    mode = os.stat(path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    assert await ping("http://localhost/ping", aiohttp.UnixConnector(path=path)) == 200
    await runner.cleanup()
    runners.remove(runner)
    assert not await anyio.Path(path).exists()


async def test_a_stale_unix_socket_is_replaced(
    sock_dir: Path, runners: list[web.AppRunner]
) -> None:
    path = str(sock_dir / "api.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()  # the file stays, nobody listens: what a killed process leaves
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    runner = await start_api(make_app(), f"unix:{path}", token=None)
    runners.append(runner)
    assert await ping("http://localhost/ping", aiohttp.UnixConnector(path=path)) == 200


async def test_a_live_unix_socket_is_not_taken_over(
    sock_dir: Path, runners: list[web.AppRunner]
) -> None:
    path = str(sock_dir / "api.sock")
    runners.append(await start_api(make_app(), f"unix:{path}", token=None))
    with pytest.raises(ConfigError) as info:
        await start_api(make_app(), f"unix:{path}", token=None)
    assert "in use" in info.value.message
    # The first server still answers.
    assert await ping("http://localhost/ping", aiohttp.UnixConnector(path=path)) == 200


async def test_a_regular_file_is_not_removed(sock_dir: Path) -> None:
    path = str(sock_dir / "not-a-socket")
    await anyio.Path(path).write_text("keep me")
    with pytest.raises(ConfigError) as info:
        await start_api(make_app(), f"unix:{path}", token=None)
    assert "not a socket" in info.value.message
    assert await anyio.Path(path).read_text() == "keep me"


async def test_an_unbindable_unix_path_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        await start_api(make_app(), f"unix:{tmp_path}/missing-dir/api.sock", token=None)
    assert info.value.key == "api.listen"


# --- pre-bound sockets (systemd socket activation) ----------------------------------------


async def test_a_pre_bound_socket_is_served(runners: list[web.AppRunner]) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # ``listen`` is ignored when a socket is handed over.
    runner = await start_api(make_app(), "127.0.0.1:1", token=None, sock=sock)
    runners.append(runner)
    assert runner.addresses == [("127.0.0.1", port)]
    assert await ping(f"http://127.0.0.1:{port}/ping") == 200


async def test_a_pre_bound_unix_socket_is_served(
    sock_dir: Path, runners: list[web.AppRunner]
) -> None:
    path = str(sock_dir / "api.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    runner = await start_api(make_app(), "127.0.0.1:0", token=None, sock=sock)
    runners.append(runner)
    assert await ping("http://localhost/ping", aiohttp.UnixConnector(path=path)) == 200


async def test_an_exposed_pre_bound_socket_needs_a_token() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("0.0.0.0", 0))
        with pytest.raises(ConfigError) as info:
            await start_api(make_app(), "127.0.0.1:0", token=None, sock=sock)
        assert info.value.key == "api.listen"
    finally:
        sock.close()
