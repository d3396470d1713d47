"""The pure parts of the ``postgres`` indexer: names quoted, the table's statements, the shape
check's words, the rows written for documents, the config model, the secrets it registers,
the driver named when it is missing, and the indexers' lifecycle (closed when replaced,
forgotten or at stop)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from syncd.config.secrets import redact_config
from syncd.errors import SyncdError
from syncd.indexers.base import IndexerContext
from syncd.indexers.postgres import PostgresIndexer, PostgresIndexerConfig, postgres_secrets
from syncd.indexers.postgres.table import (
    COLUMNS,
    ColumnShape,
    RowError,
    TableShape,
    TableSpec,
    create_statements,
    delete_sql,
    document_row,
    parse_timestamp,
    quote_ident,
    quote_literal,
    shape_problems,
    upsert_sql,
)
from syncd.models import Connector, DocStatus, Document, DocumentFields, utcnow
from syncd.plugins import Indexers, Registry
from syncd.schema.fields import field_errors

NOW = utcnow()


def doc(**changes: Any) -> Document:
    base = Document("c1", "e1", DocStatus.RUNNING, "h", NOW, NOW, payload={"a": 1})
    return replace(base, **changes)


def good_shape(spec: TableSpec, config: str = "simple", **columns: ColumnShape) -> TableShape:
    cols = {name: ColumnShape(name, kind, False, False, "", None) for name, kind in COLUMNS}
    expr = (
        f"(setweight(to_tsvector('{config}'::regconfig, COALESCE(title, ''::text)), 'A'::\"char\")"
        f" || setweight(to_tsvector('{config}'::regconfig, COALESCE(text, ''::text)), 'B'))"
    )
    cols["search"] = ColumnShape("search", "tsvector", False, True, "s", expr)
    cols.update(columns)
    return TableShape("r", tuple(cols.values()), (frozenset({"connector_id", "external_id"}),))


def test_names_are_quoted_as_written() -> None:
    assert quote_ident('My "Docs"') == '"My ""Docs"""'
    assert quote_literal("it's") == "'it''s'"
    spec = TableSpec(table='we"ird', schema="Search")
    assert spec.qualified == '"Search"."we""ird"'
    assert spec.qualified in upsert_sql(spec) and spec.qualified in delete_sql(spec)
    long = TableSpec(table="t" * 63)
    assert len(long.index_name.encode()) <= 63 and long.index_name.endswith("_search")


def test_the_table_statements_follow_the_documented_schema() -> None:
    schema, table, index = create_statements(TableSpec(text_search_config="english"))
    assert schema == 'CREATE SCHEMA IF NOT EXISTS "public"'
    assert table.startswith('CREATE TABLE IF NOT EXISTS "public"."syncd_documents" (')
    for name, _ in COLUMNS:
        assert f'"{name}" ' in table
    assert '"updated_at" timestamptz' in table and '"metadata" jsonb NOT NULL' in table
    assert "to_tsvector('english'::regconfig, coalesce(title, '')), 'A'" in table
    assert "PRIMARY KEY (connector_id, external_id)" in table
    assert index.endswith("USING gin (search)")
    assert len(create_statements(TableSpec(full_text=False))) == 2


def test_the_shape_check_says_what_is_wrong() -> None:
    spec = TableSpec()
    assert shape_problems(good_shape(spec), spec, "simple") == []
    assert shape_problems(good_shape(spec, "english"), spec, "simple") == [
        "column search uses text search configuration english (needs simple)"
    ]
    # Without full text the search column is left alone.
    assert shape_problems(good_shape(spec, "english"), replace(spec, full_text=False), "x") == []
    bad = good_shape(
        spec,
        payload=ColumnShape("payload", "json", False, False, "", None),
        extra=ColumnShape("extra", "integer", True, False, "", None),
        search=ColumnShape("search", "tsvector", False, False, "", None),
    )
    bad = replace(bad, columns=tuple(c for c in bad.columns if c.name != "url"), keys=())
    assert shape_problems(bad, spec, "simple") == [
        "column url is missing (needs text)",
        "column payload is json (needs jsonb)",
        "no primary key or unique index on (connector_id, external_id)",
        "column search is not a generated column",
        "column extra is NOT NULL without a default",
    ]
    view = replace(good_shape(spec), relkind="v")
    assert shape_problems(view, spec, "simple") == [
        "public.syncd_documents is not a table (relkind 'v')"
    ]


def test_rows_carry_the_shape_or_say_why_postgres_would_refuse_them() -> None:
    row = document_row(doc())
    assert (row.title, row.text, row.url, row.updated_at, row.metadata) == (
        None,
        None,
        None,
        None,
        "{}",
    )
    assert row.payload == '{"a":1}'
    fields = DocumentFields(title="T", updated_at="2024-01-01T10:00:00", metadata={"k": [1]})
    row = document_row(doc(fields=fields, payload_json='{"a": 1}'))
    assert row.payload == '{"a": 1}'  # the stored text, as it is
    assert row.updated_at is not None and row.updated_at.isoformat() == "2024-01-01T10:00:00+00:00"
    assert row.metadata == '{"k":[1]}'
    with pytest.raises(RowError, match="payload contains \\\\u0000"):
        document_row(doc(payload={"a": "x\x00y"}))
    with pytest.raises(RowError, match="title contains NUL"):
        document_row(doc(fields=DocumentFields(title="a\x00")))
    # A backslash followed by "u0000" is not a NUL.
    assert document_row(doc(payload={"a": "\\u0000"})).payload == '{"a":"\\\\u0000"}'


def test_updated_at_is_parsed_when_it_is_a_timestamp() -> None:
    assert parse_timestamp("2024-05-01T10:00:00Z") is not None
    assert str(parse_timestamp("2024-05-01 10:00:00+02:00")) == "2024-05-01 10:00:00+02:00"
    assert parse_timestamp("yesterday") is None and parse_timestamp(None) is None


def test_the_config_model() -> None:
    ok = PostgresIndexerConfig.model_validate(
        {"type": "postgres", "dsn": "${env:DB}", "schema": "s", "table": "Docs"}
    )
    assert (ok.schema_, ok.table, ok.batch_size, ok.full_text) == ("s", "Docs", 500, True)
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"dsn": "***"}, "dsn", "Still masked"),
        ({"dsn": "mysql://h/db"}, "dsn", "postgresql://"),
        ({"dsn": "postgresql://h/db", "table": "x" * 64}, "table", "1-63 bytes"),
        (
            {"dsn": "postgresql://h/db", "text_search_config": "en glish"},
            "text_search_config",
            "text search",
        ),
        ({"dsn": "postgresql://h/db", "batch_size": 0}, "batch_size", ""),
        ({"dsn": "postgresql://h/db", "create_table": "yes"}, "create_table", "true or false"),
        ({"dsn": "postgresql://h/db", "tabel": "x"}, "tabel", ""),
    ]
    for body, key, message in cases:
        with pytest.raises(Exception) as info:
            PostgresIndexerConfig.model_validate({"type": "postgres", **body})
        errors = field_errors(info.value)  # type: ignore[arg-type]
        assert key in errors and message in errors[key], errors


def test_the_dsn_is_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_UNIT_DSN", "postgresql://u:s3cret-pw%21@db.internal:5432/app")
    config = {"type": "postgres", "dsn": "${env:PG_UNIT_DSN}", "table": "t"}
    found = postgres_secrets(config)
    assert {
        "s3cret-pw%21",
        "s3cret-pw!",
        "postgresql://u:s3cret-pw%21@db.internal:5432/app",
    } <= found
    assert redact_config(config)["dsn"] == "***"
    literal = {"type": "postgres", "dsn": "postgresql://u:pw-in-place@h/db"}
    assert redact_config(literal) == {"type": "postgres", "dsn": "***"}
    assert "pw-in-place" in postgres_secrets(literal)


def test_without_asyncpg_the_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # import asyncpg now raises ImportError
    context = IndexerContext("c1", transport=None)  # type: ignore[arg-type]
    with pytest.raises(SyncdError, match=r"pip install 'syncd\[postgres\]'"):
        PostgresIndexer({"type": "postgres", "dsn": "postgresql://h/db"}, context)
    problems = asyncio.run(
        PostgresIndexer.check({"type": "postgres", "dsn": "postgresql://h/d"}, context)
    )
    assert len(problems) == 1 and "postgres extra" in problems[0]


class Closing:
    closed: list[str] = []

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        self.name = str(config.get("name"))

    async def index(self, document: Document) -> None:
        return None

    async def aclose(self) -> None:
        Closing.closed.append(self.name)


def connector(cid: str, name: str) -> Connector:
    return Connector(cid, cid, {"type": "http"}, {"type": "closing", "name": name}, NOW, NOW)


async def test_indexers_are_closed_when_replaced_forgotten_or_at_stop() -> None:
    Closing.closed = []
    registry = Registry()
    registry.register_indexer("closing", Closing)
    indexers = Indexers(registry, lambda cid: IndexerContext(cid, transport=None))  # type: ignore[arg-type]
    first, _ = indexers(connector("a", "a1"))
    # Another change of the connector (its updated_at) keeps the instance.
    assert indexers(replace(connector("a", "a1"), updated_at=utcnow()))[0] is first
    indexers(connector("a", "a2"))  # the config changed: the old one is closed
    indexers(connector("b", "b1"))
    indexers(connector("c", "c1"))
    indexers.forget("b")
    await asyncio.sleep(0)
    assert sorted(Closing.closed) == ["a1", "b1"]
    await indexers.aclose()
    assert sorted(Closing.closed) == ["a1", "a2", "b1", "c1"]
