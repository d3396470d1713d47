"""Mappings for :mod:`tests.integration.searchserver`: what ``PUT /{index}`` accepts, how
``GET /{index}/_mapping`` shows a mapping, and how a document's source is checked against it
and extends it (dynamic mapping).

Written from the engines' public mapping references:

- https://www.elastic.co/docs/manage-data/data-store/mapping/dynamic-field-mapping — JSON
  strings become ``text`` with a ``keyword`` sub-field (``ignore_above: 256``), or ``date``
  when date detection (on by default, ``strict_date_optional_time``) matches them; integers
  ``long``, other numbers ``float``, booleans ``boolean``, objects ``object``; ``null`` and
  empty arrays add no field.
- https://www.elastic.co/docs/reference/elasticsearch/mapping-reference/dynamic — ``dynamic``
  ``true`` / ``false`` (fields kept in ``_source``, not mapped) / ``strict`` (the document is
  refused: ``strict_dynamic_mapping_exception``), inherited by inner objects.
- https://www.elastic.co/guide/en/elasticsearch/reference/current/dynamic-templates.html —
  ``match_mapping_type``, ``match``/``unmatch``, ``path_match``/``path_unmatch`` (a template
  with none of ``match_mapping_type``, ``match``, ``path_match`` matches nothing); templates
  are tried in order, the first that matches wins.
- https://www.elastic.co/docs/reference/elasticsearch/mapping-reference/enabled and
  https://docs.opensearch.org/latest/mappings/mapping-parameters/enabled — an object with
  ``enabled: false`` is not parsed at all: any value (an object or not) is kept in
  ``_source``.
- https://www.elastic.co/guide/en/elasticsearch/reference/8.11/date.html — ``date``'s
  default format ``strict_date_optional_time||epoch_millis``; a value that does not parse
  fails the document (``mapper_parsing_exception``).
- https://www.elastic.co/docs/reference/elasticsearch/mapping-reference/flattened and
  https://docs.opensearch.org/latest/mappings/supported-field-types/flat-object — the one
  engine's ``flattened`` is the other's ``flat_object`` (OpenSearch 2.7+).

Not modelled: analyzers, multi-fields beyond the dynamic ``keyword``, ``copy_to``, runtime
fields, ``ignore_malformed``, ``coerce: false``, numeric detection, custom date formats.
"""

from __future__ import annotations

import copy
import fnmatch
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MappingError", "index_source", "mapping_error", "shown"]

_COMMON_TYPES = {
    "text", "keyword", "match_only_text", "wildcard", "date", "date_nanos", "long", "integer",
    "short", "byte", "double", "float", "half_float", "scaled_float", "unsigned_long",
    "boolean", "binary", "ip", "object", "nested", "geo_point", "geo_shape", "alias",
    "search_as_you_type", "completion", "token_count", "rank_feature", "rank_features",
    "percolator", "join",
}  # fmt: skip
TYPES = {
    "opensearch": _COMMON_TYPES | {"flat_object", "knn_vector"},
    "elasticsearch": _COMMON_TYPES | {"flattened", "dense_vector", "constant_keyword", "version"},
}
_ROOT_KEYS = {
    "properties", "dynamic", "date_detection", "numeric_detection", "dynamic_templates",
    "dynamic_date_formats", "_source", "_meta", "_routing",
}  # fmt: skip
_STRINGS = {"text", "keyword", "match_only_text", "wildcard", "constant_keyword", "version"}
_INTEGERS = {"long", "integer", "short", "byte", "unsigned_long"}
_FLOATS = {"double", "float", "half_float", "scaled_float"}
_DATE = re.compile(
    r"\d{4}(?:-(?:0[1-9]|1[0-2])(?:-(?:0[1-9]|[12]\d|3[01])(?:T(?:[01]\d|2[0-3])"
    r"(?::[0-5]\d(?::[0-5]\d(?:[.,]\d{1,9})?)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?)?)?)?"
)
_DATE_FORMAT = "strict_date_optional_time||epoch_millis"


class MappingError(Exception):
    """A document or mapping refused: ``type`` and ``reason`` of the engine's error, and
    its ``caused_by`` (or ``None``)."""

    def __init__(self, kind: str, reason: str, caused_by: Mapping[str, str] | None = None):
        super().__init__(reason)
        self.type, self.reason, self.caused_by = kind, reason, caused_by

    def error(self) -> dict[str, Any]:
        """The error object of an answer or an item."""
        out: dict[str, Any] = {"type": self.type, "reason": self.reason}
        if self.caused_by is not None:
            out["caused_by"] = dict(self.caused_by)
        return out


# --- PUT /{index} ---------------------------------------------------------------------------


def mapping_error(mappings: Any, flavor: str) -> MappingError | None:
    """Why ``PUT /{index}`` refuses ``mappings`` (``None``: it is a mapping)."""
    if not isinstance(mappings, Mapping):
        return MappingError("mapper_parsing_exception", "Failed to parse mapping: not an object")
    unknown = sorted(set(mappings) - _ROOT_KEYS)
    if unknown:
        text = ", ".join(f"{k} : {mappings[k]}" for k in unknown)
        return MappingError(
            "mapper_parsing_exception",
            f"Root mapping definition has unsupported parameters:  [{text}]",
        )
    if mappings.get("dynamic", True) not in (True, False, "true", "false", "strict"):
        return MappingError("mapper_parsing_exception", "Failed to parse mapping: bad dynamic")
    return _properties_error(mappings.get("properties", {}), TYPES[flavor])


def _properties_error(props: Any, types: set[str]) -> MappingError | None:
    if not isinstance(props, Mapping):
        return MappingError("mapper_parsing_exception", "Failed to parse mapping: properties")
    for name, field in props.items():
        if not isinstance(field, Mapping):
            reason = f"Expected map for property [fields] on field [{name}] but got a {field}"
            return MappingError("mapper_parsing_exception", reason)
        kind = field.get("type", "object")
        if kind not in types:
            return MappingError(
                "mapper_parsing_exception",
                f"No handler for type [{kind}] declared on field [{name}]",
            )
        if kind in ("object", "nested") and (
            error := _properties_error(field.get("properties", {}), types)
        ):
            return error
    return None


# --- GET /{index}/_mapping --------------------------------------------------------------------


def shown(mappings: Mapping[str, Any]) -> dict[str, Any]:
    """``mappings`` as ``GET /{index}/_mapping`` shows them: ``dynamic`` as a string, an
    ``object`` with sub-fields without its ``type``."""
    out = copy.deepcopy(dict(mappings))
    if "dynamic" in out:
        out["dynamic"] = str(out["dynamic"]).lower()
    if "properties" in out:
        out["properties"] = {k: _shown_field(v) for k, v in out["properties"].items()}
    return out


def _shown_field(field: dict[str, Any]) -> dict[str, Any]:
    if field.get("type", "object") not in ("object", "nested"):
        return field
    if "dynamic" in field:
        field["dynamic"] = str(field["dynamic"]).lower()
    props = field.get("properties")
    if props:
        field["properties"] = {k: _shown_field(v) for k, v in props.items()}
        if field.get("type") == "object":
            del field["type"]
    else:
        field.pop("properties", None)
        field.setdefault("type", "object")
    return field


# --- indexing a document -----------------------------------------------------------------------


def index_source(mappings: Mapping[str, Any], source: Any, doc_id: str) -> dict[str, Any]:
    """The mappings after indexing ``source`` (extended by dynamic mapping); raises
    :class:`MappingError` for a document the mapping refuses."""
    if not isinstance(source, Mapping):
        raise MappingError(
            "mapper_parsing_exception",
            "failed to parse",
            {
                "type": "not_x_content_exception",
                "reason": "Compressor detection can only be "
                "called on some xcontent bytes or compressed xcontent bytes",
            },
        )
    out = copy.deepcopy(dict(mappings))
    out.setdefault("properties", {})
    if out.get("enabled", True) in (False, "false"):
        return out
    context = _Context(out, doc_id)
    context.object("", out, source, _dynamic(out.get("dynamic", True)))
    return out


def _dynamic(value: Any) -> str:
    return str(value).lower()


class _Context:
    def __init__(self, root: Mapping[str, Any], doc_id: str) -> None:
        self.doc_id = doc_id
        self.date_detection = root.get("date_detection", True) not in (False, "false")
        self.templates = [
            next(iter(t.items())) for t in root.get("dynamic_templates", []) if isinstance(t, dict)
        ]

    def object(
        self, path: str, node: dict[str, Any], value: Mapping[str, Any], dynamic: str
    ) -> None:
        props = node.setdefault("properties", {})
        for key, item in value.items():
            full = f"{path}.{key}" if path else str(key)
            field = props.get(key)
            if field is None:
                if item is None or item == []:
                    continue
                if dynamic == "false":
                    continue
                if dynamic == "strict":
                    raise MappingError(
                        "strict_dynamic_mapping_exception",
                        f"mapping set to strict, dynamic introduction of [{key}] within "
                        f"[{path or '_doc'}] is not allowed",
                    )
                field = props[key] = self.new_field(full, str(key), item)
            self.value(full, field, item, dynamic)

    def value(self, full: str, field: dict[str, Any], item: Any, dynamic: str) -> None:
        if item is None:
            return
        if isinstance(item, list):
            for element in item:
                self.value(full, field, element, dynamic)
            return
        kind = field.get("type", "object")
        if kind in ("object", "nested"):
            if field.get("enabled", True) in (False, "false"):
                return
            if not isinstance(item, Mapping):
                raise MappingError(
                    "mapper_parsing_exception",
                    f"object mapping for [{full}] tried to parse field [{full}] as object, but "
                    "found a concrete value",
                )
            self.object(full, field, item, _dynamic(field.get("dynamic", dynamic)))
        elif kind in _STRINGS and isinstance(item, Mapping):
            self.fail(
                full, kind, item, "illegal_state_exception", "Can't get text on a START_OBJECT"
            )
        elif kind in ("date", "date_nanos") and not _is_date(item):
            self.fail(
                full,
                kind,
                item,
                "illegal_argument_exception",
                f"failed to parse date field [{item}] with format [{_DATE_FORMAT}]",
            )
        elif kind in _INTEGERS | _FLOATS and not _is_number(item, kind in _INTEGERS):
            self.fail(full, kind, item, "number_format_exception", f'For input string: "{item}"')
        elif kind == "boolean" and item not in (True, False, "true", "false", ""):
            self.fail(
                full,
                kind,
                item,
                "illegal_argument_exception",
                f"Failed to parse value [{item}] as only [true] or [false] are allowed.",
            )

    def fail(self, full: str, kind: str, item: Any, cause: str, why: str) -> None:
        raise MappingError(
            "mapper_parsing_exception",
            f"failed to parse field [{full}] of type [{kind}] in document with id "
            f"'{self.doc_id}'. Preview of field's value: '{_preview(item)}'",
            {"type": cause, "reason": why},
        )

    def new_field(self, full: str, key: str, item: Any) -> dict[str, Any]:
        sample = next((i for i in item if i is not None), None) if isinstance(item, list) else item
        match sample:
            case bool():
                detected = "boolean"
            case int():
                detected = "long"
            case float():
                detected = "double"
            case Mapping():
                detected = "object"
            case str() if self.date_detection and _DATE.fullmatch(sample):
                detected = "date"
            case _:
                detected = "string"
        for _name, template in self.templates:
            if _matches(template, full, key, detected):
                mapping = copy.deepcopy(dict(template.get("mapping", {})))
                mapping.setdefault("type", _DEFAULT[detected].get("type", "object"))
                return mapping
        return copy.deepcopy(_DEFAULT[detected])


_DEFAULT: dict[str, dict[str, Any]] = {
    "string": {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}},
    "date": {"type": "date"},
    "long": {"type": "long"},
    "double": {"type": "float"},
    "boolean": {"type": "boolean"},
    "object": {"type": "object", "properties": {}},
}


def _matches(template: Mapping[str, Any], full: str, key: str, detected: str) -> bool:
    if not {"match_mapping_type", "match", "path_match"} & set(template):
        return False
    wanted = template.get("match_mapping_type", "*")
    if wanted != "*" and wanted != detected:
        return False
    tests = [("match", key, True), ("unmatch", key, False)]
    tests += [("path_match", full, True), ("path_unmatch", full, False)]
    for name, subject, positive in tests:
        if name in template and fnmatch.fnmatchcase(subject, template[name]) != positive:
            return False
    return True


def _is_date(item: Any) -> bool:
    if isinstance(item, bool):
        return False
    if isinstance(item, int):
        return True
    return isinstance(item, str) and (bool(_DATE.fullmatch(item)) or item.lstrip("-").isdigit())


def _is_number(item: Any, integer: bool) -> bool:
    if isinstance(item, bool):
        return False
    if isinstance(item, int | float):
        return True
    if not isinstance(item, str):
        return False
    try:
        float(item) if not integer else int(float(item))
    except ValueError:
        return False
    return True


def _preview(item: Any) -> str:
    if isinstance(item, Mapping):
        return "{" + ", ".join(f"{k}={_preview(v)}" for k, v in item.items()) + "}"
    return str(item)
