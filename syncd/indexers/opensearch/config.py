"""The config model of the ``opensearch`` indexer (DESIGN.md §7): the cluster, the index, the
auth (``basic``, ``api_key`` or ``bearer``), whether to create the index, the batch size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    WithJsonSchema,
    model_validator,
)

from syncd.observability.logs import MASK
from syncd.schema.base import KindConfig, TypeTagged
from syncd.schema.fields import (
    Flag,
    HttpUrl,
    absent,
    fail,
    int_between,
    pattern_of,
    validated_with,
)
from syncd.schema.patterns import compiled
from syncd.schema.secrets import MSG_MASKED, SecretText, secret_text, unmasked

__all__ = [
    "OPENSEARCH_BATCH_MAX",
    "OpenSearchApiKeyAuth",
    "OpenSearchBasicAuth",
    "OpenSearchBearerAuth",
    "OpenSearchIndexerConfig",
]

#: Most documents one ``_bulk`` request of the ``opensearch`` indexer carries.
OPENSEARCH_BATCH_MAX = 10_000
#: Index names the ``opensearch`` indexer writes to: the names both engines accept, in ASCII
#: (so that 255 characters are 255 bytes), not hidden (no leading ``.``).
INDEX_NAME_PATTERN = "^[a-z0-9][a-z0-9._-]{0,254}$"
_MSG_INDEX = (
    "Must be an index name: 1-255 lowercase letters, digits, '.', '_' or '-', starting with "
    "a letter or a digit"
)
# A reference, as check_refs accepts it (for the JSON Schema of an identity without ':').
_REF_TEXT = "\\$\\{(env|file):[^}\\u0000\\r\\n]*[^}\\s\\u0000\\r\\n][^}\\u0000\\r\\n]*\\}"
_NOT_A_REF = "\\$(?!\\{[A-Za-z_]+:[^}]*\\})"
_REFS = compiled("\\$\\{(?:env|file):[^}]*\\}")


def _index_name(value: Any) -> Any:
    if not isinstance(value, str) or not compiled(INDEX_NAME_PATTERN).fullmatch(value):
        fail(_MSG_INDEX)
    return value


def _identity(value: Any) -> Any:
    value = secret_text(value)
    # What Basic (and ApiKey's id:key) join with ':' must not hold one itself; references are
    # checked once resolved.
    if ":" in _REFS.sub("", value):
        fail("Must not contain ':'")
    return value


Identity = Annotated[
    str,
    BeforeValidator(_identity),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "pattern": f"^([^$:\\u0000\\r\\n]|{_NOT_A_REF}|{_REF_TEXT})*$",
            **unmasked(),
        }
    ),
]
"""A :data:`SecretText` without ``:`` outside its references (a username, an API key id)."""
IndexName = Annotated[str, BeforeValidator(_index_name), pattern_of(INDEX_NAME_PATTERN)]
OpenSearchBatchSize = Annotated[
    int,
    Field(strict=True, ge=1, le=OPENSEARCH_BATCH_MAX),
    BeforeValidator(int_between(1, OPENSEARCH_BATCH_MAX)),
]


class OpenSearchBasicAuth(KindConfig):
    """``Authorization: Basic base64(username:password)`` (a native or file realm user)."""

    type: Literal["basic"]
    username: Identity = Field(description="The user (no `:`).", examples=["syncd"])
    password: SecretText = Field(
        description="The password.", examples=["${file:/run/secrets/opensearch_password}"]
    )


_API_KEY_FORMS = "Give either `encoded`, or `id` and `api_key`"


def _api_key_problems(value: Any) -> list[tuple[tuple[str | int, ...], str]]:
    if not isinstance(value, Mapping):
        return []
    has = {key for key in ("encoded", "id", "api_key") if key in value}
    if "encoded" in has and has & {"id", "api_key"}:
        return [(("encoded",), f"{_API_KEY_FORMS}, not both")]
    if not has:
        return [(("encoded",), _API_KEY_FORMS)]
    if has == {"id"}:
        return [(("api_key",), "Field required with `id`")]
    if has == {"api_key"}:
        return [(("id",), "Field required with `api_key`")]
    return []


class OpenSearchApiKeyAuth(KindConfig):
    """``Authorization: ApiKey <encoded>`` (Elasticsearch: OpenSearch has no API keys): the
    ``encoded`` value of the create API key answer as it is, or ``base64(id:api_key)`` made
    from its ``id`` and ``api_key``."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["encoded"],
                    "not": {"anyOf": [{"required": ["id"]}, {"required": ["api_key"]}]},
                },
                {"required": ["id", "api_key"], "not": {"required": ["encoded"]}},
            ]
        }
    )

    type: Literal["api_key"]
    encoded: SecretText = absent(
        description="The encoded key, sent as it is (the `encoded` of the create API key answer).",
        examples=["${env:ES_API_KEY}"],
    )
    id: Identity = absent(description="The key's id (with `api_key`).")
    api_key: SecretText = absent(description="The key itself (with `id`).")

    @model_validator(mode="wrap")
    @classmethod
    def _forms(cls, value: Any, handler: ModelWrapValidatorHandler[OpenSearchApiKeyAuth]) -> Any:
        return validated_with(value, handler, _api_key_problems(value))


class OpenSearchBearerAuth(KindConfig):
    """``Authorization: Bearer <token>`` (a token service or OIDC/JWT realm token)."""

    type: Literal["bearer"]
    token: SecretText = Field(description="The token.", examples=["${env:ES_TOKEN}"])


OpenSearchAuth = Annotated[
    OpenSearchBasicAuth | OpenSearchApiKeyAuth | OpenSearchBearerAuth,
    TypeTagged("auth", unknown="Unknown field for auth type {type}"),
]


def _auth_unmasked(value: Any) -> Any:
    # Answers show the whole auth as the mask: sent back as it was shown, it is refused by name.
    if value == MASK:
        fail(MSG_MASKED)
    return value


class OpenSearchIndexerConfig(KindConfig):
    """Writes documents to an OpenSearch 2 or Elasticsearch 8 index through `POST /_bulk`:
    `_id` `<connector_id>:<external_id>` (a SHA-256 of the external id past 512 bytes), the
    source `connector_id`, `external_id`, `content_hash`, `title`, `text`, `url`, `updated_at`,
    `metadata`, `payload` (stored, not indexed) and `indexed_at`; per-document results;
    deletions. Mapping, results and retries: "The opensearch indexer" in docs/connectors.md."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "opensearch",
                    "url": "https://search.example.com:9200",
                    "index": "syncd-docs",
                    "auth": {
                        "type": "basic",
                        "username": "syncd",
                        "password": "${env:OPENSEARCH_PASSWORD}",
                    },
                }
            ]
        }
    )

    type: Literal["opensearch"]
    url: HttpUrl = Field(
        description="The cluster's URL (a path prefix is kept; query and fragment are not): "
        "http or https, with a host; port 1-65535.",
        examples=["https://search.example.com:9200"],
    )
    index: IndexName = Field(
        description="The index (or an alias with a write index) written to; several "
        "connectors may share one. 1-255 lowercase letters, digits, `.`, `_`, `-`, starting "
        "with a letter or digit.",
        examples=["syncd-docs"],
    )
    auth: Annotated[OpenSearchAuth | None, BeforeValidator(_auth_unmasked)] = Field(
        None,
        description="Authentication, by `type`: `basic`, `api_key` or `bearer`; every value "
        "may hold `${env:}` / `${file:}`, resolved per request. Answers show it as `***`.",
        examples=[{"type": "api_key", "encoded": "${env:ES_API_KEY}"}],
    )
    create_index: Flag = Field(
        True,
        description="Create the index with syncd's mapping when it does not exist. False: a "
        "missing index fails the documents. An existing index is never changed.",
    )
    batch_size: OpenSearchBatchSize = Field(
        100,
        description="Documents per `_bulk` request (at most the workers' `batch_size`). 1: "
        "one request per document.",
        examples=[500],
    )
