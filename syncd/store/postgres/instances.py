"""The instances of the PostgreSQL store: each daemon incarnation's heartbeat, for
``GET /status``. Every statement lives in :mod:`syncd.store.postgres.sql`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from syncd.store import codec
from syncd.store.base import InstanceBeat
from syncd.store.postgres import sql
from syncd.store.postgres.connection import PostgresDatabase

__all__ = ["PostgresInstances"]


class PostgresInstances:
    """The instance verbs of the PostgreSQL store, on the database it is given."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def heartbeat_instance(self, owner: str, info: Mapping[str, Any], now: datetime) -> None:
        """Upsert the instance's heartbeat row."""
        await self._db.execute(sql.HEARTBEAT_INSTANCE, owner, codec.dump_json(dict(info)), now)

    async def list_instances(self, since: datetime) -> list[InstanceBeat]:
        """Instances whose heartbeat is newer than ``since``, by owner."""
        rows = await self._db.fetch_all(sql.LIST_INSTANCES, since)
        return [
            InstanceBeat(row["owner"], codec.load_json(row["info"]), row["heartbeat_at"])
            for row in rows
        ]

    async def remove_instance(self, owner: str) -> None:
        """Delete the instance's heartbeat row."""
        await self._db.execute(sql.REMOVE_INSTANCE, owner)
