"""The instances of the SQLite store: each daemon incarnation's heartbeat, for ``GET /status``.
Every statement lives in :mod:`syncd.store.sqlite.sql`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from syncd.store.base import InstanceBeat
from syncd.store.codec import decode_dt, dump_json, encode_dt, load_json
from syncd.store.sqlite import sql
from syncd.store.sqlite.connection import SQLiteDatabase

__all__ = ["SQLiteInstances"]


class SQLiteInstances:
    """The instance verbs of the SQLite store, on the database it is given."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self._db = db

    async def heartbeat_instance(self, owner: str, info: Mapping[str, Any], now: datetime) -> None:
        """Upsert the instance's heartbeat row."""
        async with self._db.transaction() as tx:
            await tx.execute(sql.HEARTBEAT_INSTANCE, owner, dump_json(dict(info)), encode_dt(now))

    async def list_instances(self, since: datetime) -> list[InstanceBeat]:
        """Instances whose heartbeat is newer than ``since``, by owner."""
        rows = await self._db.reader.fetch_all(sql.LIST_INSTANCES, encode_dt(since))
        return [
            InstanceBeat(owner, load_json(info), heartbeat_at)
            for owner, info, at in rows
            if (heartbeat_at := decode_dt(at)) is not None  # always: a NOT NULL column
        ]

    async def remove_instance(self, owner: str) -> None:
        """Delete the instance's heartbeat row."""
        async with self._db.transaction() as tx:
            await tx.execute(sql.REMOVE_INSTANCE, owner)
