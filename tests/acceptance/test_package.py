"""syncd as a package: the wheel, what it ships, its optional drivers, ``syncd init``, and
``api.public_health``.

``test_the_wheel_installs_and_runs`` builds the wheel from a copy of the sources, installs it
(not editable, with its runtime dependencies from the package index) in a fresh virtualenv
and runs ``syncd init`` + ``syncd run`` from there: the slowest test of the suite (marked
``package``).
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import stat
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import AsyncIterator, Mapping, Sequence
from email.parser import Parser
from pathlib import Path

import pytest

import syncd
from syncd import data
from syncd.config import Config
from syncd.errors import ConfigError
from tests.acceptance.conftest import (
    REPO_ROOT,
    Api,
    Harness,
    Process,
    Result,
    base_environ,
)

#: What ``syncd init`` writes and where the original of each lives in the repository.
ORIGINALS = {data.CONFIG: REPO_ROOT / "config.toml"} | {
    name: REPO_ROOT / "systemd" / name for name in data.SYSTEMD_FILES
}

#: Imports the optional drivers fail, as when their extras are not installed.
NO_DRIVERS = "import sys; sys.modules.update(asyncpg=None, redis=None, hiredis=None); "

INSTALL_TIMEOUT = 300.0  # seconds for pip to build, or to install from the package index


async def command(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float = 30.0
) -> Result:
    """Run ``argv`` to completion."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail(f"{' '.join(argv)} did not finish in {timeout:g}s")
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def ok(result: Result, what: str) -> Result:
    """``result``, failing the test with its output unless it exited 0."""
    assert result.code == 0, f"{what} exited {result.code}:\n{result.stdout}{result.stderr}"
    return result


@pytest.fixture
async def tmp() -> AsyncIterator[Path]:
    """A short temporary directory (it holds a unix socket)."""
    root = Path(tempfile.mkdtemp(prefix="syncd-pkg-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- the shipped examples -----------------------------------------------------------


def test_the_shipped_examples_are_the_repositorys_files() -> None:
    # The README tells users to copy config.toml and systemd/*; the wheel ships copies in
    # syncd/data/ for `syncd init`. If this fails, copy the originals over:
    #   cp config.toml systemd/syncd.* syncd/data/
    units = {path.name for path in (REPO_ROOT / "systemd").glob("syncd.*")}
    assert units == set(data.SYSTEMD_FILES), "a new systemd file: add it to SYSTEMD_FILES"
    for name, original in ORIGINALS.items():
        assert data.example(name) == original.read_bytes(), f"syncd/data/{name} is stale"


async def test_init_writes_the_examples_and_never_overwrites_unasked(harness: Harness) -> None:
    result = await harness.cli("init", "--systemd", "units", config=False)
    written = {
        data.CONFIG: harness.root / "config.toml",
        **{name: harness.root / "units" / name for name in data.SYSTEMD_FILES},
    }
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"wrote {path.relative_to(harness.root)}" for path in written.values()
    ]
    for name, path in written.items():
        assert path.read_bytes() == ORIGINALS[name].read_bytes()
    env_mode = stat.S_IMODE((harness.root / "units" / "syncd.env.example").stat().st_mode)
    assert env_mode == 0o600  # it will hold secrets
    Config.load(str(written[data.CONFIG]), environ={})  # a valid configuration as written

    # Any file in the way: nothing is written, and the error names it.
    (harness.root / "units" / "syncd.socket").write_text("mine")
    (harness.root / "units" / "syncd.service").unlink()
    refused = await harness.cli("init", "--systemd", "units", config=False)
    assert refused.code == 2
    assert "config.toml" in refused.stderr and "units/syncd.socket" in refused.stderr
    assert "--force" in refused.stderr
    assert not (harness.root / "units" / "syncd.service").exists()
    assert (harness.root / "units" / "syncd.socket").read_text() == "mine"

    forced = await harness.cli("init", "--systemd", "units", "--force", config=False)
    assert forced.code == 0, forced.stderr
    assert (harness.root / "units" / "syncd.socket").read_bytes() == ORIGINALS[
        "syncd.socket"
    ].read_bytes()

    # --config (else $SYNCD_CONFIG) says where the configuration goes.
    other = await harness.cli("init", "--config", "etc/syncd.toml", config=False)
    assert other.code == 0 and other.stdout == "wrote etc/syncd.toml\n"
    from_env = await harness.cli("init", env={"SYNCD_CONFIG": "env.toml"}, config=False)
    assert from_env.code == 0 and (harness.root / "env.toml").is_file()


# --- optional drivers ---------------------------------------------------------------


async def test_a_missing_driver_is_a_configuration_error_naming_the_extra(
    harness: Harness,
) -> None:
    script = NO_DRIVERS + (
        "from syncd.store import open_store; from syncd.queue import open_queue\n"
        "for factory, url in ((open_store, 'postgresql://db/syncd'), (open_queue, 'redis://r')):\n"
        "    try: factory(url)\n"
        "    except Exception as exc: print(type(exc).__name__, exc)\n"
    )
    result = await command([sys.executable, "-c", script], cwd=harness.root, env=base_environ())
    assert ok(result, "open_store/open_queue").stdout.splitlines() == [
        "ConfigError store.url: PostgreSQL needs the asyncpg driver: pip install 'syncd[postgres]'",
        "ConfigError queue.url: Redis needs the redis driver: pip install 'syncd[redis]'",
    ]

    harness.write_config()
    argv = [sys.executable, "-c", NO_DRIVERS + "from syncd.cli import main; sys.exit(main())"]
    daemon = harness.spawn(
        [*argv, "run", "--config", str(harness.config_path)],
        {"SYNCD_QUEUE_URL": "redis://127.0.0.1:6379/0"},
    )
    await daemon.start()
    assert await daemon.wait(20.0) == 2
    assert "pip install 'syncd[redis]'" in daemon.output


async def test_the_embedded_default_runs_without_any_driver(harness: Harness) -> None:
    harness.write_config()
    argv = [sys.executable, "-c", NO_DRIVERS + "from syncd.cli import main; sys.exit(main())"]
    daemon = harness.spawn([*argv, "run", "--config", str(harness.config_path)])
    await daemon.start()
    await harness.wait_ready(daemon, harness.api)
    assert (await harness.api.get("/readyz")).status == 200
    daemon.send_signal(signal.SIGTERM)
    assert await daemon.wait(20.0) == 0, daemon.output


# --- api.public_health --------------------------------------------------------------


def test_public_health_is_a_boolean_key() -> None:
    assert Config.from_mapping({}).api.public_health is False
    assert Config.from_mapping({"api": {"public_health": True}}).api.public_health is True
    environ = {"SYNCD_API_PUBLIC_HEALTH": "true"}
    assert Config.from_mapping({}, environ=environ).api.public_health is True
    with pytest.raises(ConfigError, match=r"^api\.public_health: "):
        Config.from_mapping({"api": {"public_health": "yes"}})


@pytest.mark.parametrize("public_health", [False, True])
async def test_public_health_opens_readyz_to_probes(harness: Harness, public_health: bool) -> None:
    harness.token = "secret-token-0123456789"
    harness.write_config(api={"token": harness.token, "public_health": public_health})
    await harness.start()
    api = harness.api
    assert (await api.get("/healthz", token=None)).status == 200
    assert (await api.get("/readyz", token=None)).status == (200 if public_health else 401)
    assert (await api.get("/readyz", token=harness.token)).status == 200
    assert (await api.get("/connectors", token=None)).status == 401
    assert (await api.get("/metrics", token=None)).status == 401
    spec = (await api.get("/openapi.json", token=harness.token)).json
    readyz = spec["paths"]["/readyz"]["get"]
    assert ("401" in readyz["responses"]) is not public_health
    assert (readyz.get("security") == []) is public_health


# --- the wheel ----------------------------------------------------------------------


def _copy_sources(into: Path) -> Path:
    """What a build reads (so that building writes nothing into the work tree)."""
    src = into / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO_ROOT / name, src / name)
    shutil.copytree(
        REPO_ROOT / "syncd", src / "syncd", ignore=shutil.ignore_patterns("__pycache__")
    )
    return src


def _check_wheel(wheel: Path) -> None:
    version = syncd.__version__
    assert wheel.name == f"syncd-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = Parser().parsestr(archive.read(f"syncd-{version}.dist-info/METADATA").decode())
    expected = {
        f"syncd-{version}.dist-info/licenses/LICENSE",
        "syncd/py.typed",
        *(f"syncd/data/{name}" for name in ORIGINALS),
        *(f"syncd/ui/{name}" for name in ("index.html", "app.js", "app.css")),
        # Each backend's SQL, in one module (PostgreSQL's document counters in their own).
        "syncd/store/sqlite/sql.py",
        "syncd/store/postgres/sql.py",
        "syncd/store/postgres/counters_sql.py",
    }
    assert expected <= names, expected - names
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]
    assert metadata["Version"] == version
    assert metadata["License-Expression"] == "MIT"
    classifiers = metadata.get_all("Classifier") or []
    assert {"Typing :: Typed", "Framework :: AsyncIO"} <= set(classifiers)
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX field says it
    assert {"postgres", "redis"} <= set(metadata.get_all("Provides-Extra") or [])
    always = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert not [r for r in always if r.startswith(("asyncpg", "redis", "hiredis"))], always


@pytest.mark.package
@pytest.mark.timeout(2 * INSTALL_TIMEOUT)
async def test_the_wheel_installs_and_runs(tmp: Path) -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]  # single-sourced: syncd.__version__

    # Nothing from the work tree: no PYTHONPATH, and every command runs outside it.
    env = base_environ()
    env.pop("PYTHONPATH")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    src = _copy_sources(tmp)
    dist = tmp / "dist"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), "."]
    ok(await command(pip_wheel, cwd=src, env=env, timeout=INSTALL_TIMEOUT), "pip wheel")
    (wheel,) = dist.glob("*.whl")
    _check_wheel(wheel)

    venv = tmp / "venv"
    ok(await command([sys.executable, "-m", "venv", str(venv)], cwd=tmp, env=env), "venv")
    python, syncd_bin = venv / "bin" / "python", venv / "bin" / "syncd"
    install = [str(python), "-m", "pip", "install", "-q", str(wheel)]
    ok(await command(install, cwd=tmp, env=env, timeout=INSTALL_TIMEOUT), "pip install")

    probe = (
        "import importlib.util as u, syncd; print(syncd.__file__); "
        "print([m for m in ('asyncpg', 'redis', 'hiredis') if u.find_spec(m)])"
    )
    probed = ok(await command([str(python), "-c", probe], cwd=tmp, env=env), "probe")
    where, drivers = probed.stdout.splitlines()
    assert Path(where).is_relative_to(venv), where  # the installed copy, not the checkout
    assert drivers == "[]"  # the embedded default installs no database driver
    version = ok(await command([str(syncd_bin), "--version"], cwd=tmp, env=env), "--version")
    assert version.stdout.strip() == f"syncd {syncd.__version__}"

    # The README's way in, from the installed package alone.
    work = tmp / "work"
    work.mkdir()
    init = [str(syncd_bin), "init", "--systemd", "units"]
    ok(await command(init, cwd=work, env=env), "syncd init")
    assert (work / "config.toml").read_bytes() == ORIGINALS[data.CONFIG].read_bytes()
    for name in data.SYSTEMD_FILES:
        assert (work / "units" / name).read_bytes() == ORIGINALS[name].read_bytes()

    socket = tmp / "api.sock"
    run_env = {**env, "SYNCD_API_LISTEN": f"unix:{socket}", "SYNCD_LOG_FORMAT": "json"}
    daemon = Process([str(syncd_bin), "run", "--config", "config.toml"], run_env, work)
    api = Api(socket)
    try:
        await daemon.start()
        await Harness.wait_ready(daemon, api)
        assert (await api.get("/readyz")).status == 200
        assert (await api.get("/ui/")).status == 200  # the dashboard's assets are installed
        daemon.send_signal(signal.SIGTERM)
        assert await daemon.wait(20.0) == 0, daemon.output
    finally:
        await api.close()
        await daemon.close()
    assert (work / "var" / "syncd.db").is_file()  # the example's embedded store
