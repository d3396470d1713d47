"""The built-in ``http`` source: a JSON API crawled page by page (DESIGN.md §8).

Its config model is in :mod:`.config` (pagination styles: :mod:`.pagination_config`, auth:
:mod:`.auth_config`), the source in :mod:`.source`, the pagination styles' runtime in
:mod:`.pagination`, the auth's in :mod:`.auth` (with :mod:`.oauth2`, :mod:`.tokencache` and
:mod:`.credentials`), the incremental marks in :mod:`.marks`, a backfill's window in
:mod:`.window`.
"""

from syncd.sources.base import SourceKind
from syncd.sources.http.config import HttpSourceConfig, validate_http_source
from syncd.sources.http.source import HttpSource, PageReport
from syncd.sources.http.window import read_mark

KIND = SourceKind(
    "http", HttpSource, config_model=HttpSourceConfig, stateful=True, read_mark=read_mark
)
"""The kind, as :func:`syncd.plugins.builtin_source_kinds` registers it."""

__all__ = ["KIND", "HttpSource", "HttpSourceConfig", "PageReport", "validate_http_source"]
