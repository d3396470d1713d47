"""One model of a connector, from which its validation and its JSON Schema both come.

- :mod:`syncd.schema.fields`: field types (each with its check, message and JSON Schema),
  the tagged unions of ``{"type": ...}`` configs, pydantic errors as ``{"path": message}``;
  :mod:`syncd.schema.secrets`: the type of a secret value.
- :mod:`syncd.schema.base`: ``KindConfig`` and ``TypeTagged``, what every config model builds
  on.
- :mod:`syncd.schema.connector`: ``ConnectorCreate`` / ``ConnectorPatch`` per registry of
  kinds, :func:`connector_file_schema` and :func:`model_json_schemas`.

Each kind's config model lives with its code (``syncd/sources/http/config.py``,
``syncd/indexers/<kind>/config.py``, a plugin's own): the connector models reach the models
through the registry of kinds they are given. :mod:`syncd.schema.spec` validates request
bodies through these models.
"""

from syncd.schema.base import KindConfig, TypeTagged
from syncd.schema.connector import (
    ConnectorModels,
    connector_file_schema,
    connector_models,
    model_json_schemas,
)
from syncd.schema.fields import field_errors, tagged_union, url_problem

__all__ = [
    "ConnectorModels",
    "KindConfig",
    "TypeTagged",
    "connector_file_schema",
    "connector_models",
    "field_errors",
    "model_json_schemas",
    "tagged_union",
    "url_problem",
]
