"""The example files shipped in the wheel, and :func:`write_examples` (``syncd init``).

``config.toml`` (the embedded default, every key documented) and the systemd units
``syncd.service``, ``syncd.socket`` and ``syncd.env.example`` are copies of the files at the
top of the repository, which the README points at; ``tests/acceptance/test_package.py``
keeps the copies identical. They are here so that an installed syncd (no checkout) can
write them out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["CONFIG", "SYSTEMD_FILES", "Example", "example", "plan", "write_examples"]

CONFIG = "config.toml"
"""The example configuration."""

SYSTEMD_FILES = ("syncd.service", "syncd.socket", "syncd.env.example")
"""The systemd units and the example environment file of ``syncd.service``."""

# Filled in, the environment file holds secrets (tokens, DSN passwords): owner-only, as the
# README's `install -Dm0600` makes it. The configuration stays world-readable, because the
# service's DynamicUser must read it in /etc/syncd.
_PRIVATE = frozenset({"syncd.env.example"})


@dataclass(frozen=True)
class Example:
    """One file to write: its name here and where it goes."""

    name: str
    target: Path


def example(name: str) -> bytes:
    """The content of the shipped file ``name`` (:data:`CONFIG` or one of
    :data:`SYSTEMD_FILES`)."""
    return resources.files(__name__).joinpath(name).read_bytes()


def plan(config: Path, systemd_dir: Path | None = None) -> list[Example]:
    """The files ``syncd init`` writes: the configuration to ``config`` and, with
    ``systemd_dir``, the units into that directory."""
    examples = [Example(CONFIG, config)]
    if systemd_dir is not None:
        examples += [Example(name, systemd_dir / name) for name in SYSTEMD_FILES]
    return examples


def write_examples(examples: list[Example], *, force: bool = False) -> list[Path]:
    """Write ``examples`` (creating missing directories); the paths written.

    Without ``force`` nothing is written when any target exists (``FileExistsError`` names
    them all), so a refused ``init`` leaves no half-written set behind.
    """
    existing = [e.target for e in examples if e.target.exists() or e.target.is_symlink()]
    if existing and not force:
        names = ", ".join(str(path) for path in existing)
        raise FileExistsError(f"{names}: already exists (--force overwrites)")
    for item in examples:
        item.target.parent.mkdir(parents=True, exist_ok=True)
        item.target.write_bytes(example(item.name))
        if item.name in _PRIVATE:
            os.chmod(item.target, 0o600)
    return [e.target for e in examples]
