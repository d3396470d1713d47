"""Connector files: YAML or JSON, read the same way by every command that takes one.

The format is chosen by the extension (``.yaml``/``.yml``/``.json``), else (``-`` for stdin,
any other name) by content: JSON when it starts with ``{``, YAML otherwise. YAML is read with
``yaml.safe_load`` and must hold only what JSON can (string keys, no dates: quote them, finite
numbers), since the API takes JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TextIO

import yaml

__all__ = ["ConnectorFileError", "load_connector_file", "parse_connector_text"]


class ConnectorFileError(Exception):
    """A connector file that cannot be read or parsed; the message says why."""


def load_connector_file(file: str, stdin: TextIO) -> Any:
    """The content of connector file ``file`` (``-``: ``stdin``), YAML or JSON (see the
    module's docstring); :class:`ConnectorFileError` if it cannot be read or parsed."""
    name = "stdin" if file == "-" else file
    try:
        # utf-8-sig: a byte-order mark some editors write is not part of the content.
        text = stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConnectorFileError(
            f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    return parse_connector_text(text, name, suffix="" if file == "-" else Path(file).suffix)


def parse_connector_text(text: str, name: str, *, suffix: str = "") -> Any:
    """``text`` parsed as JSON or YAML: by ``suffix`` (``.json``, ``.yaml``, ``.yml``), else
    JSON when it starts with ``{``. ``name`` is the file's, for messages."""
    kind = {".json": "JSON", ".yaml": "YAML", ".yml": "YAML"}.get(suffix.lower())
    if kind is None:
        kind = "JSON" if text.lstrip().startswith("{") else "YAML"
    if kind == "JSON":
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            raise ConnectorFileError(f"{name} is not valid JSON: {exc}") from None
    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer of 5000 digits
        raise ConnectorFileError(f"{name} is not valid YAML: {_yaml_problem(exc)}") from None
    if value is None:
        raise ConnectorFileError(f"{name} is empty")
    problems = _not_json(value)
    if problems:
        raise ConnectorFileError(f"{name}: " + "; ".join(problems))
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _yaml_problem(exc: Exception) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem or exc.context}"
    return str(exc)


def _not_json(value: Any) -> list[str]:
    """What in a YAML document JSON cannot say (the API takes JSON), each with its path."""
    problems: list[str] = []
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        where, item, depth = stack.pop()
        at = where or "the document"
        if isinstance(item, dict | list) and depth > 64:  # e.g. an alias inside itself
            problems.append(f"{at}: nested too deeply")
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                if not isinstance(key, str):
                    problems.append(f"{at}: key {key!r} is not text (quote it)")
                stack.append((f"{where}.{key}" if where else str(key), child, depth + 1))
        elif isinstance(item, list):
            children = [
                (f"{where}.{i}" if where else str(i), c, depth + 1) for i, c in enumerate(item)
            ]
            stack.extend(reversed(children))
        elif isinstance(item, float) and not math.isfinite(item):
            problems.append(f"{at}: {item} is not a finite number")
        elif not (item is None or isinstance(item, str | int | float | bool)):
            kind = type(item).__name__
            hint = " (quote it to keep it as text)" if kind in ("date", "datetime") else ""
            problems.append(f"{at}: a YAML {kind} has no JSON form{hint}")
    return problems
