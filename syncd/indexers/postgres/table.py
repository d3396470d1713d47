"""The table of the ``postgres`` indexer: its documented schema, the SQL that creates it,
checks its shape, upserts and deletes a batch, and the rows written for documents. No I/O:
:mod:`syncd.indexers.postgres` runs what this module writes (every statement lives here, so
the schema and the queries are read side by side).

The table (``full_text: true`` adds ``search`` and its GIN index)::

    CREATE TABLE IF NOT EXISTS "public"."syncd_documents" (
        connector_id text NOT NULL,
        external_id  text NOT NULL,
        content_hash text NOT NULL,
        title        text,
        text         text,
        url          text,
        updated_at   timestamptz,
        metadata     jsonb NOT NULL DEFAULT '{}',
        payload      jsonb,
        indexed_at   timestamptz NOT NULL DEFAULT now(),
        search tsvector GENERATED ALWAYS AS (
            setweight(to_tsvector('simple'::regconfig, coalesce(title, '')), 'A') ||
            setweight(to_tsvector('simple'::regconfig, coalesce(text, '')), 'B')) STORED,
        PRIMARY KEY (connector_id, external_id)
    );
    CREATE INDEX IF NOT EXISTS "syncd_documents_search" ON ... USING gin (search);

Rows are keyed by connector id, so several connectors may share one table: each writes and
deletes only its own rows. A table that exists is never altered: :func:`shape_problems` says
what keeps it from taking the rows, and the indexer refuses it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from syncd.jsontext import canonical_json
from syncd.models import Document, DocumentFields

__all__ = [
    "COLUMNS",
    "DEFAULT_SCHEMA",
    "DEFAULT_TABLE",
    "DEFAULT_TEXT_SEARCH_CONFIG",
    "MAX_ERROR",
    "PRIVILEGES_SQL",
    "REGCONFIG_SQL",
    "SEARCH_COLUMN",
    "SHAPE_SQL",
    "Row",
    "RowError",
    "TableShape",
    "TableSpec",
    "create_statements",
    "delete_sql",
    "document_row",
    "lock_key",
    "parse_timestamp",
    "quote_ident",
    "quote_literal",
    "row_arrays",
    "search_expression",
    "shape_problems",
    "upsert_sql",
]

DEFAULT_SCHEMA = "public"
DEFAULT_TABLE = "syncd_documents"
#: ``simple`` lower-cases words and keeps them as they are written: no stemming, no stop
#: words, the same for every language. A connector of one language sets its own
#: (``english``, ``german`` …) to get stemming.
DEFAULT_TEXT_SEARCH_CONFIG = "simple"
SEARCH_COLUMN = "search"
#: Longest error text kept for a document.
MAX_ERROR = 500

#: The columns syncd writes, with their types as ``format_type`` shows them, in table order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("connector_id", "text"),
    ("external_id", "text"),
    ("content_hash", "text"),
    ("title", "text"),
    ("text", "text"),
    ("url", "text"),
    ("updated_at", "timestamp with time zone"),
    ("metadata", "jsonb"),
    ("payload", "jsonb"),
    ("indexed_at", "timestamp with time zone"),
)
_KEY = ("connector_id", "external_id")
_DDL_TYPES = {"timestamp with time zone": "timestamptz"}
_NOT_NULL = {
    "connector_id": "NOT NULL",
    "external_id": "NOT NULL",
    "content_hash": "NOT NULL",
    "metadata": "NOT NULL DEFAULT '{}'",
    "indexed_at": "NOT NULL DEFAULT now()",
}
#: PostgreSQL's identifier length (NAMEDATALEN - 1), in bytes.
MAX_IDENTIFIER_BYTES = 63


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (``"`` doubled): any name is taken as written."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """``text`` as a SQL string literal (``'`` doubled; with ``standard_conforming_strings``,
    on since PostgreSQL 9.1, a backslash is an ordinary character)."""
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class TableSpec:
    """Where the documents go and how the table looks: ``schema``.``table``, with the
    ``search`` column in ``text_search_config`` when ``full_text``."""

    table: str = DEFAULT_TABLE
    schema: str = DEFAULT_SCHEMA
    full_text: bool = True
    text_search_config: str = DEFAULT_TEXT_SEARCH_CONFIG

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TableSpec:
        """The spec of a ``postgres`` indexer config (its defaults for absent keys)."""
        return cls(
            table=str(config.get("table", DEFAULT_TABLE)),
            schema=str(config.get("schema") or DEFAULT_SCHEMA),
            full_text=bool(config.get("full_text", True)),
            text_search_config=str(config.get("text_search_config", DEFAULT_TEXT_SEARCH_CONFIG)),
        )

    @property
    def qualified(self) -> str:
        """``"schema"."table"``, quoted."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.table)}"

    @property
    def display(self) -> str:
        """``schema.table`` as a person reads it, for messages."""
        return f"{self.schema}.{self.table}"

    @property
    def index_name(self) -> str:
        """The GIN index's name: ``<table>_search``, or a digest of the table's name when
        that is longer than PostgreSQL keeps."""
        name = f"{self.table}_{SEARCH_COLUMN}"
        if len(name.encode()) <= MAX_IDENTIFIER_BYTES:
            return name
        digest = hashlib.sha256(self.table.encode()).hexdigest()[:16]
        return f"syncd_{digest}_{SEARCH_COLUMN}"


def search_expression(config: str) -> str:
    """The ``search`` column's generation expression in the text-search configuration
    ``config`` (title weighted ``A``, text ``B``)."""
    cfg = f"{quote_literal(config)}::regconfig"
    return (
        f"setweight(to_tsvector({cfg}, coalesce(title, '')), 'A') || "
        f"setweight(to_tsvector({cfg}, coalesce(text, '')), 'B')"
    )


def create_statements(spec: TableSpec) -> list[str]:
    """The statements that create the table (and its GIN index) when missing; each does
    nothing to one that exists."""
    lines = []
    for name, kind in COLUMNS:
        extra = _NOT_NULL.get(name)
        lines.append(
            f"{quote_ident(name)} {_DDL_TYPES.get(kind, kind)}{' ' + extra if extra else ''}"
        )
    if spec.full_text:
        lines.append(
            f"{quote_ident(SEARCH_COLUMN)} tsvector GENERATED ALWAYS AS "
            f"({search_expression(spec.text_search_config)}) STORED"
        )
    lines.append(f"PRIMARY KEY ({', '.join(_KEY)})")
    body = ",\n    ".join(lines)
    out = [
        f"CREATE SCHEMA IF NOT EXISTS {quote_ident(spec.schema)}",
        f"CREATE TABLE IF NOT EXISTS {spec.qualified} (\n    {body}\n)",
    ]
    if spec.full_text:
        out.append(
            f"CREATE INDEX IF NOT EXISTS {quote_ident(spec.index_name)} "
            f"ON {spec.qualified} USING gin ({SEARCH_COLUMN})"
        )
    return out


# --- the shape of an existing table ---------------------------------------------------------

#: The canonical name of a text-search configuration (``$1``), or an error (``42704``,
#: undefined object) when there is none of that name.
REGCONFIG_SQL = "SELECT $1::text::regconfig::text"

#: What :func:`shape_problems` reads of table ``$1``.``$2``: one row per column (name, type,
#: not null, has a default, generated, the generation expression) and, in ``keys``, the
#: column lists of its primary key and of its unique, non-partial indexes. No row: no table.
SHAPE_SQL = """
SELECT c.relkind::text AS relkind,
       a.attname::text AS name,
       format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null,
       a.atthasdef AS has_default,
       a.attgenerated::text AS generated,
       pg_get_expr(d.adbin, d.adrelid) AS expression,
       (SELECT coalesce(array_agg(
                   (SELECT string_agg(k.attname::text, ',' ORDER BY k.attname)
                      FROM pg_attribute k
                     WHERE k.attrelid = i.indrelid AND k.attnum = ANY(i.indkey))), '{}')
          FROM pg_index i
         WHERE i.indrelid = c.oid AND i.indisunique AND i.indpred IS NULL
           AND i.indexprs IS NULL) AS keys
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
 WHERE n.nspname = $1 AND c.relname = $2
 ORDER BY a.attnum
"""


#: The privileges among SELECT, INSERT, UPDATE and DELETE that the current user lacks on the
#: table ``$1`` (its quoted, qualified name).
PRIVILEGES_SQL = """
SELECT p FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p
 WHERE NOT has_table_privilege($1::text::regclass, p)
"""


def lock_key(spec: TableSpec) -> int:
    """The advisory lock (a signed 64-bit key) held while the table is created."""
    digest = hashlib.sha256(f"syncd.table:{spec.qualified}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class ColumnShape(NamedTuple):
    """One column of an existing table, as :data:`SHAPE_SQL` reads it."""

    name: str
    type: str
    not_null: bool
    has_default: bool
    generated: str  # "s": generated stored; "": an ordinary column
    expression: str | None


@dataclass(frozen=True)
class TableShape:
    """An existing table: its kind (``r`` table, ``p`` partitioned, ``v`` view …), its
    columns, and the column sets of its primary key and unique indexes."""

    relkind: str
    columns: tuple[ColumnShape, ...]
    keys: tuple[frozenset[str], ...]

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> TableShape | None:
        """The shape read by :data:`SHAPE_SQL` (``None``: no such table)."""
        if not rows:
            return None
        first = rows[0]
        columns = tuple(
            ColumnShape(
                r["name"],
                r["type"],
                bool(r["not_null"]),
                bool(r["has_default"]),
                r["generated"] or "",
                r["expression"],
            )
            for r in rows
            if r["name"] is not None
        )
        keys = tuple(frozenset(k.split(",")) for k in (first["keys"] or ()) if k)
        return cls(first["relkind"], columns, keys)


_REGCONFIG = re.compile(r"'((?:[^']|'')+)'::regconfig")


def shape_problems(shape: TableShape, spec: TableSpec, text_search_config: str) -> list[str]:
    """What keeps an existing table from taking syncd's rows, in words (``[]``: nothing).

    ``text_search_config`` is the canonical name of the configured one (:data:`REGCONFIG_SQL`),
    as PostgreSQL writes it in the ``search`` column's expression. Columns of the table that
    syncd does not write are fine as long as a row can be inserted without them (nullable, or
    with a default).
    """
    if shape.relkind not in ("r", "p"):
        return [f"{spec.display} is not a table (relkind {shape.relkind!r})"]
    problems: list[str] = []
    found = {c.name: c for c in shape.columns}
    for name, kind in COLUMNS:
        column = found.get(name)
        if column is None:
            problems.append(f"column {name} is missing (needs {kind})")
        elif column.type != kind:
            problems.append(f"column {name} is {column.type} (needs {kind})")
        elif column.generated:
            problems.append(f"column {name} is generated (syncd writes it)")
    if frozenset(_KEY) not in shape.keys:
        problems.append("no primary key or unique index on (connector_id, external_id)")
    search = found.get(SEARCH_COLUMN)
    if spec.full_text:
        if search is None:
            problems.append(f"column {SEARCH_COLUMN} is missing (full_text is true)")
        elif search.type != "tsvector":
            problems.append(f"column {SEARCH_COLUMN} is {search.type} (needs tsvector)")
        elif search.generated != "s":
            problems.append(f"column {SEARCH_COLUMN} is not a generated column")
        else:
            configs = {m.replace("''", "'") for m in _REGCONFIG.findall(search.expression or "")}
            if configs != {text_search_config}:
                got = ", ".join(sorted(configs)) or "none"
                problems.append(
                    f"column {SEARCH_COLUMN} uses text search configuration {got} "
                    f"(needs {text_search_config})"
                )
    written = {name for name, _ in COLUMNS}
    for column in shape.columns:
        if column.name in written or column.generated or column.name == SEARCH_COLUMN:
            continue
        if column.not_null and not column.has_default:
            problems.append(f"column {column.name} is NOT NULL without a default")
    return problems


# --- writing --------------------------------------------------------------------------------


def upsert_sql(spec: TableSpec) -> str:
    """One statement that upserts a batch from parallel arrays (:func:`row_arrays`) and
    returns the external id of each row written: ``$1`` connector ids, ``$2`` external ids,
    ``$3`` content hashes, ``$4`` titles, ``$5`` texts, ``$6`` urls, ``$7`` updated_at,
    ``$8`` metadata and ``$9`` payloads (JSON text, cast to ``jsonb`` by the server)."""
    names = [name for name, _ in COLUMNS]
    update = ", ".join(f"{n} = EXCLUDED.{n}" for n in names if n not in _KEY)
    return (
        f"INSERT INTO {spec.qualified} AS t ({', '.join(names)})\n"
        "SELECT d.connector_id, d.external_id, d.content_hash, d.title, d.text, d.url,"
        " d.updated_at, d.metadata::jsonb, d.payload::jsonb, now()\n"
        "  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],"
        " $7::timestamptz[], $8::text[], $9::text[])\n"
        "    AS d(connector_id, external_id, content_hash, title, text, url, updated_at,"
        " metadata, payload)\n"
        f"ON CONFLICT (connector_id, external_id) DO UPDATE SET {update}\n"
        "RETURNING t.external_id"
    )


def delete_sql(spec: TableSpec) -> str:
    """One statement that deletes a batch (``$1`` connector ids, ``$2`` external ids) and
    returns the external ids of the rows it removed."""
    return (
        f"DELETE FROM {spec.qualified} AS t\n"
        " USING unnest($1::text[], $2::text[]) AS d(connector_id, external_id)\n"
        " WHERE t.connector_id = d.connector_id AND t.external_id = d.external_id\n"
        "RETURNING t.external_id"
    )


class Row(NamedTuple):
    """The values one document writes (``updated_at`` parsed; JSON as text)."""

    connector_id: str
    external_id: str
    content_hash: str
    title: str | None
    text: str | None
    url: str | None
    updated_at: datetime | None
    metadata: str
    payload: str


class RowError(ValueError):
    """A document that PostgreSQL would refuse, and why."""


# ``\u0000`` written as an escape (an odd run of backslashes before ``u0000``): jsonb cannot
# hold it ("unsupported Unicode escape sequence").
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _has_json_nul(text: str) -> bool:
    # The substring first: the exact pattern is costly on long texts, and rarely needed.
    return "\\u0000" in text and _JSON_NUL.search(text) is not None


def _text(name: str, value: str | None) -> str | None:
    if value is not None and "\x00" in value:
        raise RowError(f"{name} contains NUL, which a PostgreSQL text value cannot hold")
    return value


def parse_timestamp(value: str | None) -> datetime | None:
    """``updated_at`` as a timestamp: ISO 8601 (``Z`` or an offset; without one, UTC).
    Anything else is ``None``: the column stays NULL, the value is still in the payload."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def document_row(document: Document) -> Row:
    """The row of ``document``: its shape (``None`` fields: NULL, no metadata: ``{}``) and
    its payload's JSON text.

    Raises :class:`RowError` for what PostgreSQL refuses, found before the batch is sent:
    ``\\u0000`` in the payload or metadata (jsonb cannot hold it) and NUL in a text field.
    The document fails with that reason; syncd's store still keeps it as it is.
    """
    fields = document.fields if document.fields is not None else DocumentFields()
    raw = document.payload_json
    payload = raw if raw is not None else canonical_json(document.payload).decode()
    if _has_json_nul(payload):
        raise RowError(
            "payload contains \\u0000, which PostgreSQL jsonb cannot hold "
            "(unsupported Unicode escape sequence)"
        )
    metadata = canonical_json(dict(fields.metadata)).decode() if fields.metadata else "{}"
    if _has_json_nul(metadata):
        raise RowError("metadata contains \\u0000, which PostgreSQL jsonb cannot hold")
    return Row(
        document.connector_id,
        document.external_id,
        document.content_hash,
        _text("title", fields.title),
        _text("text", fields.text),
        _text("url", fields.url),
        parse_timestamp(fields.updated_at),
        metadata,
        payload,
    )


def row_arrays(rows: Sequence[Row]) -> list[list[Any]]:
    """The nine parallel arrays :func:`upsert_sql` takes."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * 9
