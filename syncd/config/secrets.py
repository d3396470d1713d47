"""Secrets in connector configs, shared by every kind: ``${env:}``/``${file:}`` references
and their resolution, the secret values of a config (and their registration with the log
redaction), and configs redacted for display.

Header (and parameter) values, and every value a kind declares a secret, may hold
``${env:NAME}`` or ``${file:/path}``: the reference is stored, and resolved only when it is
used (a request is sent, a connection opened), so the secret itself never reaches the
store, the API or the logs. :func:`register_connector_secrets` registers every secret value
of a connector (literal or resolved) with :mod:`syncd.observability.logs` as soon as the
connector is created or loaded, so that no log line or error text written before its first
request can show one.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from syncd.errors import SourceError
from syncd.observability.logs import MASK, mask_url_passwords, register_secret

__all__ = [
    "SecretsOf",
    "basic_credentials",
    "check_refs",
    "connector_secrets",
    "mask_body",
    "redact_config",
    "redact_source",
    "redact_url",
    "register_connector_secrets",
    "resolve_body",
    "resolve_refs",
    "resolve_secret",
    "shown_auth",
]

SecretsOf = Callable[[Mapping[str, Any]], Iterable[str]]
"""The secret values of a kind's config (literal or resolved), for the log redaction."""

_REF = re.compile(r"\$\{(?P<kind>[A-Za-z_]+):(?P<name>[^}]*)\}")
_SECRET_KEY = re.compile(
    r"token|secret|passw(or)?d|api[_-]?key|auth(orization)?$|credential|private[_-]?key|^key$|^dsn$",
    re.IGNORECASE,
)
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


def resolve_secret(key: str, value: str) -> str:
    """The configured ``auth.<key>`` with its references resolved (:class:`SourceError` when
    the result is empty or holds a line break)."""
    resolved = resolve_refs(value)
    # A file with several lines must not smuggle a header (or a form field) in.
    if "\n" in resolved or "\r" in resolved:
        raise SourceError(f"auth.{key}: resolved value contains a line break")
    if not resolved:
        raise SourceError(f"auth.{key}: resolved value is empty")
    return resolved


def basic_credentials(username: str, password: str) -> str:
    """The base64 part of ``Authorization: Basic``."""
    if ":" in username:
        raise SourceError("auth.username: resolved value contains ':'")
    return base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def redact_source(config: Mapping[str, Any]) -> dict[str, Any]:
    """A source's ``config`` safe to show: :func:`redact_config`, except that the ``auth`` of
    an ``http`` source shows its shape (:func:`shown_auth`) rather than one ``"***"``."""
    http = config.get("type", "http") == "http"
    return {
        str(key): shown_auth(value) if http and key == "auth" else _redact(str(key), value)
        for key, value in config.items()
    }


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` safe to show: every header value, every value under a key like
    token/secret/password/api_key/authorization, and the password (or secret query
    parameters) of every URL become ``"***"``."""
    return {str(key): _redact(str(key), value) for key, value in config.items()}


# What of ``source.auth`` (DESIGN.md §8) is shown, per type: the keys that say how a connector
# authenticates, never who it is or what it proves it with. Any other key, a key of an unknown
# type (its ``type`` included) and a value that is not plain text are shown as "***".
# ``username`` and ``client_id`` are masked too: they are identities, not the shape, and they
# may be secrets (several APIs take the API key as the Basic username; a client id is the user
# half of the client's Basic credentials). The log redaction does not register them (that would
# mask a name wherever it appears in a log): showing less than the logs is the safe side.
SHOWN_AUTH_KEYS: Mapping[str, frozenset[str]] = {
    "bearer": frozenset({"type"}),
    "basic": frozenset({"type"}),
    "api_key": frozenset({"type", "in", "name"}),
    "oauth2": frozenset(
        {"type", "grant", "token_url", "scopes", "audience", "client_auth", "extra"}
    ),
}


def shown_auth(auth: Any) -> Any:
    """``source.auth`` as every surface shows it (API, CLI, dashboard, events): the keys of
    :data:`SHOWN_AUTH_KEYS` for its type, every other value ``"***"``.

    A shown value is masked as well when it holds a ``${env:}``/``${file:}`` reference (what it
    resolves to may be a secret, and where it is read from is not for every reader); a URL's
    password and secret query values are masked as :func:`redact_url` does. ``extra`` (OAuth2
    form parameters) shows its names, each value ``"***"``, as ``headers`` do. ``None`` (no
    auth) stays ``None``; anything else that is not an object is ``"***"``.
    """
    if auth is None:
        return None
    if not isinstance(auth, Mapping):
        return MASK
    kind = auth.get("type")
    shown = SHOWN_AUTH_KEYS.get(kind, frozenset()) if isinstance(kind, str) else frozenset()
    return {
        str(key): _shown_auth_value(key, value) if key in shown else MASK
        for key, value in auth.items()
    }


def _shown_auth_value(key: str, value: Any) -> Any:
    if value is None:
        return None
    if key == "extra":
        return dict.fromkeys(map(str, value), MASK) if isinstance(value, Mapping) else MASK
    if key == "scopes":
        return [_shown_auth_text(s) for s in value] if isinstance(value, list | tuple) else MASK
    return _shown_auth_text(value)


def _shown_auth_text(value: Any) -> Any:
    if not isinstance(value, str) or "${" in value:
        return MASK
    return redact_url(value)


def _redact(key: str, value: Any) -> Any:
    if key in _NOT_SECRET_SUBTREES:
        return value
    if key == "body":
        return mask_body(value)
    if key.lower() == "headers" and isinstance(value, Mapping):
        return {str(k): MASK for k in value}
    if value is not None and _SECRET_KEY.search(key):
        return MASK
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
    text = mask_url_passwords(text)
    return _QUERY_SECRET.sub(rf"\g<head>{MASK}", text)


# Keys named like secrets that hold where a secret is, not the secret.
_NOT_SECRET_NAME = re.compile(r"(?:_file|_path|_url)$", re.IGNORECASE)
# Keys of ``source.auth`` (DESIGN.md §8, :mod:`syncd.sources.http.auth`) that describe the
# credential rather than hold it. Every other value is a secret, ``extra``'s too (a
# ``client_assertion`` is one); registering a username or audience would mask it everywhere.
_AUTH_DESCRIPTORS = frozenset(
    {
        "type",
        "in",
        "name",
        "grant",
        "token_url",
        "scopes",
        "audience",
        "username",
        "client_id",
        "client_auth",
    }
)


def register_connector_secrets(
    source: Mapping[str, Any],
    indexer: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
) -> None:
    """Register every secret of a connector with the log redaction
    (:func:`syncd.observability.logs.redact`).

    Call it when a connector is created, patched or loaded, and before a run builds its
    source: its secrets are then masked before any request is sent or any line is logged.
    A reference that cannot be resolved yet (variable unset, file missing) is skipped, not an
    error: the request that needs it fails with its own message, and the value is
    registered when it resolves. See :func:`connector_secrets` for what counts as a secret.
    """
    for value in connector_secrets(source, indexer, environ=environ):
        register_secret(value)


def connector_secrets(
    source: Mapping[str, Any],
    indexer: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
) -> set[str]:
    """The secret values of a connector's ``source`` and ``indexer`` configs, resolved.

    Secrets are: every header value; every query parameter that holds a reference or whose
    name looks like a secret (``api_key``, ``token`` …); the password of every URL; every
    value of ``source.auth`` but those naming the credential (``type``, ``username`` …);
    any string under a key named like a secret (plugin configs alike). A value with
    references counts both whole (resolved) and per resolved reference.
    """
    found: set[str] = set()
    for config in (source, indexer or {}):
        for value in _secret_values(config, top=True):
            found.update(_resolved_forms(value, environ))
    return {v for v in found if v.strip()}


def _secret_values(config: Mapping[str, Any], *, top: bool = False) -> Iterator[str]:
    for key, value in config.items():
        name = str(key)
        if top and name in _NOT_SECRET_SUBTREES:
            continue
        if name.lower() == "headers" and isinstance(value, Mapping):
            yield from (str(v) for v in value.values() if isinstance(v, str | int | float))
        elif name.lower() == "params" and isinstance(value, Mapping):
            for param, param_value in value.items():
                if isinstance(param_value, str) and (
                    "${" in param_value or _SECRET_KEY.search(str(param))
                ):
                    yield param_value
        elif top and name == "body":
            yield from _body_secrets("", value)
        elif top and name == "auth" and isinstance(value, Mapping):
            for field, field_value in value.items():
                if str(field) in _AUTH_DESCRIPTORS:
                    if isinstance(field_value, str):  # ``token_url`` may carry a password
                        yield from _url_secrets(field_value)
                elif isinstance(field_value, str):
                    yield field_value
                elif isinstance(field_value, Mapping):  # ``extra`` form parameters
                    yield from (str(v) for v in field_value.values() if isinstance(v, str))
        elif isinstance(value, str):
            if _SECRET_KEY.search(name) and not _NOT_SECRET_NAME.search(name):
                yield value
            else:
                yield from _url_secrets(value)
        elif isinstance(value, Mapping):
            yield from _secret_values(value)


def _body_secrets(key: str, value: Any) -> Iterator[str]:
    """The secrets of a request's JSON body: strings that hold references or sit under a
    key named like a secret, at any depth."""
    if isinstance(value, str):
        if "${" in value or (_SECRET_KEY.search(key) and not _NOT_SECRET_NAME.search(key)):
            yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _body_secrets(str(k), v)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _body_secrets(key, item)


def mask_body(value: Any, key: str = "") -> Any:
    """A request's JSON body safe to show: what :func:`_body_secrets` finds reads ``"***"``."""
    if isinstance(value, str):
        return MASK if next(_body_secrets(key, value), None) is not None else value
    if isinstance(value, Mapping):
        return {str(k): mask_body(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_body(item, key) for item in value]
    return value


def resolve_body(value: Any) -> Any:
    """A request's JSON body with the references in its strings resolved."""
    if isinstance(value, str):
        return resolve_refs(value)
    if isinstance(value, Mapping):
        return {str(k): resolve_body(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [resolve_body(item) for item in value]
    return value


def _url_secrets(text: str) -> Iterator[str]:
    """The password and the secret-looking query values of ``text`` if it is a URL."""
    if "://" not in text:
        return
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:
        return
    if password:
        yield password
        yield unquote(password)
    for name, value in parse_qsl(parts.query):
        if value and _SECRET_KEY.search(name):
            yield value


def _resolved_forms(value: str, environ: Mapping[str, str]) -> set[str]:
    """``value`` (resolved when every reference resolves) and each resolvable reference."""
    if "${" not in value:
        return {value}
    forms: set[str] = set()
    # A reference not resolvable yet is skipped: registered once a request resolves it.
    for ref in [*(m.group(0) for m in _REF.finditer(value)), value]:
        with contextlib.suppress(SourceError):
            forms.add(resolve_refs(ref, environ=environ))
    return forms
