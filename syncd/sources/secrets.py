"""Secret references in source configs, and redaction of configs for display.

Header (and parameter) values may hold ``${env:NAME}`` or ``${file:/path}``: the reference is
stored, and resolved only when a request is sent, so the secret itself never reaches the
store, the API or the logs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from syncd.errors import SourceError

__all__ = ["REDACTED", "check_refs", "redact_source", "resolve_refs"]

REDACTED = "***"

_REF = re.compile(r"\$\{(?P<kind>[A-Za-z_]+):(?P<name>[^}]*)\}")
_SECRET_KEY = re.compile(
    r"token|secret|passw(or)?d|api[_-]?key|auth(orization)?$|credential|private[_-]?key|^key$",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^@/\s]*@")
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&](?:[^=&#\s]*(?:token|secret|passw(?:or)?d|api[_-]?key|signature)"
    r"[^=&#\s]*|key|sig)=)[^&#\s]*",
    re.IGNORECASE,
)
# Subtrees whose values are paths and parameter names, never secrets: masking them would
# only hide the configuration from the person reading it.
_NOT_SECRET_SUBTREES = frozenset({"pagination", "incremental", "records", "id_field"})


def check_refs(value: str) -> str | None:
    """A message describing the first malformed reference in ``value``, or ``None``."""
    for match in _REF.finditer(value):
        kind, name = match.group("kind"), match.group("name")
        if kind not in ("env", "file"):
            return f"unsupported reference {match.group(0)}: use ${{env:NAME}} or ${{file:/path}}"
        if not name.strip():
            return f"empty reference {match.group(0)}"
    return None


def resolve_refs(value: str, *, environ: Mapping[str, str] = os.environ) -> str:
    """``value`` with each ``${env:NAME}`` / ``${file:/path}`` replaced by its content.

    A file's trailing newline is dropped. A missing variable or unreadable file raises
    :class:`SourceError` naming the reference (never its value).
    """
    if "${" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        kind, name = match.group("kind"), match.group("name")
        ref = match.group(0)
        if kind == "env":
            resolved = environ.get(name)
            if resolved is None:
                raise SourceError(f"{ref}: environment variable {name} is not set")
            return resolved
        if kind == "file":
            try:
                with open(name, encoding="utf-8") as handle:
                    return handle.read().rstrip("\r\n")
            except OSError as exc:
                raise SourceError(f"{ref}: cannot read {name}: {exc.strerror or exc}") from None
            except UnicodeDecodeError:
                raise SourceError(f"{ref}: {name} is not UTF-8 text") from None
        raise SourceError(f"unsupported reference {ref}: use ${{env:NAME}} or ${{file:/path}}")

    return _REF.sub(replace, value)


def redact_source(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` safe to show: every header value, every value under a key like
    token/secret/password/api_key/authorization, and the password (or secret query
    parameters) of every URL become ``"***"``."""
    return {str(key): _redact(str(key), value) for key, value in config.items()}


def _redact(key: str, value: Any) -> Any:
    if key in _NOT_SECRET_SUBTREES:
        return value
    if key.lower() == "headers" and isinstance(value, Mapping):
        return {str(k): REDACTED for k in value}
    if value is not None and _SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, Mapping):
        return {str(k): _redact(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact("", item) for item in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def redact_url(text: str) -> str:
    """``text`` with URL passwords and secret-looking query parameters masked."""
    if "://" not in text and "=" not in text:
        return text
    text = _URL_PASSWORD.sub(rf"\g<head>:{REDACTED}@", text)
    return _QUERY_SECRET.sub(rf"\g<head>{REDACTED}", text)
