"""The documents generated from the connector models and the route table — the OpenAPI
document and the JSON Schema of a connector file — are pinned by digest: a change of layout
(a model moved, a module split) must leave them byte for byte what they were.

A change that means to alter them updates the digests here, after looking at the
difference (``syncd schema`` before and after, say). Two things are left out of the
digest, as they depend on the machine and the release rather than on the code: the list of
time zone names (the system's tz database) and the version in ``info``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import syncd
from syncd.api.openapi import build_openapi
from syncd.api.routes import ROUTES
from syncd.plugins import Registry
from syncd.schema import connector_file_schema, model_json_schemas

OPENAPI_SHA256 = "f753724157e57f646b5540ea7c7b0efc23132c91790e8ed99c823ce5eba74d89"
CONNECTOR_FILE_SCHEMA_SHA256 = "b59f207d4ee6dafa066cf5752b118aee9227a0f2d9579b144d582ac60be0883c"

_ZONES = "<the time zones this machine knows>"


def _machine_free(value: Any) -> Any:
    """``value`` with the time zone pattern (``^(?:Africa/Abidjan|…)$``) replaced."""
    if isinstance(value, dict):
        return {k: _machine_free(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_machine_free(v) for v in value]
    if isinstance(value, str) and value.startswith("^(?:") and "|Europe/Paris|" in value:
        return _ZONES
    return value


def _digest(document: dict[str, Any]) -> str:
    text = json.dumps(_machine_free(document), indent=2, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_openapi_document_is_unchanged() -> None:
    document = build_openapi(
        ROUTES, connector_schemas=model_json_schemas(Registry.builtin()), version=syncd.__version__
    )
    document["info"]["version"] = "<version>"
    assert _digest(document) == OPENAPI_SHA256


def test_the_connector_file_schema_is_unchanged() -> None:
    assert _digest(connector_file_schema(Registry.builtin())) == CONNECTOR_FILE_SCHEMA_SHA256
