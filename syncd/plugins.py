"""The registry of source and indexer kinds, and the built-in kinds it starts with.

A kind (:class:`~syncd.sources.base.SourceKind`, :class:`~syncd.indexers.base.IndexerKind`)
is everything syncd knows about a ``{"type": name, ...}`` config besides the code that runs
it: the factory, the model of its config (``config_model``: a pydantic model, from which
both the request validation and the JSON Schema come), which of its values are secrets, and
what it can do (capabilities). Each built-in kind declares its own, beside its code
(``syncd/sources/http/``, ``syncd/indexers/<kind>/``, each with its ``KIND``), and is
registered here by one line. Entry-point plugins (groups ``syncd.sources`` and
``syncd.indexers``) and kinds registered on an embedding daemon all land here the same way.

A plugin may register a :class:`SourceKind` / :class:`IndexerKind`, or a plain factory (a
class or a function ``factory(config, context)``). A plain factory is wrapped once, at
registration, with the capabilities its class declares (``indexed_on_commit``,
``needs_payload``, ``supports_delete``) and no config model: any object with its ``type`` is
accepted and the factory checks its config when it is built.

A ``config_model`` describes the config's keys (``type`` excluded, or declared as
``Literal[name]``): with ``model_config = ConfigDict(extra="forbid")`` unknown keys are
refused. Errors name their path (``source.count``) with pydantic's message; see
:mod:`syncd.schema` for field types with syncd's own messages.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from importlib.metadata import entry_points
from typing import Any

import structlog

from syncd.errors import ConfigError
from syncd.indexers import opensearch, pgvector, postgres, store, webhook
from syncd.indexers.base import (
    Indexer,
    IndexerCheck,
    IndexerContext,
    IndexerFactory,
    IndexerKind,
    indexer_secrets,
)
from syncd.models import Connector
from syncd.observability.logs import register_secret
from syncd.sources import http
from syncd.sources.base import SourceFactory, SourceKind, source_secrets

log = structlog.get_logger("syncd.plugins")

DEFAULT_SOURCE_KIND = "http"
DEFAULT_INDEXER_KIND = "store"


def builtin_source_kinds() -> list[SourceKind]:
    """The built-in source kinds."""
    return [http.KIND]


def builtin_indexer_kinds() -> list[IndexerKind]:
    """The built-in indexer kinds."""
    return [store.KIND, webhook.KIND, opensearch.KIND, postgres.KIND, pgvector.KIND]


def as_source_kind(name: str, plugin: SourceKind | SourceFactory) -> SourceKind:
    """``plugin`` as a kind named ``name`` (a plain factory is wrapped)."""
    if isinstance(plugin, SourceKind):
        return plugin if plugin.name == name else _renamed(plugin, name)
    return SourceKind(name, plugin, stateful=callable(getattr(plugin, "checkpoint", None)))


def as_indexer_kind(name: str, plugin: IndexerKind | IndexerFactory) -> IndexerKind:
    """``plugin`` as a kind named ``name`` (a plain factory is wrapped, its capabilities read
    from the attributes its class declares; an ``async def check(config, context)`` on it,
    a class or static method, is its :data:`IndexerCheck`)."""
    if isinstance(plugin, IndexerKind):
        return plugin if plugin.name == name else _renamed(plugin, name)
    return IndexerKind(
        name,
        plugin,
        indexed_on_commit=bool(getattr(plugin, "indexed_on_commit", False)),
        needs_payload=bool(getattr(plugin, "needs_payload", True)),
        supports_delete=callable(getattr(plugin, "delete", None)),
        check=_declared_check(plugin),
    )


def _declared_check(factory: IndexerFactory) -> IndexerCheck | None:
    """The ``async def check`` a factory class declares as a class or static method (an
    instance method cannot run without an instance)."""
    declared = inspect.getattr_static(factory, "check", None)
    if not isinstance(declared, (classmethod, staticmethod)):
        return None
    check: IndexerCheck | None = getattr(factory, "check", None)
    return check if inspect.iscoroutinefunction(check) else None


def _renamed(kind: Any, name: str) -> Any:
    return replace(kind, name=name)


class Registry:
    """The source and indexer kinds one daemon knows."""

    def __init__(
        self,
        sources: Iterable[SourceKind] = (),
        indexers: Iterable[IndexerKind] = (),
    ) -> None:
        self._sources: dict[str, SourceKind] = {k.name: k for k in sources}
        self._indexers: dict[str, IndexerKind] = {k.name: k for k in indexers}

    @classmethod
    def builtin(cls) -> Registry:
        """A registry of the built-in kinds: the ``http`` source, the ``store``, ``webhook``,
        ``opensearch``, ``postgres`` and ``pgvector`` indexers."""
        return cls(builtin_source_kinds(), builtin_indexer_kinds())

    def register_source(self, name: str, plugin: SourceKind | SourceFactory) -> None:
        """Add (or replace) the source kind ``name``."""
        self._sources[name] = as_source_kind(name, plugin)

    def register_indexer(self, name: str, plugin: IndexerKind | IndexerFactory) -> None:
        """Add (or replace) the indexer kind ``name``."""
        self._indexers[name] = as_indexer_kind(name, plugin)

    def load_entry_points(self) -> None:
        """Add the kinds installed under the ``syncd.sources`` / ``syncd.indexers``
        entry-point groups, except names already known (registered or built in win). A
        plugin that fails to load is logged and left out: it must not stop the daemon."""
        groups: tuple[tuple[str, Callable[[str, Any], None], dict[str, Any]], ...] = (
            ("syncd.sources", self.register_source, self._sources),
            ("syncd.indexers", self.register_indexer, self._indexers),
        )
        for group, register, known in groups:
            for ep in entry_points(group=group):
                if ep.name in known:
                    continue
                try:
                    register(ep.name, ep.load())
                except Exception as exc:
                    log.error("plugins.load_failed", group=group, name=ep.name, error=str(exc))

    @property
    def source_names(self) -> frozenset[str]:
        """Names of the known source kinds."""
        return frozenset(self._sources)

    @property
    def indexer_names(self) -> frozenset[str]:
        """Names of the known indexer kinds."""
        return frozenset(self._indexers)

    def find_source(self, name: str) -> SourceKind | None:
        """The source kind ``name``, or ``None``."""
        return self._sources.get(name)

    def find_indexer(self, name: str) -> IndexerKind | None:
        """The indexer kind ``name``, or ``None``."""
        return self._indexers.get(name)

    def source(self, config: Mapping[str, Any]) -> SourceKind:
        """The kind of a source config (``ConfigError`` naming ``source.type`` if unknown)."""
        name = str(config.get("type", DEFAULT_SOURCE_KIND))
        kind = self._sources.get(name)
        if kind is None:
            raise ConfigError("source.type", f"unknown source type {name!r}")
        return kind

    def indexer(self, config: Mapping[str, Any]) -> IndexerKind:
        """The kind of an indexer config (``ConfigError`` naming ``indexer.type`` if
        unknown)."""
        name = str(config.get("type", DEFAULT_INDEXER_KIND))
        kind = self._indexers.get(name)
        if kind is None:
            raise ConfigError("indexer.type", f"unknown indexer type {name!r}")
        return kind

    def secrets(self, source: Mapping[str, Any], indexer: Mapping[str, Any]) -> set[str]:
        """Every secret value of a connector's source and indexer configs (the generic
        rules for kinds this registry does not know)."""
        found: set[str] = set()
        s_kind = self._sources.get(str(source.get("type", DEFAULT_SOURCE_KIND)))
        i_kind = self._indexers.get(str(indexer.get("type", DEFAULT_INDEXER_KIND)))
        found.update((s_kind.secrets if s_kind else source_secrets)(source))
        found.update((i_kind.secrets if i_kind else indexer_secrets)(indexer))
        return found

    def register_secrets(self, source: Mapping[str, Any], indexer: Mapping[str, Any]) -> None:
        """Have the log redaction mask every secret of these configs (:meth:`secrets`): the
        one way a connector's secrets are registered — when it is created or patched, when
        the daemon starts, before its source or its indexer is built."""
        for value in self.secrets(source, indexer):
            register_secret(value)


class Indexers:
    """The indexers of this instance's connectors, built once per connector config.

    An indexer that is replaced (its connector's config changed) or forgotten (the
    connector deleted or patched) is closed (its ``aclose()``, when it has one) in a task
    this object owns; :meth:`aclose` closes the rest and waits for every close, when the
    daemon stops.
    """

    def __init__(
        self,
        registry: Registry,
        context: Callable[[str], IndexerContext],
    ) -> None:
        self._registry = registry
        self._context = context
        self._cache: dict[str, tuple[Any, Indexer, IndexerKind]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __call__(self, connector: Connector) -> tuple[Indexer, IndexerKind]:
        """The connector's indexer and its kind (``ConfigError`` for an unknown kind; what
        the factory raises when it cannot build one)."""
        # An instance depends on its config alone (and the connector's id): it is kept across
        # the connector's other changes, so its connections outlive a run.
        key = dict(connector.indexer)
        cached = self._cache.get(connector.id)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        kind = self._registry.indexer(connector.indexer)
        self._registry.register_secrets({}, connector.indexer)
        indexer = kind.factory(connector.indexer, self._context(connector.id))
        self._cache[connector.id] = (key, indexer, kind)
        if cached is not None:
            self._close_later(connector.id, cached[1])
        return indexer, kind

    def forget(self, connector_id: str) -> None:
        """Drop the connector's indexer (its config changed, or it was deleted)."""
        cached = self._cache.pop(connector_id, None)
        if cached is not None:
            self._close_later(connector_id, cached[1])

    async def aclose(self) -> None:
        """Close every indexer built here and wait for the closes under way."""
        cached, self._cache = self._cache, {}
        for connector_id, (_, indexer, _) in cached.items():
            self._close_later(connector_id, indexer)
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _close_later(self, connector_id: str, indexer: Indexer) -> None:
        close = getattr(indexer, "aclose", None)
        if close is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): nothing was opened on one
            return
        task = loop.create_task(
            _close_indexer(connector_id, close), name=f"indexer-close:{connector_id}"
        )
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


async def _close_indexer(connector_id: str, close: Callable[[], Awaitable[Any]]) -> None:
    try:
        await close()
    except Exception as exc:  # a close that fails must not stop the daemon's own stop
        log.warning("indexers.close_failed", connector_id=connector_id, error=str(exc))
