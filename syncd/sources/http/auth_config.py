"""The config of ``source.auth`` (DESIGN.md §8): its check (:func:`validate_auth`, field
errors keyed ``source.auth.<key>``) and its JSON Schema, joined in :data:`AuthBridge`, the type
of ``HttpSourceConfig.auth``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BeforeValidator, WithJsonSchema

from syncd.config.secrets import check_refs
from syncd.observability.logs import MASK
from syncd.schema.fields import HEADER_NAME_PATTERN, NO_NUL, fail_at, ref_pattern
from syncd.schema.patterns import URL_PATTERN, compiled
from syncd.schema.secrets import MSG_MASKED, secret_text_schema, unmasked

__all__ = ["AUTH_TYPES", "OAUTH2_GRANTS", "AuthBridge", "is_http_url", "validate_auth"]

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
# The opening of a reference, whose colon is no part of the value (``${env:JIRA_EMAIL}``).
_REF_OPENING = re.compile(r"\$\{(?:env|file):")


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
        elif auth["in"] == "header" and not compiled(HEADER_NAME_PATTERN).fullmatch(auth["name"]):
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
    if value == MASK:
        # Answers show masked values as the mask (secrets.shown_auth): sent back (a GET body
        # PATCHed as it was), it would replace the secret. Refused, as ``syncd edit`` does.
        return MSG_MASKED
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
    elif scopes is not None and MASK in scopes:
        errors[f"{where}.scopes"] = MSG_MASKED
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


# --- the model's field ----------------------------------------------------------------


def _auth(value: Any) -> Any:
    if isinstance(value, Mapping) and not isinstance(value.get("type"), str | None):
        # validate_auth looks an object or array `type` up in a dict: a TypeError (500).
        fail_at([(("type",), f"Must be one of {', '.join(AUTH_TYPES)}")], value)
    if errors := validate_auth(value):
        fail_at([(tuple(path.split(".")[2:]), message) for path, message in errors.items()], value)
    return value


def _auth_schema() -> dict[str, Any]:
    """The JSON Schema of what :func:`validate_auth` accepts (held together by
    tests/api/test_fuzz.py)."""
    # Not the mask: sent back as an answer showed it, it would replace the secret.
    text = secret_text_schema()

    def style(name: str, required: dict[str, Any], **optional: Any) -> dict[str, Any]:
        return {
            "type": "object",
            "title": f"{name.title().replace('_', '')}Auth",
            "properties": {"type": {"const": name}, **required, **optional},
            "required": ["type", *required],
            "additionalProperties": False,
        }

    reserved = ["grant_type", "refresh_token", "scope", "audience", "client_id", "client_secret"]
    oauth2 = style(
        "oauth2",
        {
            "grant": {"enum": ["client_credentials", "refresh_token"]},
            # A reference is resolved per request, so only checked then.
            "token_url": {**text, "anyOf": [{"pattern": "\\$\\{"}, {"pattern": URL_PATTERN}]},
            "client_id": text,
            "client_secret": text,
        },
        refresh_token=text,
        audience=text,
        client_auth={"enum": ["basic", "post"]},
        scopes={
            "type": ["array", "null"],
            "items": {"type": "string", "pattern": "^[^ \\u0000]+$", **unmasked()},
        },
        extra={
            "type": ["object", "null"],
            "propertyNames": {"minLength": 1, "pattern": NO_NUL, "not": {"enum": reserved}},
            "additionalProperties": text,
        },
    )
    oauth2["oneOf"] = [
        {
            "properties": {"grant": {"const": "client_credentials"}},
            "not": {"required": ["refresh_token"]},
        },
        {"properties": {"grant": {"const": "refresh_token"}}, "required": ["refresh_token"]},
    ]
    api_key = style("api_key", {"in": {"enum": ["header", "query"]}, "name": text, "value": text})
    api_key["oneOf"] = [
        {
            "properties": {
                "in": {"const": "header"},
                "name": {"type": "string", "pattern": HEADER_NAME_PATTERN},
            }
        },
        {
            "properties": {
                "in": {"const": "query"},
                # A name, not a reference.
                "name": {"type": "string", "pattern": "^([^$\\r\\n\\u0000]|\\$(?!\\{))+$"},
            }
        },
    ]
    return {
        "description": "Source authentication, by `type` (DESIGN.md §8).",
        "oneOf": [
            style("bearer", {"token": text}),
            style(
                "basic",
                {
                    # No ':' but the one opening a reference (``${env:JIRA_EMAIL}``).
                    "username": {**text, "pattern": ref_pattern(":\\r\\n")},
                    "password": text,
                },
            ),
            api_key,
            oauth2,
        ],
    }


AuthBridge = Annotated[dict[str, Any], BeforeValidator(_auth), WithJsonSchema(_auth_schema())]
"""``source.auth`` until its styles have models: checked by
:func:`validate_auth`, described by :func:`_auth_schema`."""
