"""Sources: the plugin protocol (:mod:`.base`), synchronous sources run in threads
(:mod:`.threaded`) and the built-in ``http`` source (:mod:`.http`)."""

from syncd.sources.base import Source, SourceContext, SourceFactory, SourceKind, StatefulSource

__all__ = ["Source", "SourceContext", "SourceFactory", "SourceKind", "StatefulSource"]
