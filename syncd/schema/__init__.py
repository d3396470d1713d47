"""One model of a connector, from which its validation and its JSON Schema both come.

- :mod:`syncd.schema.fields`: field types (each with its check, message and JSON Schema),
  the tagged unions of ``{"type": ...}`` configs, pydantic errors as ``{"path": message}``.
- :mod:`syncd.schema.base`: ``KindConfig`` and ``TypeTagged``, what every config model builds
  on.
- :mod:`syncd.schema.kinds`: the ``http`` source's config models (``HttpSourceConfig``);
  :mod:`syncd.schema.pagination`: its five pagination styles.
- :mod:`syncd.schema.indexers`: the built-in indexers' config models (``StoreIndexerConfig``,
  ``WebhookIndexerConfig``, ``OpenSearchIndexerConfig``, ``PostgresIndexerConfig``).
- :mod:`syncd.schema.connector`: ``ConnectorCreate`` / ``ConnectorPatch`` per registry of
  kinds, :func:`connector_file_schema` and :func:`model_json_schemas`.

:mod:`syncd.schema.spec` validates request bodies through these models.
"""

from syncd.schema.base import TypeTagged
from syncd.schema.connector import (
    ConnectorModels,
    connector_file_schema,
    connector_models,
    model_json_schemas,
)
from syncd.schema.fields import field_errors, tagged_union, url_problem
from syncd.schema.indexers import (
    OpenSearchIndexerConfig,
    PostgresIndexerConfig,
    StoreIndexerConfig,
    WebhookIndexerConfig,
)
from syncd.schema.kinds import HttpSourceConfig, Incremental, Timeout
from syncd.schema.pagination import (
    CursorPagination,
    LinkHeaderPagination,
    NextUrlPagination,
    OffsetPagination,
    PagePagination,
)

__all__ = [
    "ConnectorModels",
    "CursorPagination",
    "HttpSourceConfig",
    "Incremental",
    "LinkHeaderPagination",
    "NextUrlPagination",
    "OffsetPagination",
    "OpenSearchIndexerConfig",
    "PagePagination",
    "PostgresIndexerConfig",
    "StoreIndexerConfig",
    "Timeout",
    "TypeTagged",
    "WebhookIndexerConfig",
    "connector_file_schema",
    "connector_models",
    "field_errors",
    "model_json_schemas",
    "tagged_union",
    "url_problem",
]
