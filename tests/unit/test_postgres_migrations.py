"""The PostgreSQL migrations' text never changes once released.

A database records only the versions it applied, so an edited migration would leave
databases migrated before and after the edit with different schemas. Migration 8 is built
from constants of another module (the counters' trigger function), where an edit is easy
to make by mistake: every released migration's text is pinned by its SHA-256. A new
migration adds its own line here; an existing line never changes.
"""

from __future__ import annotations

import hashlib

from syncd.store.postgres import migrations as postgres_migrations

RELEASED: dict[int, str] = {
    1: "f5aa348a493d5e24638e4de44f09dd7c0514a55f7f14855c545cf92da6d66377",
    2: "826751e46764fed0357e92515454057d6ae0a758d9ecb1a42ed4d09923638c4f",
    3: "81a92fe29e12f953ebb7b656292873800b15394840e4f750592199179b64803c",
    4: "a1467bf3ec06ce0c6bc037c2e97c3b7c3b136298946fd81d40aa77d478394b9d",
    5: "830aa8d8daf9e7a260797bdb53f6a5fb393e7b2a30c8c338e0d4ba0034581ca2",
    6: "99eef6a4b4e0456cf2281af26b46021652dcc9c59547f3e0c8b626a8be9b253d",
    7: "de830c0c7bad11b1cde55c301b440ac91a84dcedf9edae3d034d0e81515f34e0",
    8: "d67f350479186776089fa6af85bedca30b277feebf84471c972329ffc9cc46b1",
}


def test_released_migrations_are_unchanged() -> None:
    found = {
        version: hashlib.sha256(text.encode()).hexdigest()
        for version, text in postgres_migrations.MIGRATIONS
        if version in RELEASED
    }
    assert found == RELEASED


def test_versions_follow_each_other() -> None:
    versions = [version for version, _ in postgres_migrations.MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1))
