"""The shipped systemd units: accepted by systemd-analyze and hardened to an "OK" rating.

systemd-analyze is required: a machine without it fails these tests instead of skipping
them, so that CI cannot silently stop checking the units.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs("systemd-analyze")

SYSTEMD_ANALYZE = "/usr/bin/systemd-analyze"
UNITS = Path(__file__).resolve().parents[2] / "systemd"
SERVICE = UNITS / "syncd.service"
SOCKET = UNITS / "syncd.socket"
ENV_EXAMPLE = UNITS / "syncd.env.example"

# systemd maps the exposure score (0.0-10.0) to a rating; these are the ratings at or
# better than "OK", which systemd gives to scores below 5.0.
GOOD_RATINGS = {"PERFECT", "SAFE", "OK"}


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SYSTEMD_ANALYZE, *args], capture_output=True, text=True, timeout=60, check=False
    )


def unit_settings(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file's settings; keys may repeat, so every value is kept in order."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_systemd_analyze_verify_accepts_the_units_without_any_warning() -> None:
    result = analyze("verify", str(SERVICE), str(SOCKET))
    assert result.returncode == 0, result.stderr
    # verify exits 0 on unknown keys and unparsable values, but reports them.
    assert result.stderr == ""
    assert result.stdout == ""


def test_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    # Guards the test above: the tool really reports mistakes in this environment.
    broken = tmp_path / "syncd.service"
    broken.write_text(SERVICE.read_text().replace("ProtectSystem=", "ProtectSistem="))
    result = analyze("verify", str(broken))
    assert "Unknown key 'ProtectSistem'" in result.stderr


def test_security_exposure_is_ok_or_better() -> None:
    result = analyze("security", "--offline=yes", "--no-pager", str(SERVICE))
    assert result.returncode == 0, result.stderr
    match = re.search(r"Overall exposure level for syncd\.service: (\d+\.\d) (\w+)", result.stdout)
    assert match is not None, result.stdout
    score, rating = float(match.group(1)), match.group(2)
    assert rating in GOOD_RATINGS, result.stdout
    assert score < 5.0, result.stdout


def test_service_is_a_notify_service_with_watchdog_and_state() -> None:
    service = unit_settings(SERVICE)["Service"]
    expected = {
        "Type": ["notify"],
        "NotifyAccess": ["main"],
        "ExecStart": ["/usr/bin/env syncd run --config /etc/syncd/config.toml"],
        "WatchdogSec": ["30"],
        "TimeoutStopSec": ["30"],
        "KillSignal": ["SIGTERM"],
        "Restart": ["on-failure"],
        "StateDirectory": ["syncd"],
        "WorkingDirectory": ["/var/lib/syncd"],
        "DynamicUser": ["yes"],
        "EnvironmentFile": ["-/etc/syncd/syncd.env"],
        "ProtectSystem": ["strict"],
        "NoNewPrivileges": ["yes"],
        "RestrictAddressFamilies": ["AF_UNIX AF_INET AF_INET6"],
        "CapabilityBoundingSet": [""],
        "SystemCallArchitectures": ["native"],
        "UMask": ["0077"],
    }
    assert {key: service.get(key) for key in expected} == expected
    assert service["SystemCallFilter"][0] == "@system-service"


def test_socket_listens_on_loopback_and_a_private_unix_socket() -> None:
    socket_unit = unit_settings(SOCKET)
    assert socket_unit["Socket"]["ListenStream"] == ["127.0.0.1:8765", "/run/syncd/syncd.sock"]
    assert socket_unit["Socket"]["SocketMode"] == ["0600"]
    assert socket_unit["Install"]["WantedBy"] == ["sockets.target"]


def test_environment_example_is_all_commented_key_value_lines() -> None:
    names = []
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = re.fullmatch(r"#([A-Z][A-Z0-9_]*)=(\S*)", line)
        if match:
            names.append(match.group(1))
        else:
            # Nothing is set by default: every other line is a comment or blank.
            assert not line or line.startswith("# "), f"unexpected line: {line!r}"
    assert {
        "SYNCD_STORE_URL",
        "SYNCD_QUEUE_URL",
        "SYNCD_API_LISTEN",
        "SYNCD_API_TOKEN",
        "SYNCD_HTTP_TIMEOUT_READ",
        "SYNCD_HTTP_TIMEOUT_CONNECT",
        "SYNCD_LOG_LEVEL",
    } <= set(names)
    assert [n for n in names if not n.startswith("SYNCD_")] == ["TICKETS_TOKEN"]
