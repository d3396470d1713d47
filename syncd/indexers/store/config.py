"""The config model of the ``store`` indexer: no options."""

from __future__ import annotations

from typing import Literal

from syncd.schema.base import KindConfig

__all__ = ["StoreIndexerConfig"]


class StoreIndexerConfig(KindConfig):
    """The default indexer: the store keeps each payload, served by the API. No options."""

    type: Literal["store"]
