"""Validation of ``source.auth`` (DESIGN.md §8): field errors keyed ``source.auth.<key>``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from syncd.sources.secrets import REDACTED, check_refs

AUTH_TYPES = ("bearer", "basic", "api_key", "oauth2")
OAUTH2_GRANTS = ("client_credentials", "refresh_token")

# Keys of each auth type: required, optional. Strings unless listed in _NON_STRING.
_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "bearer": (frozenset({"token"}), frozenset()),
    "basic": (frozenset({"username", "password"}), frozenset()),
    "api_key": (frozenset({"in", "name", "value"}), frozenset()),
    "oauth2": (
        frozenset({"grant", "token_url", "client_id", "client_secret"}),
        frozenset({"refresh_token", "scopes", "audience", "extra", "client_auth"}),
    ),
}
_NON_STRING = frozenset({"scopes", "extra"})
# Form parameters syncd sets itself: ``extra`` may not replace them.
_RESERVED_FORM = frozenset(
    {"grant_type", "refresh_token", "scope", "audience", "client_id", "client_secret"}
)
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# The opening of a reference, whose colon is no part of the value (``${env:JIRA_EMAIL}``).
_REF_OPENING = re.compile(r"\$\{(?:env|file):")
# A token is renewed 30 s before it expires, or 10 % of its lifetime if that is shorter.
# Answers show masked values as "***" (secrets.shown_auth): sent back (a GET body PATCHed as it
# was), the mask would replace the secret. Refused, as ``syncd edit`` refuses it.
_MASKED = 'Still masked ("***"): write the secret or a ${env:NAME} / ${file:/path} reference'


def validate_auth(auth: Any) -> dict[str, str]:
    """Field errors of a ``source.auth`` value, keyed ``source.auth.<key>`` (``{}`` if valid)."""
    where = "source.auth"
    if not isinstance(auth, Mapping):
        return {where: "Must be an object"}
    kind = auth.get("type")
    if not isinstance(kind, str) or kind not in _FIELDS:
        return {f"{where}.type": f"Must be one of {', '.join(AUTH_TYPES)}"}
    required, optional = _FIELDS[kind]
    errors: dict[str, str] = {}
    for key, value in auth.items():
        if key == "type":
            continue
        if key not in required and key not in optional:
            errors[f"{where}.{key}"] = f"Unknown field for auth type {kind!r}"
        elif key not in _NON_STRING and (problem := _string_problem(value)):
            errors[f"{where}.{key}"] = problem
    for key in sorted(required - set(auth)):
        errors[f"{where}.{key}"] = "Field required"
    if errors:
        return errors
    if kind == "api_key":
        if auth["in"] not in ("header", "query"):
            errors[f"{where}.in"] = "Must be 'header' or 'query'"
        if "${" in auth["name"]:
            errors[f"{where}.name"] = "Must be a name, not a reference"
        elif auth["in"] == "header" and not _HEADER_NAME.fullmatch(auth["name"]):
            errors[f"{where}.name"] = "Invalid header name"
    elif kind == "basic" and ":" in _REF_OPENING.sub("", auth["username"]):
        # The resolved value is checked again when it is sent (basic_credentials).
        errors[f"{where}.username"] = "Must not contain ':'"
    elif kind == "oauth2":
        _check_oauth2(auth, errors)
    return errors


def is_http_url(url: str) -> bool:
    """Whether ``url`` is an http(s) URL with a host."""
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return False


def _string_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return "Must be a non-empty string"
    if value == REDACTED:
        return _MASKED
    if problem := check_refs(value):
        return problem
    if "\n" in value or "\r" in value:
        return "Must not contain line breaks"
    return None


def _check_oauth2(auth: Mapping[str, Any], errors: dict[str, str]) -> None:
    where = "source.auth"
    grant = auth["grant"]
    if grant not in OAUTH2_GRANTS:
        errors[f"{where}.grant"] = f"Must be one of {', '.join(OAUTH2_GRANTS)}"
    elif grant == "refresh_token" and "refresh_token" not in auth:
        errors[f"{where}.refresh_token"] = "Field required for grant 'refresh_token'"
    elif grant == "client_credentials" and "refresh_token" in auth:
        errors[f"{where}.refresh_token"] = "Only for grant 'refresh_token'"
    if "${" not in auth["token_url"] and not is_http_url(auth["token_url"]):
        errors[f"{where}.token_url"] = "Must be an http:// or https:// URL"
    scopes = auth.get("scopes")
    if scopes is not None and (
        not isinstance(scopes, list)
        or not all(isinstance(s, str) and s and " " not in s for s in scopes)
    ):
        errors[f"{where}.scopes"] = "Must be a list of non-empty strings without spaces"
    elif scopes is not None and REDACTED in scopes:
        errors[f"{where}.scopes"] = _MASKED
    extra = auth.get("extra")
    if extra is not None:
        if not isinstance(extra, Mapping):
            errors[f"{where}.extra"] = "Must be an object of strings"
        else:
            for key, value in extra.items():
                if key in _RESERVED_FORM or not isinstance(key, str) or not key:
                    errors[f"{where}.extra.{key}"] = "Reserved or invalid parameter name"
                elif problem := _string_problem(value):
                    errors[f"{where}.extra.{key}"] = problem
    if auth.get("client_auth", "basic") not in ("basic", "post"):
        errors[f"{where}.client_auth"] = "Must be 'basic' or 'post'"
