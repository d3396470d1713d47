"""Writing the flat TOML files that tests hand to ``syncd run``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def toml_text(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """A TOML document of flat tables."""
    lines: list[str] = []
    for name, table in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in table.items())
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")
