"""The control API (DESIGN.md §3): an aiohttp application over the daemon's operations."""

from syncd.api.app import build_app
from syncd.api.server import start_api

__all__ = ["build_app", "start_api"]
