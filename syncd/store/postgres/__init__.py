"""The PostgreSQL state store, for production and several instances.

:class:`PostgresStore` (:mod:`~syncd.store.postgres.store`) is the backend; the other modules
are its plumbing (:mod:`~syncd.store.postgres.connection`: the asyncpg pools and the
translation of driver errors), its schema (:mod:`~syncd.store.postgres.migrations`) and every
statement it runs (:mod:`~syncd.store.postgres.sql`, with the document counters' in
:mod:`~syncd.store.postgres.counters_sql`).
"""

from syncd.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
