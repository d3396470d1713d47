"""The embedded state store: one SQLite file (DESIGN.md §1).

:class:`SQLiteStore` (:mod:`~syncd.store.sqlite.store`) is the backend; the other modules are
its plumbing (:mod:`~syncd.store.sqlite.connection`, :mod:`~syncd.store.sqlite.writer`), its
schema (:mod:`~syncd.store.sqlite.migrations`) and every statement it runs
(:mod:`~syncd.store.sqlite.sql`).
"""

from syncd.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
