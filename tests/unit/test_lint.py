"""The package is `ruff` clean and `mypy --strict` clean: checked as part of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_check() -> None:
    result = _run("ruff", "check", "syncd", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = _run("mypy", "--strict", "syncd")
    assert result.returncode == 0, result.stdout + result.stderr
