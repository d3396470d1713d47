"""Sources: the plugin protocol and the built-in ``http`` source."""

from syncd.sources.base import Source, SourceContext, SourceFactory, StatefulSource
from syncd.sources.http import HttpSource, validate_http_source
from syncd.sources.secrets import redact_source, resolve_refs

BUILTIN_SOURCES: dict[str, SourceFactory] = {"http": HttpSource}
"""Source types available without plugins, by name."""

__all__ = [
    "BUILTIN_SOURCES",
    "HttpSource",
    "Source",
    "SourceContext",
    "SourceFactory",
    "StatefulSource",
    "redact_source",
    "resolve_refs",
    "validate_http_source",
]
