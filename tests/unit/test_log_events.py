"""One naming scheme for log events: ``component.event``, lowercase, in every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "syncd"
LEVELS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
EVENT = re.compile(r"[a-z][a-z0-9]*\.[a-z][a-z0-9_]*")


def log_events() -> list[tuple[str, int, str]]:
    """``(file, line, event)`` of every ``<logger>.<level>("literal", ...)`` call in syncd."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in LEVELS or not node.args:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((str(path.relative_to(PACKAGE)), node.lineno, first.value))
    return found


def test_every_log_event_is_component_dot_event() -> None:
    events = log_events()
    assert len(events) > 50  # the scan sees the package's log calls
    assert [e for e in events if not EVENT.fullmatch(e[2])] == []


def test_the_run_and_worker_events_keep_their_names() -> None:
    names = {event for _, _, event in log_events()}
    assert {"sync.started", "sync.ended", "worker.index_failed", "api.access"} <= names
